#!/bin/sh
# In separate compilation a user's translation unit compiles none of the shipped
# backends' cold instantiations (detail/backend_instances.hpp): it calls them, and
# defines none, with either include order.
# usage: separate_instances.sh <source> <compiler and flags...>
src=$1
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-instances.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
for order in core-first backend-first; do
  flag=
  [ "$order" = backend-first ] && flag=-DRDMAKIT_TEST_BACKEND_FIRST
  if ! "$@" $flag -c -o "$tmp/user.o" "$src"; then
    echo "FAIL ($order): does not compile"
    fail=1
    continue
  fi
  nm -C "$tmp/user.o" >"$tmp/symbols" || exit 1
  # Called (undefined here): the proof the test looks at the right functions.
  if ! grep -Eq ' U rdmakit::(v[0-9]+::)?detail::qp_parts<rdmakit::(v[0-9]+::)?backends::mock>::release\(\)' "$tmp/symbols"; then
    echo "FAIL ($order): qp_parts<mock>::release() is not called from outside: the test no longer sees it"
    grep 'qp_parts<' "$tmp/symbols" | head -5
    fail=1
  fi
  # Defined here (a text or weak symbol): compiled in the user's translation unit.
  if grep -E ' [TtWw] .*detail::(cq_block<[^>]*>::|qp_parts<[^>]*>::(release|operator=)|(retire|prune_retired|replacement_fits|check_cq_contexts|choose_gid|describe_gid_table|post_drain_marker)<)' "$tmp/symbols" >"$tmp/defined"; then
    echo "FAIL ($order): compiled in the user's translation unit, not declared extern:"
    head -20 "$tmp/defined"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "ok: the cold instantiations are the src.hpp's, in both include orders"
exit $fail
