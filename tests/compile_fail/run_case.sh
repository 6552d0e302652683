#!/bin/sh
# Runs one compile-fail case: usage run_case.sh "<expected message>" <case.cpp> <compiler and flags...>
#  1. compiled with -DRDMAKIT_CF_CONTROL (the offending line left out) it must compile:
#     the rest of the case is valid, so the failure below is the one we mean;
#  2. compiled as is it must FAIL, and the diagnostics must contain the expected message.
# A case that accidentally compiles, or fails for another reason, makes the test fail.
expect=$1
src=$2
shift 2
if ! out=$("$@" -DRDMAKIT_CF_CONTROL "$src" 2>&1); then
  printf '%s\n' "$out" | head -40
  echo "FAIL: $src does not compile even without its offending line"
  exit 1
fi
if out=$("$@" "$src" 2>&1); then
  echo "FAIL: $src compiled, but it must not"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -F -e "$expect" >/dev/null; then
  printf '%s\n' "$out" | head -60
  echo "FAIL: $src failed to compile, but without the expected message: $expect"
  exit 1
fi
echo "ok: $src fails with: $expect"
