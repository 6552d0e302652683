#!/usr/bin/env python3
"""A second client on a server's port must not end the server's run.

Runs `rdmakit-perf write_bw` on the mock (server and client in one process, the server
on a fixed TCP port) for a few seconds and, while it runs, connects to that port as
another client and sends a well-formed end-of-run record from another queue pair. The
server must answer it, say it ignored it, and go on until its own client finishes: the
run passes (exit 0). Before, the server took it as its client's and stopped, and the
real client's WRITEs then failed with "retry counter exceeded".

usage: stray_finish_test.py PATH/TO/rdmakit-perf
"""
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(qpn):
    body = ("lid=0x0000\nqpn=0x%06x\npsn=0x000456\n"
            "gid=00000000000000000000ffff7f000001\nmtu=1024\n" % qpn)
    return ("rdmakit/01 %04d\n" % len(body)).encode() + body.encode()


def main():
    perf = sys.argv[1]
    port = free_port()
    run = subprocess.Popen([perf, "write_bw", "-D", "4", "-p", str(port), "--no-progress"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Well after the setup exchange (the in-process client's, within milliseconds of
    # the start) and well before the client's own end-of-run record (4 s).
    time.sleep(1.5)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(record(0xabcde))
        s.settimeout(5)
        reply = s.recv(4096)
        s.sendall(b"rdmakit/01 0000\n")  # the acknowledgement: a whole, well-formed exchange
        time.sleep(0.2)
    out, err = run.communicate(timeout=60)
    sys.stdout.write(out)
    sys.stderr.write(err)
    if not reply.startswith(b"rdmakit/01 "):
        sys.exit("FAIL: the server did not answer the stray record: %r" % reply[:80])
    if run.returncode != 0:
        sys.exit("FAIL: rdmakit-perf exited %d: the stray record ended the run" % run.returncode)
    if "ignored an end-of-run message from QP %u" % 0xabcde not in err:
        sys.exit("FAIL: the server did not report the record it ignored")
    print("ok: the stray record was answered and ignored; the run finished")


main()
