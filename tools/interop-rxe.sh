#!/usr/bin/env bash
# interop-rxe.sh — rdmakit-pingpong against rdma-core's ibv_rc_pingpong,
# ibv_uc_pingpong and ibv_ud_pingpong on soft-RoCE, in both directions (rdmakit as
# server, then as client), plus rdmakit against itself, all inside ONE guest run of
# tests/rxe/run-in-vm.sh.
#
#   tools/interop-rxe.sh PATH/TO/rdmakit-pingpong [run-in-vm.sh options]
#
# Exit status 0 only when every pair completed on both ends (and, with -c, no end
# reported invalid data). Each pair prints both
# ends' output; the final table has the usec/iter of each end (same VM run, so the
# rows compare; absolute numbers under emulation mean little).
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# >= 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
bin=$(cd -- "$(dirname -- "$1")" && pwd -P)/$(basename -- "$1")
shift
[[ -x $bin ]] || { echo "interop-rxe: $bin is not an executable" >&2; exit 2; }

if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  harness=$here/../tests/rxe/run-in-vm.sh
  [[ -x $harness ]] || { echo "interop-rxe: no VM harness at $harness" >&2; exit 2; }
  exec "$harness" --timeout "${RDMAKIT_INTEROP_TIMEOUT:-900}" "$@" -- "$here/interop-rxe.sh" "$bin"
fi

# ------------------------------------------------------------------ inside the guest
dev=${RDMAKIT_DEVICE:-rxe0}
gid=${RDMAKIT_GID_INDEX:-1}
iters=${RDMAKIT_INTEROP_ITERS:-500}
logs=$(mktemp -d /tmp/rdmakit-interop.XXXXXX)
port=18515
failed=()
table=()

indent() { sed 's/^/    /'; }
listening() {   # is some process listening on TCP port $1?
  local hex
  hex=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
usec() { sed -n 's/.* = \([0-9.]*\) usec\/iter$/\1/p' "$1" | tail -n 1; }

# pair NAME SERVER_CMD... -- CLIENT_CMD... : the server in the background on $port,
# the client to 127.0.0.1; both must exit 0 and print the summary lines.
pair() {
  local name=$1 srv=() cli=() spid src crc i; shift
  while (($#)) && [[ $1 != -- ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  port=$((port + 1))
  echo "== $name (port $port)"
  timeout 120 "${srv[@]}" -p "$port" >"$logs/server" 2>&1 &
  spid=$!
  for ((i = 0; i < 400; i++)); do
    listening "$port" && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  timeout 120 "${cli[@]}" -p "$port" 127.0.0.1 >"$logs/client" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  echo "  server: ${srv[*]} (exit $src)"; indent <"$logs/server"
  echo "  client: ${cli[*]} (exit $crc)"; indent <"$logs/client"
  if ((src == 0 && crc == 0)) && grep -q 'usec/iter' "$logs/server" && grep -q 'usec/iter' "$logs/client" \
     && ! grep -q 'invalid data' "$logs/server" "$logs/client"; then
    echo "-- PASS $name"
    table+=("$(printf '%-50s %10s %10s' "$name" "$(usec "$logs/server")" "$(usec "$logs/client")")")
  else
    echo "-- FAIL $name"
    failed+=("$name")
    table+=("$(printf '%-50s %10s %10s' "$name" FAIL FAIL)")
  fi
}

rk=("$bin" -d "$dev" -g "$gid" -n "$iters")
echo "interop: kernel $(uname -r), device $dev, GID index $gid, $iters iterations, rdmakit-pingpong: $bin"
for t in rc uc ud; do
  ibv=(ibv_${t}_pingpong -d "$dev" -g "$gid" -n "$iters")
  pair "$t: ibv_${t}_pingpong server, rdmakit client" "${ibv[@]}" -- "${rk[@]}" --transport "$t"
  pair "$t: rdmakit server, ibv_${t}_pingpong client" "${rk[@]}" --transport "$t" -- "${ibv[@]}"
  pair "$t: ibv server -e, rdmakit client -e" "${ibv[@]}" -e -- "${rk[@]}" --transport "$t" -e
  pair "$t: ibv server -c, rdmakit client -c" "${ibv[@]}" -c -- "${rk[@]}" --transport "$t" -c
  pair "$t: rdmakit server -c, ibv client -c" "${rk[@]}" --transport "$t" -c -- "${ibv[@]}" -c
  pair "$t: rdmakit server, rdmakit client (rdmakit wire)" \
    "${rk[@]}" --transport "$t" --wire rdmakit -- "${rk[@]}" --transport "$t" --wire rdmakit
  pair "$t: ibv server, ibv client (reference)" "${ibv[@]}" -- "${ibv[@]}"
done

echo
printf '%-50s %10s %10s\n' "pair (usec/iter)" server client
printf '%s\n' "${table[@]}"
rm -rf -- "$logs"
if ((${#failed[@]})); then
  echo "interop: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "interop: all pairs passed"
