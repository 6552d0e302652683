#!/bin/sh
# expect_refusal.sh [--status N] [--absent TEXT] PATTERN PROGRAM [ARG...]
# The tools' refusal tests: runs PROGRAM, shows its output, and passes only when it
# exits non-zero (exactly N with --status) and its output matches PATTERN (grep's
# basic regular expression), so a refusal for another reason fails the test; with
# --absent, also only when no line of the output matches TEXT (what it must not say).
status=
absent=
while :; do
  case $1 in
    --status) status=$2; shift 2 ;;
    --absent) absent=$2; shift 2 ;;
    *) break ;;
  esac
done
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
if [ -n "$absent" ] && printf '%s\n' "$out" | grep -q -e "$absent"; then
  echo "expect_refusal: the output says \"$absent\"" >&2
  exit 1
fi
