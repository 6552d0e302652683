#!/bin/sh
# Instructions and time of the policy layer against hand-written verbs calls.
#
#   bench/run_overhead.sh [BUILD_DIR]          (default: build-bench)
#
# Builds nothing: build first with `ninja -C BUILD_DIR bench/overhead`.
#
# 1. callgrind: each driver invocation (`overhead --variant=V --backend=B --iters=N`)
#    runs exactly N iterations of one loop (32 posts, reaping when the SQ is full).
#    Every (V, B) runs twice, with N1 and N2 iterations; (I(N2) - I(N1)) / (N2 - N1) is
#    the instruction count of one iteration with the setup (fabric, device, QPs,
#    process start) cancelled. Each policy variant's ratio is to its raw reference
#    (`overhead --list`: the same signaling and posting, written by hand).
# 2. Google Benchmark: every selected variant, 5 repetitions, aggregates only; the time
#    ratio uses the medians (the machine's load adds noise: trust the instructions).
#
# Environment: NULL_N1/NULL_N2 (default 2000/6000), MOCK_N1/MOCK_N2 (100/300),
# VARIANTS (an extended regular expression on the variant names, default: all),
# BACKENDS (default "null mock"), SKIP_TIME=1 to skip step 2, BENCH_ARGS (extra
# Google Benchmark flags).
set -eu

build=${1:-build-bench}
exe=$build/bench/overhead
if [ ! -x "$exe" ]; then
  echo "error: $exe not found; build it first: ninja -C $build bench/overhead" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "error: valgrind not found" >&2; exit 2; }

backends=${BACKENDS:-"null mock"}
batch=32  # posts per iteration (bench/overhead.cpp)
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT
# "name reference" lines; a policy variant's raw reference is always selected with it.
"$exe" --list >"$work/all"
pattern=${VARIANTS:-.}
awk -v re="$pattern" '$1 ~ re { print; if ($2 != "") need[$2] = 1 } END { }' "$work/all" >"$work/picked"
awk 'NR == FNR { if ($2 != "") need[$2] = 1; picked[$1] = 1; next } ($1 in need) && !($1 in picked)' \
  "$work/picked" "$work/all" >>"$work/picked"
[ -s "$work/picked" ] || { echo "error: no variant matches '$pattern' (overhead --list)" >&2; exit 2; }

# Total instructions of one callgrind run (the `summary:` line, else `totals:`).
instructions() {
  out=$work/cg.$(echo "$1" | tr / .).$2.$3
  if ! valgrind --tool=callgrind --callgrind-out-file="$out" "$exe" --variant="$1" --backend="$2" \
      --iters="$3" >"$out.log" 2>&1; then
    echo "error: callgrind run of --variant=$1 --backend=$2 --iters=$3 failed:" >&2
    cat "$out.log" >&2
    exit 1
  fi
  v=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  [ -n "$v" ] || v=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  echo "$v"
}

echo "== callgrind: instructions per iteration ($batch RDMA WRITEs of 64 B, RC, SQ depth 64)"
printf '%-8s %-30s %12s %10s %8s\n' backend variant instr/iter instr/post ratio
results=$work/results
: >"$results"
for b in $backends; do
  if [ "$b" = mock ]; then n1=${MOCK_N1:-100} n2=${MOCK_N2:-300}; else n1=${NULL_N1:-2000} n2=${NULL_N2:-6000}; fi
  # References first, so each policy row can print its ratio.
  for v in $(awk '$2 == "" { print $1 }' "$work/picked") $(awk '$2 != "" { print $1 }' "$work/picked"); do
    i1=$(instructions "$v" "$b" "$n1")
    i2=$(instructions "$v" "$b" "$n2")
    per=$(awk -v a="$i1" -v b="$i2" -v n1="$n1" -v n2="$n2" 'BEGIN { printf "%.1f", (b - a) / (n2 - n1) }')
    ref=$(awk -v v="$v" '$1 == v { print $2 }' "$work/picked")
    echo "$b $v $per $ref" >>"$results"
    ratio=$(awk -v b="$b" -v r="$ref" -v p="$per" '$1 == b && $2 == r { printf "%.3f", p / $3 }' "$results")
    printf '%-8s %-30s %12s %10.2f %8s\n' "$b" "$v" "$per" "$(awk -v p="$per" -v k="$batch" 'BEGIN { print p / k }')" \
      "${ratio:-}"
  done
done

echo
echo "== instruction ratio, policy / hand-written (target <= 1.00 on null)"
awk '$4 != "" { ref[$1 " " $4] = 1 } { per[$1 " " $2] = $3 }
     $4 != "" { rows[++n] = $0 }
     END { for (i = 1; i <= n; i++) { split(rows[i], f, " "); q = per[f[1] " " f[4]]
             printf "%-8s %-30s %6.3f  (%+.1f instr/post)\n", f[1], f[2], f[3] / q, (f[3] - q) / 32 } }' "$results"

[ "${SKIP_TIME:-0}" = 1 ] && exit 0

echo
echo "== Google Benchmark: time per iteration (5 repetitions, median; machine load adds noise)"
names=$(awk '{ print $1 }' "$work/picked" | sed 's/[.]/[.]/g' | paste -sd'|')
filter=$(echo "$backends" | tr ' ' '|')
csv=$work/gb.csv
# shellcheck disable=SC2086
"$exe" --benchmark_filter="^overhead/($filter)/($names)\$" --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=csv ${BENCH_ARGS:-} >"$csv" 2>"$work/gb.err" || {
  cat "$work/gb.err" >&2
  exit 1
}
# CSV: name,iterations,real_time,cpu_time,time_unit,...; names overhead/<backend>/<variant>_<aggregate>
awk -F, 'NR == FNR { ref[$1] = $2; next }
  /^"overhead\// {
    gsub(/"/, "", $1)
    b = $1; sub(/^overhead\//, "", b); sub(/\/.*/, "", b)
    v = $1; sub(/^overhead\/[^\/]*\//, "", v)
    agg = v; sub(/^.*_/, "", agg); sub(/_[a-z]+$/, "", v)
    t[b " " v " " agg] = $4; unit = $5; if (!(b in seen)) { seen[b] = 1; order[++nb] = b }
    if (!(v in vseen)) { vseen[v] = 1; vorder[++nv] = v }
  }
  END {
    printf "%-8s %-30s %12s %10s %8s\n", "backend", "variant", "cpu median", "stddev", "ratio"
    for (i = 1; i <= nb; i++) for (j = 1; j <= nv; j++) {
      k = order[i] " " vorder[j]; r = ref[vorder[j]]
      q = r == "" ? "" : t[order[i] " " r " median"]
      printf "%-8s %-30s %12.1f %10.1f %8s\n", order[i], vorder[j], t[k " median"], t[k " stddev"],
             q > 0 ? sprintf("%.3f", t[k " median"] / q) : ""
    }
    print "(" unit " per iteration of 32 posts; ratio: cpu median / its raw reference)"
  }' FS=' ' "$work/picked" FS=, "$csv"
