#!/bin/sh
# Each source parses (and instantiates what it uses) with another compiler:
#   parse_each.sh <compiler> [flags...] -- <source>...
# e.g. the examples with clang++ -fsyntax-only: templates GCC accepts may not be C++ clang
# accepts, and only an instantiation shows it.
cxx=$1
shift
flags=""
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  flags="$flags $1"
  shift
done
[ "${1:-}" = -- ] || { echo "usage: parse_each.sh <compiler> [flags...] -- <source>..." >&2; exit 2; }
shift
fail=0
for src in "$@"; do
  # shellcheck disable=SC2086  # the flags, split on purpose (none has a space)
  if ! out=$("$cxx" $flags "$src" 2>&1); then
    printf '%s\n' "$out" | head -30
    echo "FAIL: $src does not compile with $cxx"
    fail=1
  fi
done
[ $fail = 0 ] && echo "ok: $# sources compile with $cxx"
exit $fail
