#!/usr/bin/env bash
# Installs what rdmakit needs to build and test on Debian 12 (idempotent; root or sudo).
# RDMAKIT_WITH_RXE=1 also installs what the soft-RoCE VM suite needs.
set -euo pipefail
pkgs=(meson ninja-build pkg-config g++ cmake python3 doctest-dev libbenchmark-dev doxygen
      libibverbs-dev librdmacm-dev rdma-core ibverbs-providers valgrind ccache libasio-dev
      clang libclang-rt-14-dev)  # clang: the compile-fail control compiles with it too
      # (tests), and CI's sanitizer stage builds with it (its runtimes: rt-14-dev)
if [ "${RDMAKIT_WITH_RXE:-0}" = 1 ]; then
  pkgs+=(qemu-system-x86 busybox-static kmod cpio ibverbs-utils rdmacm-utils perftest iproute2 xz-utils zstd)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
echo "rdmakit: installing ${missing[*]}" >&2
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
