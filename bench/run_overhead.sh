#!/bin/sh
# Instructions and time of the policy layer against hand-written verbs calls.
#
#   bench/run_overhead.sh [BUILD_DIR]          (default: build-bench)
#
# Builds nothing: build first with `ninja -C BUILD_DIR bench/overhead`.
#
# 1. callgrind: each driver invocation (`overhead --variant=V --backend=B --iters=N`)
#    runs exactly N iterations of one loop (32 posts + reap). Every (V, B) runs twice,
#    with N1 and N2 iterations; (I(N2) - I(N1)) / (N2 - N1) is the instruction count
#    of one iteration with the setup (fabric, device, QPs, process start) cancelled.
# 2. Google Benchmark: every variant, 5 repetitions, aggregates only; the time ratio
#    uses the medians.
#
# Environment: NULL_N1/NULL_N2 (default 2000/6000), MOCK_N1/MOCK_N2 (100/300),
# VARIANTS (default "raw policy policy_poll raw_list policy_batch"; raw and policy
# are the pair the target is about), BACKENDS (default "null mock"), SKIP_TIME=1 to
# skip step 2, BENCH_ARGS (extra Google Benchmark flags).
set -eu

build=${1:-build-bench}
exe=$build/bench/overhead
if [ ! -x "$exe" ]; then
  echo "error: $exe not found; build it first: ninja -C $build bench/overhead" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "error: valgrind not found" >&2; exit 2; }

variants=${VARIANTS:-"raw policy policy_poll raw_list policy_batch"}
backends=${BACKENDS:-"null mock"}
batch=32  # posts per iteration (bench/overhead.cpp)
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Total instructions of one callgrind run (the `summary:` line, else `totals:`).
instructions() {
  out=$work/cg.$1.$2.$3
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

echo "== callgrind: instructions per iteration ($batch RDMA WRITEs of 64 B, signal_every<16>, busy poll)"
printf '%-8s %-13s %14s %14s %12s %10s\n' backend variant "I(N1)" "I(N2)" instr/iter instr/post
results=$work/results
: >"$results"
for b in $backends; do
  if [ "$b" = mock ]; then n1=${MOCK_N1:-100} n2=${MOCK_N2:-300}; else n1=${NULL_N1:-2000} n2=${NULL_N2:-6000}; fi
  for v in $variants; do
    i1=$(instructions "$v" "$b" "$n1")
    i2=$(instructions "$v" "$b" "$n2")
    per=$(awk -v a="$i1" -v b="$i2" -v n1="$n1" -v n2="$n2" 'BEGIN { printf "%.1f", (b - a) / (n2 - n1) }')
    echo "$b $v $per" >>"$results"
    printf '%-8s %-13s %14s %14s %12s %10.2f\n' "$b" "$v" "$i1" "$i2" "$per" \
      "$(awk -v p="$per" -v k="$batch" 'BEGIN { print p / k }')"
  done
done

# The ratio of a policy variant to its hand-written counterpart, per backend.
pair_of() {
  case $1 in
    policy | policy_poll) echo raw ;;
    policy_batch) echo raw_list ;;
    *) echo "" ;;
  esac
}
echo
echo "== instruction ratio (policy / hand-written, same backend; target <= 1.05 on null)"
for b in $backends; do
  for v in $variants; do
    r=$(pair_of "$v")
    [ -n "$r" ] || continue
    awk -v b="$b" -v v="$v" -v r="$r" '
      $1 == b && $2 == v { p = $3 } $1 == b && $2 == r { q = $3 }
      END { if (p != "" && q != "") printf "%-8s %-13s / %-9s %6.3f  (%+.1f instr/post)\n", b, v, r, p / q, (p - q) / 32 }' "$results"
  done
done

[ "${SKIP_TIME:-0}" = 1 ] && exit 0

echo
echo "== Google Benchmark: time per iteration (5 repetitions, median; machine load adds noise)"
filter=$(echo "$backends" | tr ' ' '|')
csv=$work/gb.csv
# shellcheck disable=SC2086
"$exe" --benchmark_filter="^overhead/($filter)/" --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=csv ${BENCH_ARGS:-} >"$csv" 2>"$work/gb.err" || {
  cat "$work/gb.err" >&2
  exit 1
}
# CSV: name,iterations,real_time,cpu_time,time_unit,...; names overhead/<backend>/<variant>_<aggregate>
awk -F, -v variants="$variants" -v backends="$backends" '
  /^"overhead\// {
    gsub(/"/, "", $1)
    split($1, p, "/")
    agg = p[3]; sub(/^.*_/, "", agg)
    v = p[3]; sub(/_[a-z]+$/, "", v)
    t[p[2] "/" v "/" agg] = $4; unit = $5
  }
  function pair(v) { return v == "policy_batch" ? "raw_list" : (v == "raw" || v == "raw_list" ? "" : "raw") }
  END {
    nb = split(backends, B, " "); nv = split(variants, V, " ")
    printf "%-8s %-13s %14s %14s %10s %8s\n", "backend", "variant", "cpu median", "cpu mean", "stddev", "unit"
    for (i = 1; i <= nb; i++) for (j = 1; j <= nv; j++) {
      k = B[i] "/" V[j]
      printf "%-8s %-13s %14.1f %14.1f %10.1f %8s\n", B[i], V[j], t[k "/median"], t[k "/mean"], t[k "/stddev"], unit
    }
    print ""
    print "== time ratio (policy / hand-written, cpu-time medians)"
    for (i = 1; i <= nb; i++) for (j = 1; j <= nv; j++) {
      r = pair(V[j]); if (r == "") continue
      a = t[B[i] "/" V[j] "/median"]; b = t[B[i] "/" r "/median"]
      if (a != "" && b > 0) printf "%-8s %-13s / %-9s %6.3f\n", B[i], V[j], r, a / b
    }
  }' "$csv"
