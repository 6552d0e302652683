#!/usr/bin/env bash
# netem.sh — rdmakit-faults over a faulty wire: two qemu guests (tests/rxe/two-hosts.sh),
# netem on the client host's RoCE packets, the same scenarios as the mock's
# (tools/faults/faults_test.cpp, docs/faults.md).
#
#   tests/rxe/netem.sh BUILD_DIR      # from the host: boots the two guests, prints the table
#
# Host a runs the servers, host b the clients, one TCP port per step. Before each
# client, host b puts `tc ... netem SPEC` on eth0 for UDP port 4791 only (RoCEv2; the
# TCP exchange is spared), so the requests (SENDs, WRITEs) meet the faults and the
# responder's ACKs do not, as on the mock, whose faults hit messages and never
# responses. Each step checks what the transport promises (RC: exactly once in order,
# or retry_exc_err under total loss; UC/UD: nothing partial, nothing duplicated).
# Exit status 0 only when every step passed on both hosts.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
(($# == 1)) || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
build=$(cd -- "$1" && pwd -P) || exit 2
[[ -x $build/tools/rdmakit-faults ]] || { echo "netem.sh: $build/tools/rdmakit-faults is not built" >&2; exit 2; }
if [[ ${RDMAKIT_RXE:-} != 1 ]]; then
  log=$(mktemp "${TMPDIR:-/tmp}/netem.XXXXXX") || exit 125
  "$here/two-hosts.sh" --timeout "${RDMAKIT_NETEM_TIMEOUT:-400}" -- "$here/netem.sh" "$build" -- "$here/netem.sh" "$build" \
    2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # The table: one row per step, the client's (b) and the server's (a) line side by side.
  echo
  echo "| step | netem (client egress, RoCE only) | client (b) | server (a) |"
  echo "|---|---|---|---|"
  awk '
    /^\[[ab]\] RESULT / {
      host = $1; step = $3; spec = $4; gsub(/_/, " ", spec)
      line = $0; sub(/^.*faults /, "", line)
      gsub(/ (side|count|size)=[^ ]*/, "", line)
      if (!(step in order)) { order[step] = ++n; name[n] = step; specs[step] = spec }
      if (host == "[b]") cli[step] = line; else srv[step] = line
    }
    END { for (i = 1; i <= n; i++) { s = name[i]; printf "| %s | %s | %s | %s |\n", s, specs[s], cli[s], srv[s] } }
  ' "$log"
  rm -f "$log"
  exit "$rc"
fi

# ------------------------------------------------------------------ inside a guest
dev=${RDMAKIT_DEVICE:-rxe0}
peer=${RDMAKIT_PEER:?}
role=${RDMAKIT_HOST:?}
faults=$build/tools/rdmakit-faults
port=18700
failed=0

netem() {   # netem SPEC...: on eth0's RoCEv2 packets only; "none" removes it
  tc qdisc del dev eth0 root 2>/dev/null
  [[ $1 == none ]] && return 0
  tc qdisc add dev eth0 root handle 1: prio &&
    tc qdisc add dev eth0 parent 1:3 handle 30: netem "$@" &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
      match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3
}

# step NAME NETEM_SPEC SERVER_EXPECT CLIENT_EXPECT -- ARGS... : server on a, client on b
# (after b applied NETEM_SPEC, words joined by _; both:SPEC: a too, so ACKs meet it as
# well); each side's line must match its extended regular expression.
step() {
  local name=$1 spec=$2 want_srv=$3 want_cli=$4 out rc want both=0; shift 5
  [[ $spec == both:* ]] && both=1
  port=$((port + 1))
  out=$(mktemp /tmp/netem.XXXXXX)
  if [[ $role == a ]]; then
    # shellcheck disable=SC2046
    ((both)) && { netem $(tr _ ' ' <<<"${spec#both:}") || echo "netem $spec: tc failed"; }
    timeout 60 "$faults" -d "$dev" -g 1 -p "$port" "$@" >"$out" 2>&1
    rc=$?
    ((both)) && netem none
    want=$want_srv
  else
    # shellcheck disable=SC2046
    netem $(tr _ ' ' <<<"${spec#both:}") || echo "netem $spec: tc failed"
    timeout 60 "$faults" -d "$dev" -g 1 -p "$port" "$@" "$peer" >"$out" 2>&1
    rc=$?
    netem none
    want=$want_cli
  fi
  if ((rc == 0)) && grep -Eq -- "$want" "$out"; then
    echo "RESULT $name $spec $(grep '^faults ' "$out")"
    echo "-- PASS $name"
  else
    sed 's/^/    /' "$out"
    echo "RESULT $name $spec $(grep '^faults ' "$out" || echo 'faults none')"
    echo "-- FAIL $name (exit $rc; wanted /$want/)"
    failed=$((failed + 1))
  fi
  rm -f "$out"
}

n=200
ok_all="completions=success:$n( |$)"
once="exactly_once=yes"
whole="duplicates=0 partial=0"
# RC under duplication, reordering or lost ACKs: intact, in order, never twice, but rxe
# may give up with retry_exc_err (docs/faults.md, differences 1 and 6).
intact="duplicates=0 partial=0 .*in_order=yes"
ok_or_retry="$ok_all|first_error=retry_exc_err"
step rc-loss-0 none "$once" "$ok_all" -- -T rc -n $n
step rc-loss-1 loss_1% "$once" "$ok_all" -- -T rc -n $n
step rc-loss-10 loss_10% "$once" "$ok_all" -- -T rc -n $n
step rc-loss-10-write_imm loss_10% "$once" "$ok_all" -- -T rc -o write_imm -n $n
step rc-loss-10-acks-too both:loss_10% "$intact" "$ok_or_retry" -- -T rc -n $n
step rc-loss-100 loss_100% "delivered=0 " "first_error=retry_exc_err" -- -T rc -n $n
step uc-loss-0 none "$whole" "$ok_all" -- -T uc -n $n
step uc-loss-0-write_imm none "$whole" "$ok_all" -- -T uc -o write_imm -n $n
step uc-loss-1 loss_1% "$whole" "$ok_all" -- -T uc -n $n
step uc-loss-10 loss_10% "$whole" "$ok_all" -- -T uc -n $n
step uc-loss-10-write_imm loss_10% "$whole" "$ok_all" -- -T uc -o write_imm -n $n
step uc-loss-10-write loss_10% "delivered=" "$ok_all" -- -T uc -o write -n $n
# One packet a message (1024 bytes at MTU 1024): what rxe's UC does without a message
# in progress when a packet goes missing.
step uc-loss-10-1pkt loss_10% "$whole" "$ok_all" -- -T uc -s 1024 -n $n
step uc-loss-10-write_imm-1pkt loss_10% "$whole" "$ok_all" -- -T uc -o write_imm -s 1024 -n $n
step uc-loss-100 loss_100% "delivered=0 " "$ok_all" -- -T uc -n $n
step ud-loss-1 loss_1% "$whole" "$ok_all" -- -T ud -n $n
step ud-loss-10 loss_10% "$whole" "$ok_all" -- -T ud -n $n
step ud-loss-100 loss_100% "delivered=0 " "$ok_all" -- -T ud -n $n
step rc-dup-1 duplicate_1% "$intact" "$ok_or_retry" -- -T rc -n $n
step rc-dup-10 duplicate_10% "$intact" "$ok_or_retry" -- -T rc -n $n
step uc-dup-10 duplicate_10% "delivered=" "$ok_all" -- -T uc -n $n
step uc-dup-10-1pkt duplicate_10% "delivered=" "$ok_all" -- -T uc -s 1024 -n $n
step ud-dup-10 duplicate_10% "delivered=" "$ok_all" -- -T ud -n $n
step rc-reorder-10 delay_2ms_reorder_10% "$intact" "$ok_or_retry" -- -T rc -n $n
step uc-reorder-10 delay_2ms_reorder_10% "delivered=" "$ok_all" -- -T uc -n $n
step ud-reorder-10 delay_2ms_reorder_10% "delivered=" "$ok_all" -- -T ud -n $n
echo "netem ($role): $failed step(s) failed"
exit $((failed > 0))
