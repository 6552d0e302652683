#!/usr/bin/env bash
# Compile cost of rdmakit's headers (issue 12): user CPU seconds a translation unit
# pays for each header set at -O2, above an empty file compiled with the same flags.
# Usage: bench/compile_cost.sh [compiler]                (default: c++)
#   COMPILE_COST_K=5        runs per figure, the minimum is kept (default 3)
#   COMPILE_COST_BASELINE=/path/to/other/checkout
#                           also measures that tree (e.g. `git worktree add /tmp/base main`),
#                           alternating its runs with this tree's, and prints both columns:
#                           on a shared, noisy machine only figures taken side by side compare.
# Rows marked "separate" define RDMAKIT_SEPARATE_COMPILATION (README: Separate
# compilation), so the backends' verbs and the core's cold text are only declared; the
# last row is what that mode compiles once per program (<rdmakit/src.hpp> and the
# backends' src.hpp). A baseline without that mode compiles those rows header-only.
# "GCC MB" is GCC's allocations (-ftime-report's TOTAL; "-" with other compilers): unlike the
# time, the same at any load, so it shows a change the noise would hide.
# A report, not a test: it always exits 0.
here=$(cd "$(dirname "$0")/.." && pwd) || exit 0
cxx=${1:-c++}
k=${COMPILE_COST_K:-3}
base_tree=${COMPILE_COST_BASELINE:-}
if [[ -n $base_tree && ! -f $base_tree/include/rdmakit/rdmakit.hpp ]]; then
  echo "COMPILE_COST_BASELINE=$base_tree is not an rdmakit checkout; measuring this tree only"
  base_tree=
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The ibverbs rows exist where libibverbs' headers are installed; examples/meson.build
# then compiles the walkthrough with that backend too (-DRDMAKIT_HAVE_IBVERBS=1).
ibverbs=0
if [[ -f $here/backends/ibverbs/include/rdmakit/backends/ibverbs.hpp ]] &&
   echo '#include <infiniband/verbs.h>' | "$cxx" -x c++ -fsyntax-only - 2>/dev/null; then
  ibverbs=1
fi

: >"$tmp/empty.cpp"
printf '#include <rdmakit/rdmakit.hpp>\n' >"$tmp/core.cpp"
printf '#include <rdmakit/rdmakit.hpp>\n#include <rdmakit/backends/mock.hpp>\n' >"$tmp/mock.cpp"
printf '#include <rdmakit/connection.hpp>\n' >"$tmp/connection.cpp"
printf '#include <rdmakit/backends/ibverbs.hpp>\n' >"$tmp/ibverbs.cpp"
printf '#include <rdmakit/src.hpp>\n#include <rdmakit/backends/mock/src.hpp>\n' >"$tmp/src.cpp"
((ibverbs)) && printf '#include <rdmakit/backends/ibverbs/src.hpp>\n' >>"$tmp/src.cpp"

# compile TREE FILE [-E]: the file against TREE's headers, as examples/meson.build does
# (with RDMAKIT_SEPARATE_COMPILATION when $separate is 1).
separate=0
compile() {
  local tree=$1 file=$2
  shift 2
  local flags=(-std=c++20 -O2 -I "$tree/include" -I "$tree/backends/mock/include")
  ((ibverbs)) && flags+=(-I "$tree/backends/ibverbs/include" -DRDMAKIT_HAVE_IBVERBS=1)
  ((separate)) && flags+=(-DRDMAKIT_SEPARATE_COMPILATION)
  [[ $file == walkthrough ]] && file=$tree/examples/walkthrough.cpp
  if [[ ${1:-} == -E ]]; then "$cxx" "${flags[@]}" -E "$file" 2>/dev/null
  elif [[ ${1:-} == -ftime-report ]]; then  # GCC's allocations (the TOTAL line), or "-"
    "$cxx" "${flags[@]}" -ftime-report -c "$file" -o "$tmp/out.o" 2>&1 >/dev/null |
      awk '/^ *TOTAL/ { v = $NF } END { print (v == "" ? "-" : v) }'
  else "$cxx" "${flags[@]}" -c "$file" -o "$tmp/out.o" 2>/dev/null; fi
}
user_time() {  # user CPU seconds of one compilation, or "fail"
  local t
  t=$( { TIMEFORMAT=%U; time compile "$@"; } 2>&1 ) && echo "$t" || echo fail
}
smaller() { [[ $2 == fail ]] || { [[ $1 == fail || -z $1 ]] || awk -v a="$2" -v b="$1" 'BEGIN { exit !(a < b) }'; }; }
minus() { [[ $1 == fail ]] && echo "does not compile" || awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

# measure FILE: sets best_this and best_base (min of K runs each, alternating).
measure() {
  local t
  best_this="" best_base=""
  for ((i = 0; i < k; i++)); do
    t=$(user_time "$here" "$1"); smaller "$best_this" "$t" && best_this=$t
    if [[ -n $base_tree ]]; then t=$(user_time "$base_tree" "$1"); smaller "$best_base" "$t" && best_base=$t; fi
  done
}

measure "$tmp/empty.cpp"
empty_this=$best_this empty_base=$best_base
printf '%s, -O2; user CPU s, min of %d runs, above an empty file (%ss)\n\n' \
  "$("$cxx" --version | head -n1)" "$k" "$empty_this"
if [[ -n $base_tree ]]; then
  printf 'baseline: %s\n\n' "$base_tree"
  printf '| translation unit | baseline s | lines | GCC MB | this tree s | lines | GCC MB | target s |\n|---|---:|---:|---:|---:|---:|---:|---:|\n'
else
  printf '| translation unit | CPU s | preprocessed lines | GCC MB | target s |\n|---|---:|---:|---:|---:|\n'
fi
row() {  # row LABEL TARGET FILE [separate]
  separate=0
  [[ ${4:-} == separate ]] && separate=1
  measure "$3"
  local lines_this mb_this
  lines_this=$(compile "$here" "$3" -E | wc -l)
  mb_this=$(compile "$here" "$3" -ftime-report)
  if [[ -n $base_tree ]]; then
    local base_s=- base_lines=- base_mb=-  # a file the baseline cannot compile (a header it lacks): "-"
    if [[ $best_base != fail ]]; then
      base_s=$(minus "$best_base" "$empty_base")
      base_lines=$(compile "$base_tree" "$3" -E | wc -l)
      base_mb=$(compile "$base_tree" "$3" -ftime-report)
    fi
    printf '| %s | %s | %s | %s | %s | %d | %s | %s |\n' "$1" "$base_s" "$base_lines" "$base_mb" \
      "$(minus "$best_this" "$empty_this")" "$lines_this" "$mb_this" "$2"
  else
    printf '| %s | %s | %d | %s | %s |\n' "$1" "$(minus "$best_this" "$empty_this")" "$lines_this" "$mb_this" "$2"
  fi
}
row '`<rdmakit/rdmakit.hpp>`' '0.6' "$tmp/core.cpp"
row '+ `<rdmakit/backends/mock.hpp>`' '1.2' "$tmp/mock.cpp"
row '`<rdmakit/connection.hpp>` (the exchange)' '-' "$tmp/connection.cpp"
if ((ibverbs)); then
  row '`<rdmakit/backends/ibverbs.hpp>`' '-' "$tmp/ibverbs.cpp"
  row 'examples/walkthrough.cpp (mock + ibverbs)' '4' walkthrough
else
  row 'examples/walkthrough.cpp (mock)' '4' walkthrough
fi
row 'separate: `<rdmakit/rdmakit.hpp>`' '0.6' "$tmp/core.cpp" separate
row 'separate: + `<rdmakit/backends/mock.hpp>`' '1.2' "$tmp/mock.cpp" separate
if ((ibverbs)); then
  row 'separate: examples/walkthrough.cpp (mock + ibverbs)' '4' walkthrough separate
  row 'separate: the src.hpp headers, once per program (core, mock, ibverbs)' '-' "$tmp/src.cpp" separate
else
  row 'separate: examples/walkthrough.cpp (mock)' '4' walkthrough separate
  row 'separate: the src.hpp headers, once per program (core, mock)' '-' "$tmp/src.cpp" separate
fi
exit 0
