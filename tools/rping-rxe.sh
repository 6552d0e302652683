#!/usr/bin/env bash
# rping-rxe.sh — rdmakit-rping against rdma-core's rping (rdmacm-utils) on soft-RoCE,
# both ways (rping -s with rdmakit-rping -c -I, then rdmakit-rping -s with rping -c -I:
# the client connects from a source address), rping -s with rdmakit-rping -c -q (its
# own QP, moved with the CM's attributes), rdmakit-rping against itself over IPv6
# (link-local), and rping -c,
# then rping -c -q, against one persistent rdmakit-rping -s -P -q (killed at the end),
# all inside ONE guest run of tests/rxe/run-in-vm.sh.
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

# connect CLIENT LOG SPID [ARGS...]: CLIENT -c on $ip:$port, retried while the server
# (pid SPID) is not listening yet (a refused client exits at once); sets crc.
connect() {
  local cli=$1 log=$2 spid=$3 i
  shift 3
  for ((i = 0; i < 50; i++)); do
    sleep 0.1
    timeout 60 "$cli" -c -v -V -C "$count" "$@" -a "$ip" -p "$port" >"$log" 2>&1
    crc=$?
    ((crc == 0)) && break
    grep -qi "rejected" "$log" || break
    kill -0 "$spid" 2>/dev/null || break
  done
}

# pair NAME SERVER CLIENT [CLIENT ARGS...]: SERVER -s (with the array srv_args) and
# CLIENT -c (each a program path) on $ip:$port.
srv_args=()
pair() {
  local name=$1 srv=$2 cli=$3 spid src crc pings t0=$SECONDS
  shift 3
  port=$((port + 1))
  echo "== $name ($ip port $port)"
  timeout 60 "$srv" -s "${srv_args[@]}" -v -a "$ip" -p "$port" >"$logs/server" 2>&1 &
  spid=$!
  connect "$cli" "$logs/client" "$spid" "$@"
  wait "$spid"
  src=$?
  pings=$(grep -c '^ping data: rdma-ping-' "$logs/client")
  echo "  server ($(basename "$srv")) exit $src; client ($(basename "$cli")) exit $crc, $pings/$count pings" \
    "($((SECONDS - t0)) s)"
  echo "  server output:"; head -n 3 "$logs/server" | indent
  echo "  client output:"; head -n 3 "$logs/client" | indent
  if ((src != 0 || crc != 0 || pings != count)); then
    failed+=("$name")
    echo "  FAILED"; echo "  server:"; indent <"$logs/server"; echo "  client:"; indent <"$logs/client"
  fi
}

start=$SECONDS
pair "rping -s / rdmakit-rping -c -I $ip" "$(command -v rping)" "$bin" -I "$ip"
pair "rdmakit-rping -s / rping -c -I $ip" "$bin" "$(command -v rping)" -I "$ip"
pair "rping -s / rdmakit-rping -c -q" "$(command -v rping)" "$bin" -q
# Against itself over IPv6: the link-local address of rxe0's netdev (its GID 0).
ip4=$ip
ip=$(ip -6 -o addr show scope link | awk '$2 != "lo" {sub("/.*", "", $4); print $4 "%" $2; exit}')
pair "rdmakit-rping -s / rdmakit-rping -c over IPv6" "$bin" "$bin"
ip=$ip4

# persistent: rdmakit-rping -s -P -q serves rping -c, then rping -c -q, in a row, still
# runs, and is killed.
persistent() {
  local name="rdmakit-rping -s -P -q / rping -c, rping -c -q" spid crc pings k t0=$SECONDS
  port=$((port + 1))
  echo "== $name ($ip port $port)"
  timeout 60 "$bin" -s -P -q -a "$ip" -p "$port" >"$logs/server" 2>&1 &
  spid=$!
  local bad=0
  for k in 1 2; do
    if ((k == 1)); then
      connect "$(command -v rping)" "$logs/client$k" "$spid"
    else
      connect "$(command -v rping)" "$logs/client$k" "$spid" -q
    fi
    pings=$(grep -c '^ping data: rdma-ping-' "$logs/client$k")
    echo "  client $k (rping$( ((k == 2)) && echo " -q")) exit $crc, $pings/$count pings ($((SECONDS - t0)) s)"
    ((crc == 0 && pings == count)) || bad=1
  done
  if kill -0 "$spid" 2>/dev/null; then
    kill "$spid"
  else
    echo "  the persistent server exited after its clients"
    bad=1
  fi
  wait "$spid" 2>/dev/null
  echo "  server killed ($((SECONDS - t0)) s)"
  if ((bad)); then
    failed+=("$name")
    echo "  FAILED"; echo "  server:"; indent <"$logs/server"
    for k in 1 2; do echo "  client $k:"; indent <"$logs/client$k"; done
  fi
}
persistent
# perf_pair NAME TEST ARGS...: rdmakit-perf TEST -R server and client on rxe0.
perf_pair() {
  local name=$1 spid src crc t0=$SECONDS; shift
  port=$((port + 1))
  echo "== $name ($ip port $port)"
  timeout 60 "$perf" "$@" -R -d rxe0 -p "$port" --no-progress >"$logs/server" 2>&1 &
  spid=$!
  sleep 0.3
  timeout 60 "$perf" "$@" -R -d rxe0 -p "$port" --no-progress "$ip" >"$logs/client" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  echo "  server exit $src; client exit $crc ($((SECONDS - t0)) s)"
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
