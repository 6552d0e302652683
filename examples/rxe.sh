#!/usr/bin/env bash
# rxe.sh — the examples on real verbs: soft-RoCE (rxe0) in one guest run of
# tests/rxe/run-in-vm.sh. Arguments: the example programs built for ibverbs
# (`<name>-ibverbs`, run as `<name>-ibverbs rxe0`) and `walkthrough` (run as
# `walkthrough ibverbs rxe0`). Exit status 0 only when every one returned 0 and the
# kernel logged no warning while it ran.
#
#   ninja -C build examples-ibverbs && meson test -C build --suite rxe rxe-examples
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# >= 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
for exe in "$@"; do
  [[ -x $exe ]] || { echo "rxe.sh: $exe is not built: run \`ninja -C <build> examples-ibverbs\` first" >&2; exit 2; }
done
if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  exec "$here/../tests/rxe/run-in-vm.sh" --timeout "${RDMAKIT_RXE_EXAMPLES_TIMEOUT:-600}" -- "$here/rxe.sh" "$@"
fi

# ------------------------------------------------------------------ inside the guest
dev=${RDMAKIT_DEVICE:-rxe0}
failed=()
for exe in "$@"; do
  name=${exe##*/}
  if [[ $name == walkthrough ]]; then args=(ibverbs "$dev"); else args=("$dev"); fi
  echo "== $name ${args[*]}"
  warned_before=$(dmesg | grep -c -E 'WARNING:|BUG:|refcount_t:')
  timeout 120 "$exe" "${args[@]}" >/tmp/rxe-example.out 2>&1
  rc=$?
  while IFS= read -r line || [[ -n $line ]]; do printf '    %s\n' "$line"; done </tmp/rxe-example.out
  # A kernel warning is a failure too: rxe warns (and stalls 50 s) where a program breaks
  # its rules without an error, e.g. a QP destroyed under a memory window still bound.
  if (($(dmesg | grep -c -E 'WARNING:|BUG:|refcount_t:') > warned_before)); then
    dmesg | grep -E -A12 'WARNING:|BUG:|refcount_t:' | tail -n 40 | sed 's/^/    kernel: /'
    ((rc == 0)) && rc=125
  fi
  if ((rc == 0)); then echo "-- PASS $name"; else echo "-- FAIL $name (exit $rc)"; failed+=("$name"); fi
done
if ((${#failed[@]})); then
  echo "examples on $dev: ${#failed[@]} of $# failed: ${failed[*]}"
  exit 1
fi
echo "examples on $dev: all $# passed"
