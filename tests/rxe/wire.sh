#!/usr/bin/env bash
# wire.sh — rdmakit against rdma-core's programs and perftest with each end on its own
# host: two qemu guests joined by one virtual Ethernet link (tests/rxe/two-hosts.sh).
#
#   tests/rxe/wire.sh BUILD_DIR       # from the host: boots the two guests
#
# Host a runs the servers, host b the clients, in the same order, one port per step.
# Steps: rdmakit-two-node (the two-node conformance scenarios: every RC/UC/UD opcode,
# multi-packet messages, RNR, retry, a bad rkey; one PASS/FAIL line each), rdmakit-pingpong
# and ibv_rc_pingpong in both directions, UC one way, UD both, rdmakit-perf write_bw against
# itself, and ib_write_bw against itself beside it (rdmakit-perf speaks its own exchange,
# not perftest's). Exit status 0 only when every step passed on both hosts.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# == 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
build=$(cd -- "$1" && pwd -P) || exit 2
for exe in tools/rdmakit-pingpong tools/rdmakit-perf tools/rdmakit-two-node; do
  [[ -x $build/$exe ]] || { echo "wire.sh: $build/$exe is not built" >&2; exit 2; }
done
if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  exec "$here/two-hosts.sh" --timeout "${RDMAKIT_WIRE_TIMEOUT:-600}" -- "$here/wire.sh" "$build" -- "$here/wire.sh" "$build"
fi

# ------------------------------------------------------------------ inside a guest
dev=${RDMAKIT_DEVICE:-rxe0}
peer=${RDMAKIT_PEER:?}
role=${RDMAKIT_HOST:?}
t=$build/tools
port=18600
failed=0
failed_names=()

listening() {   # is some process listening on TCP port $1?
  local hex
  hex=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# step NAME -- SERVER_CMD... -- CLIENT_CMD... : host a runs the server on the step's port,
# host b the client toward host a (retrying while a's server is not up yet).
step() {
  local name=$1 srv=() cli=() out rc i; shift 2
  while [[ $1 != -- ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  port=$((port + 1))
  out=$(mktemp /tmp/wire.XXXXXX)
  local t0=$SECONDS
  if [[ $role == a ]]; then
    timeout 120 "${srv[@]}" -p "$port" >"$out" 2>&1
    rc=$?
  else
    for ((i = 0; i < 300; i++)); do   # up to 60 s for the server's host to get there
      timeout 120 "${cli[@]}" -p "$port" "$peer" >"$out" 2>&1
      rc=$?
      ((rc == 0)) && break
      grep -qiE "couldn't connect|connection refused|ECONNREFUSED|unable to connect|no route" "$out" || break
      sleep 0.2
    done
  fi
  sed 's/^/    /' "$out"
  if ((rc == 0)); then
    echo "-- PASS $name ($((SECONDS - t0)) s)"
  elif [[ ${reference:-} == 1 ]]; then
    # perftest against itself says what the link does for a program not ours: its own
    # failure (ib_write_bw once hung past 120 s in the emulated guests) is told, not counted.
    echo "-- FAIL (reference only, not counted) $name (exit $rc after $((SECONDS - t0)) s)"
  else
    echo "-- FAIL $name (exit $rc after $((SECONDS - t0)) s)"
    failed=$((failed + 1))
    # with why: two-node's first "FAIL scenario: why" lines, and the output's last lines
    failed_names+=("$name (exit $rc after $((SECONDS - t0)) s): $({ grep -m 3 '^FAIL ' "$out"; tail -n 2 "$out"; } | tr '\n' ' ')")
  fi
  rm -f "$out"
}

g=(-d "$dev" -g 1)
step "two-node conformance scenarios (host a responder, host b requester)" -- "$t/rdmakit-two-node" "${g[@]}" -- "$t/rdmakit-two-node" "${g[@]}"
step "rc: rdmakit server, ibv_rc_pingpong client" -- "$t/rdmakit-pingpong" -T rc "${g[@]}" -n 200 -- ibv_rc_pingpong "${g[@]}" -n 200
step "rc: ibv_rc_pingpong server, rdmakit client" -- ibv_rc_pingpong "${g[@]}" -n 200 -- "$t/rdmakit-pingpong" -T rc "${g[@]}" -n 200
step "uc: rdmakit server, ibv_uc_pingpong client" -- "$t/rdmakit-pingpong" -T uc "${g[@]}" -n 200 -- ibv_uc_pingpong "${g[@]}" -n 200
step "ud: rdmakit server, ibv_ud_pingpong client" -- "$t/rdmakit-pingpong" -T ud "${g[@]}" -n 200 -- ibv_ud_pingpong "${g[@]}" -n 200
step "ud: ibv_ud_pingpong server, rdmakit client" -- ibv_ud_pingpong "${g[@]}" -n 200 -- "$t/rdmakit-pingpong" -T ud "${g[@]}" -n 200
step "write_bw: rdmakit-perf against itself" -- "$t/rdmakit-perf" write_bw -d "$dev" -n 2000 -- "$t/rdmakit-perf" write_bw -d "$dev" -n 2000
reference=1 step "write_bw: ib_write_bw against itself (perftest, for reference)" -- ib_write_bw -d "$dev" -x 1 -n 2000 -- ib_write_bw -d "$dev" -x 1 -n 2000
echo "wire ($role): $failed step(s) failed"
# (repeated at the end: meson shows only a long log's last lines)
for name in "${failed_names[@]}"; do echo "wire ($role): FAILED $name"; done
exit $((failed > 0))
