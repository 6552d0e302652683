#!/usr/bin/env python3
"""Prints each failing test's output, then "N passed, N failed" over doctest test cases
(a test program that is not doctest counts as one)."""
import json
import re
import sys

passed = failed = 0
for line in open(sys.argv[1], encoding="utf-8"):
    t = json.loads(line)
    ok = t["result"] in ("OK", "EXPECTEDFAIL", "SKIP")
    out = t.get("stdout", "") or ""
    m = re.findall(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed", out)
    if m:
        _, p, f = map(int, m[-1])
        passed += p
        failed += f
        if not ok and f == 0:
            failed += 1  # crashed or timed out after its last report
    elif ok:
        passed += 1
    else:
        failed += 1
    if not ok:
        print(f"FAILED: {t['name']} ({t['result']})")
        print(out[-4000:])
        print((t.get("stderr", "") or "")[-2000:])
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
