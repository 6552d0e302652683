#!/usr/bin/env bash
# smoke.sh — proves the rxe VM harness: boots the guest through run-in-vm.sh and,
# inside it, checks the rxe device with rdma-core's own tools (ibv_devices,
# ibv_devinfo, and ibv_{rc,uc,ud}_pingpong server/client pairs over loopback).
#
#   tests/rxe/smoke.sh [run-in-vm.sh options]      e.g. tests/rxe/smoke.sh --verbose
#
# On the host it re-runs itself in the guest; in the guest (RDMAKIT_RXE=1) it runs
# the checks. Exit status 0 only when every check passed.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  exec "$here/run-in-vm.sh" --timeout "${RDMAKIT_RXE_SMOKE_TIMEOUT:-600}" "$@" -- "$here/smoke.sh"
fi

# ------------------------------------------------------------------ inside the guest
# Every process start costs 0.1-0.4 s under emulation, so this part sticks to bash
# builtins wherever it can.
dev=${RDMAKIT_DEVICE:-rxe0}
gid=${RDMAKIT_GID_INDEX:-1}
logs=/tmp/rxe-smoke.$$
failed=()

indent() { local l; while IFS= read -r l || [[ -n $l ]]; do printf '    %s\n' "$l"; done; }

check() {   # check NAME COMMAND... : run, show its output, record the outcome
  local name=$1 rc; shift
  echo "== $name"
  "$@" >"$logs.out" 2>&1
  rc=$?
  indent <"$logs.out"
  if ((rc == 0)); then echo "-- PASS $name"; else echo "-- FAIL $name (exit $rc)"; failed+=("$name"); fi
}

listening() {   # is some process listening on TCP port $1? (/proc/net/tcp*: st 0A = LISTEN)
  local hex f local_addr st rest
  printf -v hex '%04X' "$1"
  for f in /proc/net/tcp /proc/net/tcp6; do
    while read -r _ local_addr _ st rest; do
      [[ $st == 0A && $local_addr == *":$hex" ]] && return 0
    done <"$f"
  done
  return 1
}

# pingpong TOOL PORT [ARGS...]: a server in the background, a client to 127.0.0.1.
pingpong() {
  local tool=$1 port=$2 spid src crc i; shift 2
  "$tool" -d "$dev" -g "$gid" -p "$port" "$@" >"$logs.$tool.server" 2>&1 &
  spid=$!
  for ((i = 0; i < 100; i++)); do
    listening "$port" && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.2
  done
  timeout 60 "$tool" -d "$dev" -g "$gid" -p "$port" "$@" 127.0.0.1 >"$logs.$tool.client" 2>&1
  crc=$?
  ((crc == 0)) || kill "$spid" 2>/dev/null      # a server whose client failed would wait forever
  wait "$spid"
  src=$?
  echo "server (exit $src):"; indent <"$logs.$tool.server"
  echo "client (exit $crc):"; indent <"$logs.$tool.client"
  ((src == 0 && crc == 0))
}

device_listed() {
  local out
  out=$(ibv_devices) || return 1
  printf '%s\n' "$out"
  [[ $'\n'$out$'\n' =~ [[:space:]]${dev}[[:space:]] ]]
}
port_active() {
  local l active=1
  ibv_devinfo -v -d "$dev" >"$logs.devinfo" || return 1
  while IFS= read -r l; do
    [[ $l =~ hca_id|state|mtu|link_layer|GID\[ ]] && printf '%s\n' "$l"
    [[ $l == *PORT_ACTIVE* ]] && active=0
  done <"$logs.devinfo"
  return "$active"
}
gid_is_ipv4() {
  local p=/sys/class/infiniband/$dev/ports/1 g value type
  for g in 0 1 2 3; do
    [[ -r $p/gids/$g ]] || continue
    value='' type=''
    read -r value <"$p/gids/$g"
    read -r type <"$p/gid_attrs/types/$g" 2>/dev/null
    printf 'gid[%s] %s %s\n' "$g" "$value" "$type"
  done
  read -r value <"$p/gids/$gid" || return 1
  [[ $value == *:ffff:* ]]      # RDMAKIT_GID_INDEX names the IPv4-mapped GID
}

echo "smoke: device $dev, GID index $gid, cwd $PWD"
check "ibv_devices lists $dev" device_listed
check "ibv_devinfo -d $dev: port active" port_active
check "GID $gid is IPv4-mapped (RoCEv2)" gid_is_ipv4
check "ibv_rc_pingpong (4096 B x 100)" pingpong ibv_rc_pingpong 18515 -s 4096 -n 100
check "ibv_uc_pingpong (4096 B x 100)" pingpong ibv_uc_pingpong 18516 -s 4096 -n 100
check "ibv_ud_pingpong (2048 B x 100)" pingpong ibv_ud_pingpong 18517 -s 2048 -n 100

if ((${#failed[@]})); then
  echo "smoke: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "smoke: all checks passed"
