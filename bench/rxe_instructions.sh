#!/usr/bin/env bash
# rxe_instructions.sh — user-space instructions per 64 B RDMA WRITE on soft-RoCE (rxe),
# counted with callgrind, for four programs with the same options (RC, 64 B, not inline
# (-I 0: perftest's choice on rxe), a signaled WR every 16, SQ depth 128), post list 1
# and 32, all in ONE guest run of tests/rxe/run-in-vm.sh:
#   raw           bench/raw_verbs_write (plain libibverbs, two QPs of one process)
#   ib_write_bw   perftest's client (sender) against its server, --use_old_post_send
#   rdmakit-perf  tools/perf write_bw client (sender) against its own server
#   rdmakit_write bench/rdmakit_write: raw's loop on rdmakit's policy layer (the library
#                 without the tool)
#   rdmakit_write -P  the same with the WR (or list) prepared once, as raw and perftest post
#
#   bench/rxe_instructions.sh [BUILD_DIR]              (default: build)
#
# Builds nothing. Build first (a build with benchmarks and tools, libibverbs and
# valgrind's headers installed):
#   meson setup build-rxe -Dtests=disabled      (-O2 -g; not the README test command's -Og build)
#   ninja -C build-rxe bench/raw_verbs_write bench/rdmakit_write bench/librxe_window.so tools/rdmakit-perf
#
# What is counted (bench/README.md, "Instructions per WRITE on rxe"): the sender's
# instructions from its first ibv_post_send to the return of the poll that reaps its
# last completion, in every object except the LD_PRELOAD helper bench/rxe_window.cpp
# that marks that window, minus the provider's empty polls (their number × the cost of
# one, measured on the same CQ right after the window); the helper never returns an
# empty poll to the program, so no program runs an idle iteration of its loop.
#
# Environment: RXE_INSTR_WRS (WRs per run, default 8192, a multiple of 32),
# RXE_INSTR_LISTS ("1 32"), RXE_INSTR_OUT (results folder, kept; default
# BUILD_DIR/rxe-instructions; not under /tmp), RXE_INSTR_TIMEOUT (harness, 1500 s),
# RXE_INSTR_PROGRAMS ("raw perftest rdmakit rkloop rkprep"), RXE_INSTR_DUMP_INSTR=1 (dumps per
# instruction, for `callgrind_annotate --auto=yes` on OUT/NAME.cg.1). Extra arguments after BUILD_DIR go to
# run-in-vm.sh (e.g. --smp 1). Exit 0 only when every run completed and was counted.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
build_arg=${1:-build}
(($#)) && shift
build=$(cd -- "$build_arg" 2>/dev/null && pwd -P) || { echo "rxe_instructions: no build folder $build_arg" >&2; exit 2; }
raw=$build/bench/raw_verbs_write
shim=$build/bench/librxe_window.so
rk=$build/tools/rdmakit-perf
rkw=$build/bench/rdmakit_write
out=${RXE_INSTR_OUT:-$build/rxe-instructions}
wrs=${RXE_INSTR_WRS:-8192}
lists=${RXE_INSTR_LISTS:-"1 32"}
programs=${RXE_INSTR_PROGRAMS:-"raw perftest rdmakit rkloop rkprep"}

if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  for f in "$raw" "$rkw" "$shim" "$rk"; do
    [[ -e $f ]] || { echo "rxe_instructions: $f is missing; build it: ninja -C $build bench/raw_verbs_write bench/rdmakit_write bench/librxe_window.so tools/rdmakit-perf" >&2; exit 2; }
  done
  command -v valgrind >/dev/null || { echo "rxe_instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
  ((wrs % 32 == 0 && wrs > 0)) || { echo "rxe_instructions: RXE_INSTR_WRS must be a positive multiple of 32" >&2; exit 2; }
  case $out in /tmp/*) echo "rxe_instructions: RXE_INSTR_OUT must not be under /tmp (the guest's /tmp is private)" >&2; exit 2 ;; esac
  # The results folder is emptied before a run: only one this script made (it has the
  # marker file), or a new or empty one.
  if [[ -d $out && -n $(ls -A -- "$out") && ! -e $out/.rxe-instructions ]]; then
    echo "rxe_instructions: $out exists and was not made by this script; choose another RXE_INSTR_OUT" >&2
    exit 2
  fi
  rm -rf -- "$out" && mkdir -p -- "$out" && : >"$out/.rxe-instructions" || exit 2
  out=$(cd -- "$out" && pwd -P)
  start=$(date +%s)
  "$here/../tests/rxe/run-in-vm.sh" --timeout "${RXE_INSTR_TIMEOUT:-1500}" --out "$out" "$@" -- \
    env RXE_INSTR_WRS="$wrs" RXE_INSTR_LISTS="$lists" RXE_INSTR_PROGRAMS="$programs" RXE_INSTR_OUT="$out" \
    RXE_INSTR_DUMP_INSTR="${RXE_INSTR_DUMP_INSTR:-0}" \
    "$here/rxe_instructions.sh" "$build"
  rc=$?
  echo "rxe_instructions: guest run took $(($(date +%s) - start)) s (exit $rc); callgrind files in $out"
  exit "$rc"
fi

# ------------------------------------------------------------------ inside the guest
dev=${RDMAKIT_DEVICE:-rxe0}
gid=${RDMAKIT_GID_INDEX:-1}
res=$out/results
: >"$res"
dump_instr=no
[[ ${RXE_INSTR_DUMP_INSTR:-0} == 1 ]] && dump_instr=yes
failed=()
port=19600

echo "rxe_instructions: kernel $(uname -r), $dev GID $gid, $wrs WRs per run, post lists: $lists"
echo "rxe_instructions: $(valgrind --version), perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null)"
grep -m1 -o -w -E 'avx512f' /proc/cpuinfo >/dev/null && echo "rxe_instructions: the guest CPU has AVX-512 (valgrind hides it from the programs)"

listening() {
  local hex
  hex=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# count NAME L -- CMD... : CMD under callgrind with the window helper; leaves
# $out/NAME.cg.1 (window), $out/NAME.cg.2 (calibration), $out/NAME.stats, $out/NAME.log.
count() {
  local name=$1 l=$2 t0 rc; shift 3
  t0=$(date +%s)
  timeout 900 env LD_PRELOAD="$shim" RXE_WIN_WRS="$wrs" RXE_WIN_STATS="$out/$name.stats" RXE_WIN_CALIB=1000 \
    valgrind --tool=callgrind --collect-atstart=no --dump-instr="$dump_instr" --callgrind-out-file="$out/$name.cg" \
    "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "  $name: exit $rc, $(($(date +%s) - t0)) s: $*"
  return "$rc"
}

# start_server NAME SERVER_CMD... : starts the server on the next port, waits until it listens.
spid=
start_server() {
  local name=$1 i; shift
  port=$((port + 1))
  timeout 900 "$@" -p "$port" >"$out/$name.server.log" 2>&1 &
  spid=$!
  for ((i = 0; i < 600; i++)); do
    listening "$port" && return 0
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  echo "  $name: the server did not start listening:"; sed 's/^/    /' "$out/$name.server.log"
  return 1
}

run_one() {   # run_one PROGRAM L
  local p=$1 l=$2 name="$1.l$2" ok=1 src
  case $p in
    raw)
      count "$name" "$l" -- "$raw" -d "$dev" -x "$gid" -s 64 -n "$wrs" -l "$l" -Q 16 -t 128 -I 0 || ok=0 ;;
    perftest)
      local pt=(ib_write_bw -d "$dev" -x "$gid" -F -s 64 -n "$wrs" -l "$l" -Q 16 -t 128 -I 0 --use_old_post_send)
      if start_server "$name" "${pt[@]}"; then
        count "$name" "$l" -- "${pt[@]}" -p "$port" 127.0.0.1 || ok=0
        wait "$spid"; src=$?
        ((src == 0)) || { ok=0; echo "  $name: server exit $src"; sed 's/^/    /' "$out/$name.server.log"; }
      else ok=0; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; fi ;;
    rkloop)
      count "$name" "$l" -- "$rkw" -d "$dev" -s 64 -n "$wrs" -l "$l" || ok=0 ;;
    rkprep)
      count "$name" "$l" -- "$rkw" -d "$dev" -s 64 -n "$wrs" -l "$l" -P || ok=0 ;;
    rdmakit)
      local rkc=("$rk" write_bw -d "$dev" -x "$gid" -s 64 -n "$wrs" -l "$l" -Q 16 -t 128 -I 0 --no-progress --timeout 120000)
      if start_server "$name" "${rkc[@]}"; then
        count "$name" "$l" -- "${rkc[@]}" -p "$port" 127.0.0.1 || ok=0
        wait "$spid"; src=$?
        ((src == 0)) || { ok=0; echo "  $name: server exit $src"; sed 's/^/    /' "$out/$name.server.log"; }
      else ok=0; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; fi ;;
  esac
  if ((ok)) && python3 "$here/rxe_instructions.py" count "$out" "$name" "$wrs" >>"$res"; then
    return 0
  fi
  echo "  $name: FAILED; its output:"; sed 's/^/    /' "$out/$name.log" | tail -n 30
  failed+=("$name")
  return 1
}

for l in $lists; do
  for p in $programs; do
    run_one "$p" "$l"
  done
done

echo
python3 "$here/rxe_instructions.py" table "$res" "$wrs"
if ((${#failed[@]})); then
  echo "rxe_instructions: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "rxe_instructions: all runs completed"
