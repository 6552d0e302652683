#!/bin/sh
# In separate compilation a user's translation unit compiles none of the shipped
# backends' cold instantiations (detail/backend_instances.hpp): it calls them, and
# defines none, with either include order. Compiled at -O0 (meson.build), where nothing is
# inlined: clang inlines an extern template's functions at -O2 (it compiles them for
# that), so a call the test looks for may be gone there.
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
  if ! grep -Eq ' U rdmakit::(v[0-9]+::)?detail::cq_block<rdmakit::(v[0-9]+::)?backends::mock>::attach\(' "$tmp/symbols"; then
    echo "FAIL ($order): cq_block<mock>::attach is not called from outside: the test no longer sees it"
    grep 'cq_block<' "$tmp/symbols" | head -5
    fail=1
  fi
  # Defined here (a text or weak symbol): compiled in the user's translation unit.
  # (Named: a class's implicit members, its constructor, are inline and compiled anyway.)
  cq_members='attach|serial_of|find_retired|retired_polled|drained|departed_polled|forget_departed|forget_drained'
  cq_members="$cq_members|poller_goes|flushing_held|retire|attach_srq|detach_srq|keep_departed_room_|hold_departed_|detach"
  if grep -E " [TtWw] .*detail::(cq_block<[^>]*>::($cq_members)\\(|qp_parts<[^>]*>::(release|operator=)\\(|(retire|prune_retired|replacement_fits|check_cq_contexts|choose_gid|describe_gid_table|post_drain_marker)<)" "$tmp/symbols" >"$tmp/defined"; then
    echo "FAIL ($order): compiled in the user's translation unit, not declared extern:"
    head -20 "$tmp/defined"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "ok: the cold instantiations are the src.hpp's, in both include orders"
exit $fail
