#!/bin/sh
# expect_refusal.sh [--status N] PATTERN PROGRAM [ARG...]
# The tools' refusal tests: runs PROGRAM, shows its output, and passes only when it
# exits non-zero (exactly N with --status) and its output matches PATTERN (grep's
# basic regular expression), so a refusal for another reason fails the test.
status=
if [ "$1" = --status ]; then status=$2; shift 2; fi
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ -n "$status" ]; then
  [ "$rc" -eq "$status" ] || { echo "expect_refusal: exit status $rc, expected $status" >&2; exit 1; }
else
  [ "$rc" -ne 0 ] || { echo "expect_refusal: exit status 0, expected a refusal" >&2; exit 1; }
fi
printf '%s\n' "$out" | grep -q -e "$pattern" || { echo "expect_refusal: no match for \"$pattern\"" >&2; exit 1; }
