#!/usr/bin/env bash
# perf-vs-perftest-rxe.sh — rdmakit-perf on soft-RoCE (rxe), inside ONE guest run of
# tests/rxe/run-in-vm.sh:
#   1. rdmakit-perf against itself for every test (server in the background, client on
#      127.0.0.1), plus a few other configurations (UC, UD, events, post lists);
#   2. side by side with perftest in the same VM run:
#        write_bw 65536 B           rdmakit-perf write_bw -s 65536   vs ib_write_bw -s 65536
#        send_lat 2 B               rdmakit-perf send_lat -s 2       vs ib_send_lat -s 2
#        write_bw 64 B msg rate     rdmakit-perf's best of a few (-l, -Q) vs ib_write_bw -s 64 -l L -Q Q
#      and a table with the ratio rdmakit-perf / perftest (medians of alternating rounds).
#
#   tools/perf-vs-perftest-rxe.sh PATH/TO/rdmakit-perf [run-in-vm.sh options]
#
# Absolute numbers under emulation (qemu without KVM) mean little; the ratio of two
# programs in the same run is what compares. Exit status 0 when every run completed.
# Each comparison alternates the two programs RDMAKIT_PERF_ROUNDS times (3) and compares
# medians. Knobs (environment): RDMAKIT_PERF_BW_ITERS (1000), RDMAKIT_PERF_LAT_ITERS
# (1000), RDMAKIT_PERF_RATE_ITERS (32000, a multiple of 64), RDMAKIT_PERF_ROUNDS (3),
# RDMAKIT_PERF_TIMEOUT (harness timeout, 1500 s).
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# >= 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
bin=$(cd -- "$(dirname -- "$1")" && pwd -P)/$(basename -- "$1")
shift
[[ -x $bin ]] || { echo "perf-vs-perftest: $bin is not an executable" >&2; exit 2; }

if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  harness=$here/../tests/rxe/run-in-vm.sh
  [[ -x $harness ]] || { echo "perf-vs-perftest: no VM harness at $harness" >&2; exit 2; }
  exec "$harness" --timeout "${RDMAKIT_PERF_TIMEOUT:-1500}" "$@" -- "$here/perf-vs-perftest-rxe.sh" "$bin"
fi

# ------------------------------------------------------------------ inside the guest
dev=${RDMAKIT_DEVICE:-rxe0}
gid=${RDMAKIT_GID_INDEX:-1}
bw_iters=${RDMAKIT_PERF_BW_ITERS:-1000}
lat_iters=${RDMAKIT_PERF_LAT_ITERS:-1000}
rate_iters=${RDMAKIT_PERF_RATE_ITERS:-32000}
rounds=${RDMAKIT_PERF_ROUNDS:-3}
logs=$(mktemp -d /tmp/rdmakit-perf.XXXXXX)
port=19515
failed=()
self_table=()

indent() { sed 's/^/    /'; }
listening() {   # is some process listening on TCP port $1?
  local hex
  hex=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# pair NAME SERVER_CMD... -- CLIENT_CMD... : the server in the background on $port, the
# client to 127.0.0.1; both must exit 0. The client's output is left in $logs/client.
pair() {
  local name=$1 srv=() cli=() spid src crc i; shift
  while (($#)) && [[ $1 != -- ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  port=$((port + 1))
  echo "== $name (port $port)"
  timeout 300 "${srv[@]}" -p "$port" >"$logs/server" 2>&1 &
  spid=$!
  for ((i = 0; i < 600; i++)); do
    listening "$port" && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  timeout 300 "${cli[@]}" -p "$port" 127.0.0.1 >"$logs/client" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  echo "  server: ${srv[*]} (exit $src)"; indent <"$logs/server"
  echo "  client: ${cli[*]} (exit $crc)"; indent <"$logs/client"
  if ((src == 0 && crc == 0)); then
    echo "-- PASS $name"
    return 0
  fi
  echo "-- FAIL $name"
  failed+=("$name")
  return 1
}

# JSON field of rdmakit-perf's client output ($logs/client): rk_field KEY
rk_field() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line)
        v = d["results"][0][sys.argv[2]] if sys.argv[2] in d["results"][0] else d["config"][sys.argv[2]]
        print(v)
        break
' "$logs/client" "$1" 2>/dev/null
}
# Column N (1-based) of perftest's result line (the first line starting with the size).
pt_field() {
  awk -v size="$1" -v col="$2" '$1 == size && $2 ~ /^[0-9]+$/ { print $col; exit }' "$logs/client"
}

rk=("$bin" -d "$dev" -x "$gid" --json --no-progress)
pt_common=(-d "$dev" -x "$gid" -F)
echo "perf-vs-perftest: kernel $(uname -r), device $dev, GID index $gid, rdmakit-perf: $bin"
echo "perftest: $(ib_write_bw --version 2>&1 | head -n 1)"

# ---- 1. rdmakit-perf against itself -------------------------------------------------
self() {   # self NAME ARGS... : rdmakit-perf server and client with the same ARGS
  local name=$1 metric; shift
  if pair "rdmakit-perf $name" "${rk[@]}" "$@" -- "${rk[@]}" "$@"; then
    if [[ $1 == *_bw ]]; then
      metric="$(rk_field bw_average_mb_per_sec) MB/s avg, $(rk_field msg_rate_mpps) Mpps"
    else
      metric="$(rk_field t_typical_usec) usec typical, $(rk_field p99_usec) usec p99"
    fi
    self_table+=("$(printf '%-44s %-38s %s' "$name" "$(rk_field signaling)/$(rk_field polling)" "$metric")")
  else
    self_table+=("$(printf '%-44s %-38s %s' "$name" - FAIL)")
  fi
}
self "write_bw 65536 B" write_bw -s 65536 -n "$bw_iters"
self "read_bw 65536 B" read_bw -s 65536 -n "$bw_iters"
self "send_bw 65536 B" send_bw -s 65536 -n "$bw_iters"
self "atomic_bw" atomic_bw -n "$bw_iters"
self "write_lat 2 B" write_lat -s 2 -n "$lat_iters"
self "read_lat 2 B" read_lat -s 2 -n "$lat_iters"
self "send_lat 2 B" send_lat -s 2 -n "$lat_iters"
self "atomic_lat" atomic_lat -n "$lat_iters"
self "write_bw UC 4096 B -l 8 -Q 16" write_bw -c UC -s 4096 -l 8 -Q 16 -n "$bw_iters"
self "send_bw UD 1024 B -e" send_bw -c UD -s 1024 -e -n "$bw_iters"
self "send_lat -e 2 B" send_lat -s 2 -e -n "$lat_iters"
self "read_bw 4096 B -q 2 -Q 10 (manual)" read_bw -s 4096 -q 2 -Q 10 -t 32 -n "$bw_iters"
self "send_bw 4096 B -q 4 --use_srq" send_bw -s 4096 -q 4 --use_srq -n "$bw_iters"
self "send_lat 2 B --use_srq" send_lat -s 2 --use_srq -n "$lat_iters"

# ---- 2. side by side with perftest ----------------------------------------------------
# Each comparison runs `rounds` times, alternating rdmakit-perf and perftest, and
# compares the medians (the emulated VM on a shared host is noisy: single runs vary by
# a factor of two or more).
cmp_table=()
median() { python3 -c 'import sys, statistics; v = [float(x) for x in sys.argv[1:] if x]; print(statistics.median(v) if v else "")' "$@"; }
spread() { python3 -c 'import sys; v = [float(x) for x in sys.argv[1:] if x]; print("%g..%g" % (min(v), max(v)) if v else "-")' "$@"; }
ratio() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print("%.2f" % (a / b) if b else "-")' "$1" "$2" 2>/dev/null || echo -; }
row() {   # row NAME METRIC "RDMAKIT VALUES" "PERFTEST VALUES"
  local rm pm
  rm=$(median $3) pm=$(median $4)
  cmp_table+=("$(printf '%-30s %-17s %11s %11s %6s   %s | %s' "$1" "$2" "${rm:-FAIL}" "${pm:-FAIL}" \
    "$([[ -n $rm && -n $pm ]] && ratio "$rm" "$pm" || echo -)" "$(spread $3)" "$(spread $4)")")
}

# write_bw 65536 B: BW average.
rk_bw=() pt_bw=()
for ((r = 1; r <= rounds; r++)); do
  pair "[$r/$rounds] rdmakit-perf write_bw -s 65536" "${rk[@]}" write_bw -s 65536 -n "$bw_iters" -- \
    "${rk[@]}" write_bw -s 65536 -n "$bw_iters" && rk_bw+=("$(rk_field bw_average_mb_per_sec)")
  pair "[$r/$rounds] ib_write_bw -s 65536" ib_write_bw "${pt_common[@]}" -s 65536 -n "$bw_iters" -- \
    ib_write_bw "${pt_common[@]}" -s 65536 -n "$bw_iters" && pt_bw+=("$(pt_field 65536 4)")
done
row "write_bw 65536 B" "BW avg [MB/s]" "${rk_bw[*]}" "${pt_bw[*]}"

# send_lat 2 B: t_typical and t_avg.
rk_lat=() pt_lat=() rk_avg=() pt_avg=()
for ((r = 1; r <= rounds; r++)); do
  pair "[$r/$rounds] rdmakit-perf send_lat -s 2" "${rk[@]}" send_lat -s 2 -n "$lat_iters" -- \
    "${rk[@]}" send_lat -s 2 -n "$lat_iters" && { rk_lat+=("$(rk_field t_typical_usec)"); rk_avg+=("$(rk_field t_avg_usec)"); }
  pair "[$r/$rounds] ib_send_lat -s 2" ib_send_lat "${pt_common[@]}" -s 2 -n "$lat_iters" -- \
    ib_send_lat "${pt_common[@]}" -s 2 -n "$lat_iters" && { pt_lat+=("$(pt_field 2 5)"); pt_avg+=("$(pt_field 2 6)"); }
done
row "send_lat 2 B" "t_typical [usec]" "${rk_lat[*]}" "${pt_lat[*]}"
row "send_lat 2 B" "t_avg [usec]" "${rk_avg[*]}" "${pt_avg[*]}"

# 64 B write message rate: rdmakit-perf's best (post list, -Q; one run each), then
# alternating rounds of that configuration and ib_write_bw with the same -l and -Q.
best_rate= best_l= best_q= best_cfg=
for lq in "1 64" "16 16" "32 16" "64 64"; do
  read -r l q <<<"$lq"
  if pair "rdmakit-perf write_bw -s 64 -l $l -Q $q (choosing)" "${rk[@]}" write_bw -s 64 -l "$l" -Q "$q" \
       -n "$rate_iters" -- "${rk[@]}" write_bw -s 64 -l "$l" -Q "$q" -n "$rate_iters"; then
    v=$(rk_field msg_rate_mpps)
    echo "   -> $v Mpps with post list $l, $(rk_field signaling)"
    if [[ -z $best_rate ]] || python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$v" "$best_rate"; then
      best_rate=$v best_l=$l best_q=$q best_cfg="$(rk_field signaling) / $(rk_field polling) / post list $l"
    fi
  fi
done
rk_rate=() pt_rate=()
if [[ -n $best_l ]]; then
  for ((r = 1; r <= rounds; r++)); do
    pair "[$r/$rounds] rdmakit-perf write_bw -s 64 -l $best_l -Q $best_q" "${rk[@]}" write_bw -s 64 -l "$best_l" \
      -Q "$best_q" -n "$rate_iters" -- "${rk[@]}" write_bw -s 64 -l "$best_l" -Q "$best_q" -n "$rate_iters" \
      && rk_rate+=("$(rk_field msg_rate_mpps)")
    pair "[$r/$rounds] ib_write_bw -s 64 -l $best_l -Q $best_q" ib_write_bw "${pt_common[@]}" -s 64 -l "$best_l" \
      -Q "$best_q" -n "$rate_iters" -- ib_write_bw "${pt_common[@]}" -s 64 -l "$best_l" -Q "$best_q" -n "$rate_iters" \
      && pt_rate+=("$(pt_field 64 5)")
  done
fi
row "write_bw 64 B -l ${best_l:-?} -Q ${best_q:-?}" "MsgRate [Mpps]" "${rk_rate[*]}" "${pt_rate[*]}"

echo
echo "rdmakit-perf against itself ($dev, same VM run):"
printf '%-44s %-38s %s\n' test "signaling/polling" result
printf '%s\n' "${self_table[@]}"
echo
echo "rdmakit-perf vs perftest ($dev, same VM run, median of $rounds alternating rounds; ratio = rdmakit-perf / perftest):"
[[ -n $best_cfg ]] && echo "  64 B message rate: rdmakit-perf's best was $best_cfg (-Q $best_q)"
printf '%-30s %-17s %11s %11s %6s   %s\n' comparison metric rdmakit-perf perftest ratio "spread: rdmakit-perf | perftest"
printf '%s\n' "${cmp_table[@]}"
rm -rf -- "$logs"
if ((${#failed[@]})); then
  echo "perf-vs-perftest: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "perf-vs-perftest: all runs completed"
