#!/usr/bin/env bash
# two-hosts.sh — two qemu guests joined by one virtual Ethernet link, rxe0 on each end:
# RoCEv2 packets cross a link between two kernels, not a loopback.
#
#   tests/rxe/two-hosts.sh [--timeout SECONDS] [--port PORT] -- SERVER_COMMAND... -- CLIENT_COMMAND...
#
# Host A (192.168.78.1) runs SERVER_COMMAND, host B (192.168.78.2) runs CLIENT_COMMAND;
# both see RDMAKIT_PEER (the other host's address) and RDMAKIT_HOST (a or b). The link
# is a qemu socket netdev on 127.0.0.1:PORT (default 47700 + a number derived from the
# process id), virtio-net in each guest, addresses that exist only inside the two guests.
# The client starts when its guest has booted, and should retry a refused connection
# until the server listens. Exit status: 0 when both commands returned 0; else the
# first non-zero of server, client (the harness's own codes are run-in-vm.sh's).
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

timeout_s=600
port=$((47700 + $$ % 200))
while (($#)); do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) usage ;;
  esac
done
server=()
while (($#)) && [[ $1 != -- ]]; do server+=("$1"); shift; done
(($# >= 2)) || usage
shift
client=("$@")
((${#server[@]} && ${#client[@]})) || usage

# One guest prepares the shared kernel cache first (run-in-vm.sh serializes it anyway).
"$here/run-in-vm.sh" --prepare-only >/dev/null || exit $?

out=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-two-hosts.XXXXXX") || exit 125
trap 'rm -rf "$out"' EXIT

"$here/run-in-vm.sh" --timeout "$timeout_s" --smp 1 --wire "listen:$port" --ip 192.168.78.1/24 \
  --env RDMAKIT_PEER=192.168.78.2 --env RDMAKIT_HOST=a -- "${server[@]}" \
  > >(sed -u 's/^/[a] /') 2> >(sed -u 's/^/[a] /' >&2) &
a=$!
# The listening side must be up before the other qemu connects to the socket.
for _ in $(seq 100); do
  ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port " && break
  sleep 0.1
done
"$here/run-in-vm.sh" --timeout "$timeout_s" --smp 1 --wire "connect:$port" --ip 192.168.78.2/24 \
  --env RDMAKIT_PEER=192.168.78.1 --env RDMAKIT_HOST=b -- "${client[@]}" \
  > >(sed -u 's/^/[b] /') 2> >(sed -u 's/^/[b] /' >&2) &
b=$!
wait "$b"; rc_b=$?
wait "$a"; rc_a=$?
echo "two-hosts: server (a) exit $rc_a, client (b) exit $rc_b"
((rc_a != 0)) && exit "$rc_a"
exit "$rc_b"
