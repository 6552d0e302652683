#!/bin/sh
# The controls of every compile-fail case in one translation unit:
#   run_controls.sh <compiler and flags...> -- <case.cpp>...
# Each case, compiled with -DRDMAKIT_CF_CONTROL (its offending line left out), must
# compile: the rest of it is valid, so the failure run_case.sh checks is the one meant.
# One compiler run instead of one per case (each would parse the library again); every
# case goes into a namespace of its own, after every header the cases include, so its
# own includes are no-ops there.
cmd=""
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  cmd="$cmd $1"
  shift
done
[ "${1:-}" = -- ] && [ $# -gt 1 ] || { echo "usage: run_controls.sh <compiler and flags...> -- <case.cpp>..." >&2; exit 2; }
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-cf.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
{
  echo '#define RDMAKIT_CF_CONTROL 1'
  grep -h '^#include' "$@" | sort -u
  for src in "$@"; do
    ns=$(basename "$src" .cpp | tr -c 'A-Za-z0-9_\n' _)
    printf 'namespace cf_%s {\n#include "%s"\n}\n' "$ns" "$(cd "$(dirname "$src")" && pwd)/$(basename "$src")"
  done
} >"$tmp/controls.cpp"
# shellcheck disable=SC2086  # the compiler and its flags, split on purpose (none has a space)
if ! out=$($cmd "$tmp/controls.cpp" 2>&1); then
  printf '%s\n' "$out" | head -60
  echo "FAIL: a case does not compile even without its offending line (the file named above)"
  exit 1
fi
echo "ok: the $# cases compile without their offending lines"
