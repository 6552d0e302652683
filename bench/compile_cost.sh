#!/usr/bin/env bash
# Compile cost of rdmakit's headers (issue 12): user CPU seconds a translation unit
# pays for each header set at -O2, above an empty file compiled with the same flags.
# Usage: bench/compile_cost.sh [compiler]        (default: c++)
#        COMPILE_COST_K=5 bench/compile_cost.sh   (runs per row, the minimum is kept; default 3)
# A report, not a test: it always exits 0. The machine may be shared, so the minimum
# of K runs is what is printed.
cd "$(dirname "$0")/.." || exit 0
cxx=${1:-c++}
k=${COMPILE_COST_K:-3}
flags=(-std=c++20 -O2 -I include -I backends/mock/include)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The ibverbs rows exist where libibverbs' headers are installed (the same test as
# examples/meson.build, which then compiles the walkthrough with its backend too).
ibverbs=0
ibverbs_flags=()
if [[ -f backends/ibverbs/include/rdmakit/backends/ibverbs.hpp ]] &&
   echo '#include <infiniband/verbs.h>' | "$cxx" -x c++ -fsyntax-only - 2>/dev/null; then
  ibverbs=1
  ibverbs_flags=(-I backends/ibverbs/include -DRDMAKIT_HAVE_IBVERBS=1)
fi

: >"$tmp/empty.cpp"
printf '#include <rdmakit/rdmakit.hpp>\n' >"$tmp/core.cpp"
printf '#include <rdmakit/rdmakit.hpp>\n#include <rdmakit/backends/mock.hpp>\n' >"$tmp/mock.cpp"
printf '#include <rdmakit/connection.hpp>\n' >"$tmp/connection.cpp"
printf '#include <rdmakit/backends/ibverbs.hpp>\n' >"$tmp/ibverbs.cpp"

# min_user FILE EXTRA-FLAGS...: the smallest user CPU time (s) of K compilations.
min_user() {
  local file=$1 best="" t
  shift
  for ((i = 0; i < k; i++)); do
    t=$( { TIMEFORMAT=%U; time "$cxx" "${flags[@]}" "$@" -c "$file" -o "$tmp/out.o" 2>/dev/null; } 2>&1 ) || {
      echo "fail"; return; }
    if [[ -z $best ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t; fi
  done
  echo "$best"
}

lines() { "$cxx" "${flags[@]}" "${@:2}" -E "$1" 2>/dev/null | wc -l; }

base=$(min_user "$tmp/empty.cpp")
printf '%s, -O2, min user CPU of %d runs above an empty file (%ss)\n\n' "$("$cxx" --version | head -n1)" "$k" "$base"
printf '| translation unit | CPU s | preprocessed lines | target s |\n|---|---:|---:|---:|\n'
row() {  # row LABEL TARGET FILE EXTRA-FLAGS...
  local label=$1 target=$2 file=$3 t
  shift 3
  t=$(min_user "$file" "$@")
  if [[ $t == fail ]]; then printf '| %s | does not compile | | %s |\n' "$label" "$target"; return; fi
  printf '| %s | %.2f | %d | %s |\n' "$label" "$(awk -v a="$t" -v b="$base" 'BEGIN { print a - b }')" \
    "$(lines "$file" "$@")" "$target"
}
row '`<rdmakit/rdmakit.hpp>`' '0.6' "$tmp/core.cpp"
row '+ `<rdmakit/backends/mock.hpp>`' '1.2' "$tmp/mock.cpp"
row '`<rdmakit/connection.hpp>` (the exchange)' '-' "$tmp/connection.cpp"
if ((ibverbs)); then
  row '`<rdmakit/backends/ibverbs.hpp>`' '-' "$tmp/ibverbs.cpp" "${ibverbs_flags[@]}"
  row 'examples/walkthrough.cpp (mock + ibverbs)' '4' examples/walkthrough.cpp "${ibverbs_flags[@]}"
else
  row 'examples/walkthrough.cpp (mock only)' '4' examples/walkthrough.cpp
fi
exit 0
