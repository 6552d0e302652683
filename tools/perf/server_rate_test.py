#!/usr/bin/env python3
"""send_bw's server side reports rates the run can have had.

Runs `rdmakit-perf send_bw --json` on the mock loopback (client and server in one
process) in several configurations and checks, on the two JSON reports of each run:

- the server's count is every message it received (the note's "received N"), RC's
  all the client sent;
- a run that received messages never reports 0.00 (average, peak, rate, seconds);
- the peak is at least the average;
- the server's average is not above the client's, nor its peak above the client's peak
  (times a generous margin).

The average holds because the server's clock starts at the exchange, before the client
can post: a receiver has no earlier moment it knows the messages came after. The peak
holds because a window starts only where the server saw its CQ empty: the messages in
it arrived inside it. Both are
checked only on runs of 50 messages or more, and a run above the margin is run again
(up to 3 times) before the test fails: a client thread taken off its core at the end
of its run stretches the client's time, not the server's. Before, the server's clock
started at its first poll that returned receives and left that poll's messages out:
-n 50 gave a server average 20 to 30 times the client's (the speed at which it drained a
full CQ), -n 1 and -n 2 gave 0.00; a window started at any poll, and one drain of a full
CQ made the peak (-n 2000 -s 4096: 7 times the client's peak, 40 times its average).

usage: server_rate_test.py PATH/TO/rdmakit-perf
"""
import json
import re
import subprocess
import sys

MARGIN = 2.0  # server average <= client average * MARGIN, the same for the peaks
ATTEMPTS = 3

# (arguments, messages the client sends, whether every one must arrive)
RUNS = [
    (["-n", "1"], 1, True),
    (["-n", "2"], 2, True),
    (["-n", "50"], 50, True),
    (["-n", "2000", "-s", "4096"], 2000, True),
    (["-c", "UC", "-Q", "16", "-n", "50"], 50, False),  # UC and UD drop a message that finds no receive
    (["-c", "UD", "-e", "-n", "2000", "-s", "1024"], 2000, False),
    (["--use_srq", "-q", "2", "-n", "50"], 100, True),
    (["-R", "-n", "50"], 50, True),
]


def run(perf, args):
    p = subprocess.run([perf, "send_bw", "--json", "--no-progress"] + args, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        sys.exit("send_bw %s failed (%d):\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    sides = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            sides[d["role"]] = d
    if set(sides) != {"client", "server"}:
        sys.exit("send_bw %s: expected a client and a server report:\n%s" % (" ".join(args), p.stdout))
    return sides["client"], sides["server"], p.stdout


def check(perf, args, sent, all_arrive):
    name = "send_bw " + " ".join(args)
    for attempt in range(1, ATTEMPTS + 1):
        client, server, out = run(perf, args)
        c, s = client["results"][0], server["results"][0]
        m = re.search(r"received (\d+) messages", server["note"])
        if not m:
            sys.exit("%s: no count in the server's note %r" % (name, server["note"]))
        received = int(m.group(1))
        errors = []
        if c["iterations"] != sent:
            errors.append("the client sent %d, not %d" % (c["iterations"], sent))
        if s["iterations"] != received:
            errors.append("the server reports %d iterations but received %d" % (s["iterations"], received))
        if all_arrive and received != sent:
            errors.append("the server received %d of %d" % (received, sent))
        if received == 0 and all_arrive:
            errors.append("nothing received")
        for k in ("bw_average_mb_per_sec", "bw_peak_mb_per_sec", "msg_rate_mpps", "seconds"):
            if received > 0 and not s[k] > 0:
                errors.append("server %s is %s for %d messages received" % (k, s[k], received))
        if s["bw_peak_mb_per_sec"] < s["bw_average_mb_per_sec"] * 0.99:
            errors.append("server peak %.2f below its average %.2f" % (s["bw_peak_mb_per_sec"],
                                                                        s["bw_average_mb_per_sec"]))
        if errors:  # not timing: no second attempt
            sys.exit("%s: %s\n%s" % (name, "; ".join(errors), out))
        ratio = s["bw_average_mb_per_sec"] / c["bw_average_mb_per_sec"]
        peak_ratio = s["bw_peak_mb_per_sec"] / c["bw_peak_mb_per_sec"]
        print("%-40s avg client %9.2f server %9.2f (x%.2f)  peak client %9.2f server %9.2f (x%.2f)  received %d/%d"
              % (name, c["bw_average_mb_per_sec"], s["bw_average_mb_per_sec"], ratio, c["bw_peak_mb_per_sec"],
                 s["bw_peak_mb_per_sec"], peak_ratio, received, sent))
        if sent < 50 or (ratio <= MARGIN and peak_ratio <= MARGIN):
            return
        print("  the server's average or peak is above the client's times %.1f; attempt %d of %d"
              % (MARGIN, attempt, ATTEMPTS))
    sys.exit("%s: the server's average or peak exceeded the client's times %.1f in %d runs:\n%s"
             % (name, MARGIN, ATTEMPTS, out))


def main():
    perf = sys.argv[1]
    for args, sent, all_arrive in RUNS:
        check(perf, args, sent, all_arrive)
    print("server rates ok")


if __name__ == "__main__":
    main()
