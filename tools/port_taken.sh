#!/bin/sh
# port_taken.sh PROGRAM [ARG...]: holds a TCP port on 127.0.0.1, runs PROGRAM ARG... -p
# PORT, and passes only when PROGRAM exits non-zero saying the port is in use: a -p that
# the mock's loopback dropped for an ephemeral port ran anyway.
port_file=$(mktemp)
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
with open(sys.argv[1], "w") as f:
    f.write(str(s.getsockname()[1]))
time.sleep(60)
' "$port_file" &
holder=$!
trap 'kill $holder 2>/dev/null; rm -f "$port_file"' EXIT
i=0
while [ ! -s "$port_file" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$port_file")
[ -n "$port" ] || { echo "port_taken.sh: could not hold a port" >&2; exit 1; }
out=$("$@" -p "$port" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q "$port.*in use\|in use.*$port"
