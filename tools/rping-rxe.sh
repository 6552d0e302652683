#!/usr/bin/env bash
# rping-rxe.sh — rdmakit-rping against rdma-core's rping (rdmacm-utils) on soft-RoCE,
# both ways (rping -s with rdmakit-rping -c, then rdmakit-rping -s with rping -c), plus
# rdmakit-rping against itself, all inside ONE guest run of tests/rxe/run-in-vm.sh.
#
#   tools/rping-rxe.sh PATH/TO/rdmakit-rping [PATH/TO/rdmakit-perf] [run-in-vm.sh options]
#
# With rdmakit-perf, also `rdmakit-perf write_bw -R` and `send_lat -R` against itself
# (connected through rdma_cm instead of the TCP exchange).
#
# Each pair pings RDMAKIT_RPING_COUNT times (default 20) with -V (the client compares
# the data that came back) and -v (both print it); a pair passes when both ends exit 0
# and the client printed every ping. Exit status 0 only when every pair passed.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# >= 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
bin=$(cd -- "$(dirname -- "$1")" && pwd -P)/$(basename -- "$1")
shift
[[ -x $bin ]] || { echo "rping-rxe: $bin is not an executable" >&2; exit 2; }
perf=
if (($# >= 1)) && [[ $1 != -* && -x $1 ]]; then
  perf=$(cd -- "$(dirname -- "$1")" && pwd -P)/$(basename -- "$1")
  shift
fi

if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  harness=$here/../tests/rxe/run-in-vm.sh
  [[ -x $harness ]] || { echo "rping-rxe: no VM harness at $harness" >&2; exit 2; }
  exec "$harness" --timeout "${RDMAKIT_RPING_TIMEOUT:-300}" "$@" -- "$here/rping-rxe.sh" "$bin" $perf
fi

# ------------------------------------------------------------------ inside the guest
command -v rping >/dev/null || { echo "rping-rxe: rping is not installed (Debian: rdmacm-utils)"; exit 2; }
ip=${RDMAKIT_CM_ADDR:-$(ip -4 -o addr show | awk '$2 != "lo" {sub("/.*", "", $4); print $4; exit}')}
count=${RDMAKIT_RPING_COUNT:-20}
logs=$(mktemp -d /tmp/rdmakit-rping.XXXXXX)
port=7174
failed=()
indent() { sed 's/^/    /'; }

# pair NAME SERVER CLIENT: SERVER -s and CLIENT -c (each a program path) on $ip:$port.
pair() {
  local name=$1 srv=$2 cli=$3 spid src crc i pings
  port=$((port + 1))
  echo "== $name ($ip port $port)"
  timeout 60 "$srv" -s -v -a "$ip" -p "$port" >"$logs/server" 2>&1 &
  spid=$!
  for ((i = 0; i < 50; i++)); do   # until the server listens (a refused client exits at once)
    sleep 0.1
    timeout 60 "$cli" -c -v -V -C "$count" -a "$ip" -p "$port" >"$logs/client" 2>&1
    crc=$?
    ((crc == 0)) && break
    grep -qi "rejected" "$logs/client" || break
    kill -0 "$spid" 2>/dev/null || break
  done
  wait "$spid"
  src=$?
  pings=$(grep -c '^ping data: rdma-ping-' "$logs/client")
  echo "  server ($(basename "$srv")) exit $src; client ($(basename "$cli")) exit $crc, $pings/$count pings"
  echo "  server output:"; head -n 3 "$logs/server" | indent
  echo "  client output:"; head -n 3 "$logs/client" | indent
  if ((src != 0 || crc != 0 || pings != count)); then
    failed+=("$name")
    echo "  FAILED"; echo "  server:"; indent <"$logs/server"; echo "  client:"; indent <"$logs/client"
  fi
}

start=$SECONDS
pair "rping -s / rdmakit-rping -c" "$(command -v rping)" "$bin"
pair "rdmakit-rping -s / rping -c" "$bin" "$(command -v rping)"
pair "rdmakit-rping -s / rdmakit-rping -c" "$bin" "$bin"
# perf_pair NAME TEST ARGS...: rdmakit-perf TEST -R server and client on rxe0.
perf_pair() {
  local name=$1 spid src crc; shift
  port=$((port + 1))
  echo "== $name ($ip port $port)"
  timeout 60 "$perf" "$@" -R -d rxe0 -p "$port" --no-progress >"$logs/server" 2>&1 &
  spid=$!
  sleep 0.3
  timeout 60 "$perf" "$@" -R -d rxe0 -p "$port" --no-progress "$ip" >"$logs/client" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  echo "  server exit $src; client exit $crc"
  tail -n 3 "$logs/client" | indent
  if ((src != 0 || crc != 0)); then
    failed+=("$name")
    echo "  FAILED"; echo "  server:"; indent <"$logs/server"; echo "  client:"; indent <"$logs/client"
  fi
}
if [[ -n $perf ]]; then
  perf_pair "rdmakit-perf write_bw -R" write_bw -n 500 -s 4096
  perf_pair "rdmakit-perf send_lat -R" send_lat -n 200
fi
echo "rping-rxe: $((SECONDS - start)) s in the guest"
if ((${#failed[@]})); then
  echo "rping-rxe: FAILED: ${failed[*]}"
  exit 1
fi
echo "rping-rxe: every pair passed"
