#!/bin/sh
# Instructions per operation of the policy layer against hand-written verbs loops on the
# paths bench/overhead.cpp does not cover (bench/overhead_paths.cpp: other opcodes, UD,
# receives, shared CQs), on the null backend.
#
#   bench/run_overhead_paths.sh [BUILD_DIR]     (default: build-bench)
#
# Builds nothing: build first with `ninja -C BUILD_DIR bench/overhead_paths`. Each
# variant runs under callgrind twice, with N1 and N2 iterations of 32 operations;
# (I(N2) - I(N1)) / (N2 - N1) / 32 is one operation with the setup cancelled, as in
# bench/run_overhead.sh. The ratio is each policy loop's count over its hand-written
# reference's (target <= 1.00).
#
# Environment: N1/N2 (default 2000/6000), VARIANTS (an extended regular expression on
# the variant names, default: all; a policy variant's reference always runs with it),
# KEEP=DIR to keep the callgrind files there (for callgrind_annotate).
set -eu

build=${1:-build-bench}
exe=$build/bench/overhead_paths
if [ ! -x "$exe" ]; then
  echo "error: $exe not found; build it first: ninja -C $build bench/overhead_paths" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "error: valgrind not found" >&2; exit 2; }

n1=${N1:-2000} n2=${N2:-6000}
batch=32  # operations per iteration (bench/overhead_paths.cpp)
if [ -n "${KEEP:-}" ]; then
  work=$KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-paths.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
"$exe" --list >"$work/all"
pattern=${VARIANTS:-.}
awk -v re="$pattern" '$1 ~ re' "$work/all" >"$work/picked"
awk 'NR == FNR { if ($2 != "") need[$2] = 1; picked[$1] = 1; next } ($1 in need) && !($1 in picked)' \
  "$work/picked" "$work/all" >>"$work/picked"
[ -s "$work/picked" ] || { echo "error: no variant matches '$pattern' (overhead_paths --list)" >&2; exit 2; }

instructions() {
  out=$work/cg.$(echo "$1" | tr / .).$2
  if ! valgrind --tool=callgrind --callgrind-out-file="$out" "$exe" --variant="$1" --iters="$2" >"$out.log" 2>&1; then
    echo "error: callgrind run of --variant=$1 --iters=$2 failed:" >&2
    cat "$out.log" >&2
    exit 1
  fi
  v=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  [ -n "$v" ] || v=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  echo "$v"
}

results=$work/results
: >"$results"
while read -r v ref; do
  i1=$(instructions "$v" "$n1")
  i2=$(instructions "$v" "$n2")
  echo "$v $(awk -v a="$i1" -v b="$i2" -v n1="$n1" -v n2="$n2" -v k="$batch" \
    'BEGIN { printf "%.2f", (b - a) / (n2 - n1) / k }') ${ref:-}" >>"$results"
done <"$work/picked"

echo "== callgrind: instructions per operation, null backend (N1=$n1, N2=$n2)"
printf '%-32s %9s %9s %7s\n' path raw policy ratio
awk '{ per[$1] = $2 } $3 != "" { rows[++n] = $1 " " $3 }
     END { for (i = 1; i <= n; i++) { split(rows[i], f, " "); p = per[f[1]]; r = per[f[2]]
             name = f[1]; sub(/^policy\//, "", name)
             printf "%-32s %9.2f %9.2f %7.3f\n", name, r, p, p / r } }' "$results"
