#!/bin/sh
# Runs one compile-fail case:
#   run_case.sh [--only] [--no-control] [--fail-arg=ARG]... "<expected message>" <case.cpp> <compiler and flags...>
#  1. compiled with -DRDMAKIT_CF_CONTROL (the offending line left out) it must compile:
#     the rest of the case is valid, so the failure below is the one we mean. With
#     --no-control another test does it (run_controls.sh: every case's in one compiler run);
#  2. compiled as is (plus each --fail-arg, e.g. --fail-arg=-std=c++17) it must FAIL, and
#     the diagnostics must contain the expected message; with --only, it must be the one
#     and only error or warning the compiler reports.
# A case that accidentally compiles, or fails for another reason, makes the test fail.
only=0
control=1
fail_args=""
while :; do
  case $1 in
    --only) only=1; shift ;;
    --no-control) control=0; shift ;;
    --fail-arg=*) fail_args="$fail_args ${1#--fail-arg=}"; shift ;;
    *) break ;;
  esac
done
expect=$1
src=$2
shift 2
if [ $control = 1 ] && ! out=$("$@" -DRDMAKIT_CF_CONTROL "$src" 2>&1); then
  printf '%s\n' "$out" | head -40
  echo "FAIL: $src does not compile even without its offending line"
  exit 1
fi
# shellcheck disable=SC2086  # the --fail-arg words, split on purpose
if out=$("$@" "$src" $fail_args 2>&1); then
  echo "FAIL: $src compiled, but it must not"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -F -e "$expect" >/dev/null; then
  printf '%s\n' "$out" | head -60
  echo "FAIL: $src failed to compile, but without the expected message: $expect"
  exit 1
fi
if [ $only = 1 ]; then
  n=$(printf '%s\n' "$out" | grep -c -E '(error|warning):')
  if [ "$n" != 1 ]; then
    printf '%s\n' "$out" | head -60
    echo "FAIL: $src must fail with exactly one diagnostic ($expect), the compiler gave $n"
    exit 1
  fi
fi
echo "ok: $src fails with: $expect"
