#!/bin/sh
# Every public and detail header compiles on its own (no hidden include-order
# dependency): usage compile_each.sh <include dir> <compiler and flags...>
# RDMAKIT_SKIP_HEADERS: headers (as included, space-separated) to leave out.
inc=$1
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-headers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
count=0
for h in $(cd "$inc" && find rdmakit -name '*.hpp' | sort); do
  case " ${RDMAKIT_SKIP_HEADERS:-} " in *" $h "*) echo "skipped: $h"; continue ;; esac
  count=$((count + 1))
  printf '#include <%s>\n#include <%s>\n' "$h" "$h" >"$tmp/one.cpp"  # twice: include guards too
  mode=  # a src.hpp is for separate-compilation builds only (it says so with #error otherwise)
  case $h in */src.hpp) mode=-DRDMAKIT_SEPARATE_COMPILATION ;; esac
  if ! out=$("$@" $mode "$tmp/one.cpp" 2>&1); then
    printf '%s\n' "$out" | head -20
    echo "FAIL: $h does not compile on its own"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "ok: $count headers compile on their own"
exit $fail
