#!/usr/bin/env python3
"""Prints the build outputs (relative to BUILD_DIR) that the tests outside SKIP_SUITEs
need, one per line, from meson's introspection files: what `ninja meson-test-prereq`
builds, minus what only the skipped suites' tests run.

    scripts/test_targets.py BUILD_DIR [SKIP_SUITE ...]
"""
import json
import os
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build, skip = sys.argv[1], set(sys.argv[2:])
    info = os.path.join(build, "meson-info")
    with open(os.path.join(info, "intro-tests.json")) as f:
        tests = json.load(f)
    with open(os.path.join(info, "intro-targets.json")) as f:
        outputs = {t["id"]: t["filename"] for t in json.load(f)}
    wanted = set()
    for t in tests:
        suites = {s.split(":", 1)[-1] for s in t["suite"]}  # "rdmakit:rxe" -> "rxe"
        if suites & skip:
            continue
        for dep in t.get("depends", []):
            wanted.update(os.path.relpath(p, build) for p in outputs[dep])
    print("\n".join(sorted(wanted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
