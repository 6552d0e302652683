#!/bin/sh
# Instructions per message of the mock_rate loops under callgrind, with process start
# and setup cancelled: (I(N2) - I(N1)) / ((N2 - N1) * 64), each driver run posting
# exactly N windows of 64 WRs. Then the scale loops at 1, 64 and 1024 QPs the same way.
#
#   bench/run_mock_rate.sh [build-dir] [path to another mock_rate, e.g. an older build]
set -eu
dir=${1:-build-bench}
bin=${2:-$dir/bench/mock_rate}
[ -x "$bin" ] || { echo "no $bin: ninja -C $dir bench/mock_rate" >&2; exit 1; }

refs() {  # instructions of one driver run
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$@" 2>&1 |
    sed -n 's/.*I[[:space:]]*refs:[[:space:]]*//p' | tr -d ,
}
per_msg() {  # per_msg N1 N2 args...: instructions per message
  n1=$1 n2=$2
  shift 2
  i1=$(refs "$@" --iters="$n1")
  i2=$(refs "$@" --iters="$n2")
  awk -v a="$i1" -v b="$i2" -v n1="$n1" -v n2="$n2" 'BEGIN { printf "%.1f", (b - a) / ((n2 - n1) * 64) }'
}

echo "loop            instr/msg"
for d in write_uc write_rc write_rc_all ceiling; do
  printf '%-15s %s\n' "$d" "$(per_msg 100 300 --driver=$d)"
done
echo
echo "scale  QPs  instr/msg"
for t in uc rc; do
  for q in 1 64 1024; do
    printf '%-6s %-4s %s\n' "$t" "$q" "$(per_msg 2000 4000 --driver=scale_$t --qps=$q)"
  done
done
