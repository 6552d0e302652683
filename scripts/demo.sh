#!/usr/bin/env bash
# Sets up (packages, build folder), builds, and runs the demo on the mock HCA: the
# walkthrough example, then rdmakit-perf (perftest-like) write bandwidth and send
# latency with both ends in this process. Arguments replace rdmakit-perf's.
# BUILD_DIR picks the build folder (default: build-demo, a release build of these two
# programs only: the numbers it prints are what a user's -O2 build gets).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-demo}
"$root/scripts/setup.sh"
[ -f "$build/build.ninja" ] || meson setup "$build" "$root" --buildtype=release -Dtests=disabled \
  -Dbenchmarks=disabled -Ddocs=disabled >/dev/null
ninja -C "$build" examples/walkthrough tools/rdmakit-perf >"$build/demo-build.log" 2>&1 || {
  tail -n 40 "$build/demo-build.log"
  exit 1
}
echo "== walkthrough (policy layer, mock HCA)"
"$build/examples/walkthrough"
if [ $# -gt 0 ]; then
  echo "== rdmakit-perf $*"
  exec "$build/tools/rdmakit-perf" "$@"
fi
echo "== rdmakit-perf write_bw -s 4096 (mock, both ends in this process)"
"$build/tools/rdmakit-perf" write_bw -s 4096 -n 20000 --no-progress
echo "== rdmakit-perf send_lat -s 64"
"$build/tools/rdmakit-perf" send_lat -s 64 -n 2000 --no-progress
