#!/usr/bin/env bash
# run-in-vm.sh — run one command inside a throw-away qemu guest that has a
# soft-RoCE device (rxe0), with the host's root file system visible read-only.
#
#   tests/rxe/run-in-vm.sh [--timeout SECONDS] [--out DIR] [--env NAME=VALUE]...
#                          [--mtu BYTES] [--smp N] [--verbose] [--prepare-only]
#                          [--wire listen:PORT|connect:PORT --ip ADDR/PREFIX] -- COMMAND [ARGS...]
#
# By default rxe0 sits on a dummy netdev (one host: processes meet over loopback). With
# --wire the guest gets a virtio-net NIC joined to one other guest's by a qemu socket
# netdev on 127.0.0.1:PORT (one listens, the other connects), rxe0 sits on that NIC
# (eth0) with address --ip, and RoCEv2 packets cross a link between two kernels
# (tests/rxe/two-hosts.sh starts such a pair).
#
# COMMAND runs as root in the guest, chrooted into the host's root, in the
# caller's current directory, with RDMAKIT_RXE=1, RDMAKIT_DEVICE=rxe0,
# RDMAKIT_GID_INDEX=1 and RDMAKIT_RXE_OUT=<the results folder, writable>.
# Its stdout/stderr are streamed to ours and its exit code becomes ours.
# Harness failures use their own exit codes (see README.md):
#   120 the VM did not boot   121 rxe0 could not be created   122 the guest died
#   while COMMAND ran   124 timeout   125 host-side preparation failed   2 usage
set -uo pipefail

readonly EX_USAGE=2 EX_BOOT=120 EX_RXE=121 EX_DIED=122 EX_TIMEOUT=124 EX_PREP=125
# Modules for the initramfs (their dependencies are added automatically).
# sch_prio, sch_netem and cls_u32: netem.sh puts faults on the RoCE packets of the link.
readonly MODULES=(virtio_pci 9pnet_virtio 9p dummy virtio_net crc32_generic rdma_rxe rdma_ucm
                 sch_prio sch_netem cls_u32)
readonly PACKAGES=(qemu-system-x86 busybox-static kmod cpio rdma-core ibverbs-providers
                   ibverbs-utils perftest iproute2 xz-utils)

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/../.." && pwd -P)
cache_dir=${RDMAKIT_RXE_CACHE:-$repo_root/.rxe-cache}

msg() { printf 'run-in-vm: %s\n' "$*" >&2; }
die() { local code=$1; shift; msg "ERROR: $*"; exit "$code"; }

usage() {
  sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
  exit "${1:-$EX_USAGE}"
}

# ---------------------------------------------------------------- arguments
timeout_s=600
smp=2
netdev_mtu=9000     # rxe's active MTU follows the netdev's: 9000 gives 4096, 1500 gives 1024
out_dir=
verbose=0
prepare_only=0
extra_env=()
wire=
guest_ip=192.168.77.1/24
while (($#)); do
  case $1 in
    --timeout) (($# >= 2)) || usage; timeout_s=$2; shift 2 ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    --out) (($# >= 2)) || usage; out_dir=$2; shift 2 ;;
    --out=*) out_dir=${1#*=}; shift ;;
    --smp) (($# >= 2)) || usage; smp=$2; shift 2 ;;
    --smp=*) smp=${1#*=}; shift ;;
    --mtu) (($# >= 2)) || usage; netdev_mtu=$2; shift 2 ;;
    --mtu=*) netdev_mtu=${1#*=}; shift ;;
    --wire) (($# >= 2)) || usage; wire=$2; shift 2 ;;
    --wire=*) wire=${1#*=}; shift ;;
    --ip) (($# >= 2)) || usage; guest_ip=$2; shift 2 ;;
    --ip=*) guest_ip=${1#*=}; shift ;;
    --env) (($# >= 2)) || usage; extra_env+=("$2"); shift 2 ;;
    --env=*) extra_env+=("${1#*=}"); shift ;;
    -v|--verbose) verbose=1; shift ;;
    --prepare-only) prepare_only=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    -*) msg "unknown option: $1"; usage ;;
    *) break ;;
  esac
done
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -gt 0 ]] || die "$EX_USAGE" "--timeout wants a positive number of seconds"
[[ $smp =~ ^[1-8]$ ]] || die "$EX_USAGE" "--smp wants 1..8 virtual CPUs"
[[ $netdev_mtu =~ ^[0-9]+$ && $netdev_mtu -ge 1280 && $netdev_mtu -le 65535 ]] || die "$EX_USAGE" "--mtu wants 1280..65535"
for kv in "${extra_env[@]}"; do
  [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "$EX_USAGE" "--env wants NAME=VALUE, got: $kv"
done
((prepare_only || $# > 0)) || usage

# ---------------------------------------------------------------- packages
as_root() {
  if ((EUID == 0)); then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1; fi
}

ensure_packages() {
  local missing=() p log
  declare -A ok=()
  while read -r p; do ok[$p]=1; done < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "$@" 2>/dev/null \
                                          | awk '$1 == "ii" { sub(/:.*/, "", $2); print $2 }')
  for p in "$@"; do [[ -n ${ok[$p]:-} ]] || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  msg "installing missing packages: ${missing[*]}"
  log=$(as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
          --no-install-recommends "${missing[@]}" 2>&1) \
    || { printf '%s\n' "$log" >&2; die "$EX_PREP" "could not install: ${missing[*]} (needs root or passwordless sudo)"; }
}

# ---------------------------------------------------------------- guest /init
# Runs under busybox sh as PID 1. Reports through files on the results share
# (mounted at /out): stages (uptime per step), status, rxe.log, rc, stdout, stderr.
guest_init() {
  cat <<'INIT'
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

say() { echo "rxe-init: $*"; }
stage() {
  set -- "$1" "$(cut -d' ' -f1 /proc/uptime)"
  say "$1 at $2 s"
  [ -d /out/. ] && [ -f /out/.rxe-session ] && echo "$1 $2" >>/out/stages
}
halt() { sync; poweroff -f; sleep 5; }
fatal() {
  say "FATAL: $*"
  [ -f /out/.rxe-session ] && { echo "$*" >/out/init-error; echo boot-failed >/out/status; }
  halt
}

while read -r m; do
  insmod "/lib/modules/$m.ko" || say "insmod $m failed"
done </etc/rxe-modules

NINEP=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$NINEP,cache=none" rxeout /out || fatal "cannot mount the results share"
[ -f /out/.rxe-session ] || fatal "results share has no session file"
echo booting >/out/status
stage modules-loaded

mount -t 9p -o "$NINEP,cache=loose,ro" hostroot /host || fatal "cannot mount the host root (9p)"
mount -t tmpfs -o mode=1777 tmpfs /host/tmp || fatal "cannot mount tmpfs on /host/tmp"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t tmpfs -o mode=755 tmpfs /host/run
mount -t tmpfs -o mode=1777 tmpfs /host/var/tmp
OUT_PATH=$(cat /out/.out-path)
mkdir -p "/host$OUT_PATH" 2>/dev/null
mount -o bind /out "/host$OUT_PATH" || fatal "cannot bind the results share at $OUT_PATH"
echo booted >/out/status
stage booted

# rxe over a dummy netdev (TCP between processes goes over 127.0.0.1), or over the
# virtio NIC that is wired to another guest.
NETDEV=$(cat /out/.guest-netdev)
rxe_fail() {
  {
    echo "rxe0 setup failed: $*"
    echo "--- ip addr"; ip addr
    echo "--- /sys/class/infiniband"; ls -l /sys/class/infiniband 2>&1
    echo "--- dmesg (tail)"; dmesg | tail -n 40
  } >>/out/rxe.log 2>&1
  echo rxe-failed >/out/status
  say "rxe0 setup failed: $*"
  halt
}
ip link set lo up || rxe_fail "lo up"
if [ "$NETDEV" = dummy0 ]; then
  [ -d /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || rxe_fail "no dummy0"
fi
[ -d /sys/class/net/$NETDEV ] || rxe_fail "no $NETDEV"
ip addr add "$(cat /out/.guest-ip)" dev $NETDEV || rxe_fail "address on $NETDEV"
ip link set $NETDEV mtu "$(cat /out/.guest-mtu)" || rxe_fail "mtu on $NETDEV"
ip link set $NETDEV up || rxe_fail "$NETDEV up"
chroot /host rdma link add rxe0 type rxe netdev $NETDEV >>/out/rxe.log 2>&1 \
  || rxe_fail "rdma link add rxe0 type rxe netdev $NETDEV"
P=/sys/class/infiniband/rxe0/ports/1
i=0
until grep -q ACTIVE $P/state 2>/dev/null && [ -r $P/gids/1 ] \
      && ! grep -q '^0000:0000:0000:0000:0000:0000:0000:0000$' $P/gids/1; do
  i=$((i + 1))
  [ $i -le 200 ] || rxe_fail "port 1 of rxe0 not ACTIVE with a GID at index 1 after 10 s"
  sleep 0.05
done
{ echo "state: $(cat $P/state)"; echo "gid[0]: $(cat $P/gids/0)"; echo "gid[1]: $(cat $P/gids/1)"; } >>/out/rxe.log
echo running >/out/status
stage rxe-ready

env -i /bin/chroot /host /bin/bash "$OUT_PATH/.rxe-cmd.sh" </dev/null >>/out/stdout 2>>/out/stderr
echo $? >/out/rc
stage command-done
echo done >/out/status
halt
INIT
}

# ---------------------------------------------------------------- kernel + initramfs cache
# Prints "PACKAGE VERSION" for the kernel image linux-image-amd64 depends on. apt-cache
# takes ~1 s per call here (no pkgcache), so the answer is remembered until apt's
# package lists change.
resolve_kernel_package() {
  local stamp memo=$cache_dir/resolved s pkg ver
  stamp=$(stat -c '%Y' /var/lib/apt/lists /etc/apt /etc/apt/preferences.d 2>/dev/null | tr '\n' .)
  if [[ -f $memo ]] && read -r s pkg ver <"$memo" && [[ $s == "$stamp" && -n $ver ]]; then
    echo "$pkg $ver"; return 0
  fi
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '$1 ~ /Depends:$/ && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
  [[ -n $pkg ]] || return 1
  ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | awk '/^Version:/ { print $2; exit }')
  [[ -n $ver ]] || return 1
  echo "$stamp $pkg $ver" >"$memo"
  echo "$pkg $ver"
}

# The bzImage is xz-compressed; decompressing it under TCG costs seconds per boot.
# When the kernel supports PVH entry, qemu boots the uncompressed ELF directly.
extract_vmlinux() {
  local bz=$1 config=$2 dest=$3 off
  grep -q '^CONFIG_PVH=y' "$config" 2>/dev/null || return 1
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" 2>/dev/null | head -n 1 | cut -d: -f1)
  [[ -n $off ]] || return 1
  tail -c +"$((off + 1))" "$bz" 2>/dev/null | xz -dc --single-stream >"$dest.tmp" 2>/dev/null
  [[ ${PIPESTATUS[1]} == 0 ]] || { rm -f "$dest.tmp"; return 1; }   # tail may die of SIGPIPE: fine
  [[ $(head -c 4 "$dest.tmp" | od -An -c | tr -d ' ') == '177ELF' ]] || { rm -f "$dest.tmp"; return 1; }
  mv "$dest.tmp" "$dest"
}

# Copy module NAME (and, first, its dependencies) into $initrd_root; append to $initrd_root/etc/rxe-modules.
declare -A mod_seen=()
add_module() {
  local name=$1 key=${1//-/_} file deps d
  [[ -n ${mod_seen[$key]:-} ]] && return 0
  mod_seen[$key]=1
  file=$(modinfo -b "$kroot" -k "$kver" -F filename "$name" 2>/dev/null) \
    || die "$EX_PREP" "module $name not found in kernel $kver"
  file=${file%%$'\n'*}
  [[ $file == "(builtin)" || -z $file ]] && return 0      # built into the kernel
  deps=$(modinfo -b "$kroot" -k "$kver" -F depends "$name")
  local -a dep_list=()
  IFS=, read -r -a dep_list <<<"$deps"
  for d in "${dep_list[@]}"; do [[ -n $d ]] && add_module "$d"; done
  case $file in
    *.ko.xz)  ensure_packages xz-utils; xz -dc "$file" ;;
    *.ko.zst) ensure_packages zstd;     zstd -qdc "$file" ;;
    *.ko.gz)  gzip -dc "$file" ;;
    *.ko)     cat "$file" ;;
    *) die "$EX_PREP" "unexpected module file $file" ;;
  esac >"$initrd_root/lib/modules/$key.ko" || die "$EX_PREP" "cannot copy module $file"
  echo "$key" >>"$initrd_root/etc/rxe-modules"
}

prepare_cache() {
  mkdir -p "$cache_dir" || die "$EX_PREP" "cannot create cache folder $cache_dir"
  exec 9>"$cache_dir/.lock"
  flock 9

  local pkg='' ver='' entry
  if read -r pkg ver < <(resolve_kernel_package) && [[ -n $ver ]]; then
    entry=$cache_dir/${pkg}_${ver}
  else
    pkg=
    # No apt metadata (offline?): fall back to the newest prepared kernel.
    entry=$(ls -1dt "$cache_dir"/linux-image-*/ 2>/dev/null | head -n 1)
    entry=${entry%/}
    [[ -n $entry && -f $entry/vmlinuz ]] \
      || die "$EX_PREP" "cannot resolve the package behind linux-image-amd64 (apt-cache depends) and nothing is cached"
    msg "apt-cache cannot resolve linux-image-amd64; using cached $(basename "$entry")"
  fi
  mkdir -p "$entry"

  local init_text key
  init_text=$(guest_init)
  key=$( { printf '%s\n' "$init_text" "${MODULES[*]}"; sha256sum /bin/busybox; } | sha256sum | cut -c1-16)
  initrd=$entry/initrd-$key.gz
  if [[ ! -f $entry/vmlinux && ! -f $entry/no-pvh && -f $entry/vmlinuz ]]; then
    extract_vmlinux "$entry/vmlinuz" "$entry/config" "$entry/vmlinux" || : >"$entry/no-pvh"
  fi
  kernel=$entry/vmlinux
  [[ -f $kernel ]] || kernel=$entry/vmlinuz
  if [[ -f $kernel && -f $initrd && -f $entry/kver ]]; then
    kver=$(<"$entry/kver")
    flock -u 9
    return 0
  fi

  local t0=$SECONDS work deb
  [[ -n $pkg ]] || die "$EX_PREP" "cached kernel lacks the current initramfs and apt cannot resolve the kernel"
  msg "preparing kernel $pkg $ver and initramfs in $entry (first run only)"
  deb=$(ls -1 "$entry"/*.deb 2>/dev/null | head -n 1)
  if [[ -z $deb ]]; then
    (cd "$entry" && apt-get download -q=2 "$pkg" >/dev/null 2>"$entry/download.log") \
      || { cat "$entry/download.log" >&2; die "$EX_PREP" "apt-get download $pkg failed"; }
    deb=$(ls -1 "$entry"/*.deb 2>/dev/null | head -n 1)
    [[ -n $deb ]] || die "$EX_PREP" "apt-get download $pkg left no .deb"
    rm -f "$entry/download.log"
  fi
  rm -rf "$cache_dir"/.build.*          # leftovers of interrupted runs
  work=$(mktemp -d "$cache_dir/.build.XXXXXX") || die "$EX_PREP" "mktemp failed"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  kroot=$work/kernel
  dpkg -x "$deb" "$kroot" || die "$EX_PREP" "dpkg -x $deb failed"
  kver=$(ls -1 "$kroot/lib/modules" | head -n 1)
  [[ -n $kver && -f $kroot/boot/vmlinuz-$kver ]] || die "$EX_PREP" "no kernel image in $deb"
  depmod -b "$kroot" "$kver" || die "$EX_PREP" "depmod failed"

  initrd_root=$work/initrd
  mkdir -p "$initrd_root"/{bin,dev,proc,sys,out,host,etc,lib/modules}
  cp /bin/busybox "$initrd_root/bin/busybox" || die "$EX_PREP" "no /bin/busybox"
  ln -s busybox "$initrd_root/bin/sh"
  mknod -m 600 "$initrd_root/dev/console" c 5 1 2>/dev/null || true
  : >"$initrd_root/etc/rxe-modules"
  local m
  for m in "${MODULES[@]}"; do add_module "$m"; done
  printf '%s\n' "$init_text" >"$initrd_root/init"
  chmod 755 "$initrd_root/init"
  (cd "$initrd_root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -6) >"$initrd.tmp" \
    || die "$EX_PREP" "building the initramfs failed"
  kernel=$entry/vmlinuz
  cp "$kroot/boot/vmlinuz-$kver" "$kernel.tmp" && mv "$kernel.tmp" "$kernel"
  cp "$kroot/boot/config-$kver" "$entry/config"
  rm -f "$entry/vmlinux" "$entry/no-pvh"
  if extract_vmlinux "$kernel" "$entry/config" "$entry/vmlinux"; then
    kernel=$entry/vmlinux
  else
    : >"$entry/no-pvh"
    msg "note: booting the compressed bzImage (no PVH or not xz); each boot is a few seconds slower"
  fi
  echo "$kver" >"$entry/kver"
  rm -f "$entry"/initrd-*.gz
  mv "$initrd.tmp" "$initrd"
  msg "prepared kernel $kver in $((SECONDS - t0)) s; modules: $(tr '\n' ' ' <"$initrd_root/etc/rxe-modules")"
  trap - EXIT
  # The unpacked kernel is ~400 MB of small files; removing it can take many
  # seconds on a busy disk, so do it in the background, detached from our output.
  rm -rf "$work" >/dev/null 2>&1 &
  flock -u 9
}

ensure_packages "${PACKAGES[@]}"
prepare_cache
((prepare_only)) && { msg "kernel $kver ready: $kernel, $initrd"; exit 0; }

# ---------------------------------------------------------------- results folder + command script
if [[ -n $out_dir ]]; then
  mkdir -p -- "$out_dir" || die "$EX_USAGE" "cannot create $out_dir"
  out_dir=$(cd -- "$out_dir" && pwd -P)
  rm -f -- "$out_dir"/{.rxe-session,.out-path,.guest-ip,.guest-netdev,.guest-mtu,.rxe-cmd.sh,stages,status,init-error,rxe.log,rc,stdout,stderr,console.log,qemu.log}
  keep_out=1
else
  out_dir=$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-rxe.XXXXXX") || die "$EX_PREP" "mktemp failed"
  out_dir=$(cd -- "$out_dir" && pwd -P)
  keep_out=0
fi
[[ $out_dir != *$'\n'* ]] || die "$EX_USAGE" "the results folder path contains a newline"

cwd=$(pwd -P)
{
  echo '# generated by run-in-vm.sh'
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  echo 'export HOME=/tmp LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb'
  printf 'export TMPDIR=/tmp RDMAKIT_RXE=1 RDMAKIT_DEVICE=rxe0 RDMAKIT_GID_INDEX=1 RDMAKIT_RXE_OUT=%q\n' "$out_dir"
  # Forward the caller's RDMAKIT_* settings and sanitizer/test knobs (meson sets some).
  while IFS= read -r name; do
    case $name in
      RDMAKIT_RXE|RDMAKIT_DEVICE|RDMAKIT_GID_INDEX|RDMAKIT_RXE_OUT|RDMAKIT_RXE_CACHE) ;;
      RDMAKIT_*|ASAN_OPTIONS|UBSAN_OPTIONS|LSAN_OPTIONS|TSAN_OPTIONS|MSAN_OPTIONS|MALLOC_PERTURB_|DOCTEST_*)
        printf 'export %s=%q\n' "$name" "${!name}" ;;
    esac
  done < <(compgen -e)
  for kv in "${extra_env[@]}"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
  echo 'ulimit -l unlimited 2>/dev/null'
  printf 'cd -- %q 2>/dev/null || { echo %q >&2; exit 125; }\n' "$cwd" \
    "run-in-vm: the working directory $cwd is not visible in the guest (/tmp there is a private tmpfs)"
  printf 'exec'; printf ' %q' "$@"; printf '\n'
} >"$out_dir/.rxe-cmd.sh"
printf '%s' "$out_dir" >"$out_dir/.out-path"
printf '%s' "$guest_ip" >"$out_dir/.guest-ip"
if [[ -n $wire ]]; then printf eth0 >"$out_dir/.guest-netdev"; else printf dummy0 >"$out_dir/.guest-netdev"; fi
printf '%s' "$netdev_mtu" >"$out_dir/.guest-mtu"
: >"$out_dir/stdout"; : >"$out_dir/stderr"; : >"$out_dir/console.log"
date +%s >"$out_dir/.rxe-session"

# ---------------------------------------------------------------- boot
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  ((keep_out)) || rm -rf -- "$out_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# qboot (a minimal firmware shipped with qemu) starts the kernel ~1 s sooner than SeaBIOS.
firmware=()
if [[ ${RDMAKIT_RXE_FIRMWARE:-qboot} == qboot && -f /usr/share/qemu/qboot.rom ]]; then
  firmware=(-bios /usr/share/qemu/qboot.rom)
fi

# --wire: a virtio NIC on a socket netdev shared with the other guest (MAC from the address).
nic=(-nic none)
if [[ -n $wire ]]; then
  [[ $wire =~ ^(listen|connect):([0-9]+)$ ]] || die "$EX_USAGE" "--wire takes listen:PORT or connect:PORT, not '$wire'"
  [[ $guest_ip =~ ^[0-9]+\.[0-9]+\.[0-9]+\.([0-9]+)/[0-9]+$ ]] || die "$EX_USAGE" "--ip takes A.B.C.D/PREFIX, not '$guest_ip'"
  mac=$(printf '52:54:00:77:00:%02x' "${BASH_REMATCH[1]}")
  [[ $wire =~ ^(listen|connect):([0-9]+)$ ]]
  nic=(-netdev "socket,id=wire,${BASH_REMATCH[1]}=127.0.0.1:${BASH_REMATCH[2]}"
       -device "virtio-net-pci,netdev=wire,mac=$mac,host_mtu=$netdev_mtu")
fi

t_start=$(date +%s%N)
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
  -machine q35 -cpu max -smp "$smp" -m 2048 -nographic -no-reboot "${nic[@]}" "${firmware[@]}" \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=${out_dir//,/,,},mount_tag=rxeout,security_model=none,multidevs=remap" \
  </dev/null >"$out_dir/console.log" 2>"$out_dir/qemu.log" &
qemu_pid=$!
pids+=("$qemu_pid")
tail -c +1 -s 0.1 -f --pid="$qemu_pid" "$out_dir/stdout" & pids+=($!)
tail -c +1 -s 0.1 -f --pid="$qemu_pid" "$out_dir/stderr" >&2 & pids+=($!)
if ((verbose)); then
  tail -c +1 -s 0.1 -f --pid="$qemu_pid" "$out_dir/console.log" | sed -u 's/^/[console] /' >&2 & pids+=($!)
fi
wait "$qemu_pid"
qemu_rc=$?
for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null; done
pids=()
t_ms=$((($(date +%s%N) - t_start) / 1000000))
t_total=$((t_ms / 1000)).$(printf '%03d' $((t_ms % 1000)))

status=$(cat "$out_dir/status" 2>/dev/null)
show_console() {
  keep_out=1     # harness failure: keep the evidence
  msg "last lines of the guest console (kept in $out_dir):"
  tail -n "${1:-30}" "$out_dir/console.log" | sed 's/^/  | /' >&2
  if [[ -s $out_dir/qemu.log ]]; then
    msg "qemu said:"; sed 's/^/  | /' "$out_dir/qemu.log" >&2
  fi
}
if ((verbose)); then
  msg "kernel $kver; guest stages (uptime, s): $(tr '\n' ' ' <"$out_dir/stages" 2>/dev/null); wall time ${t_total} s"
fi

if ((qemu_rc == 124 || qemu_rc == 137)); then
  msg "ERROR: TIMEOUT: the guest did not finish within $timeout_s s (state: ${status:-not booted})"
  keep_out=1
  [[ $status == running ]] || show_console
  msg "results and console log kept in $out_dir"
  exit "$EX_TIMEOUT"
fi
case $status in
  done)
    rc=$(cat "$out_dir/rc" 2>/dev/null)
    [[ $rc =~ ^[0-9]+$ ]] || { show_console; die "$EX_DIED" "the guest did not record an exit code"; }
    exit "$rc" ;;
  running)
    show_console 40
    die "$EX_DIED" "the guest died while the command ran (qemu exit $qemu_rc)" ;;
  rxe-failed)
    keep_out=1
    msg "rxe diagnostics (kept in $out_dir):"; sed 's/^/  | /' "$out_dir/rxe.log" >&2
    die "$EX_RXE" "could not create rxe0 (rdma link add rxe0 type rxe netdev $(cat "$out_dir/.guest-netdev"))" ;;
  *)
    show_console 40
    [[ -s $out_dir/init-error ]] && msg "guest init: $(cat "$out_dir/init-error")"
    die "$EX_BOOT" "the VM failed to boot (qemu exit $qemu_rc, state: ${status:-no sign of life})" ;;
esac
