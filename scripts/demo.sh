#!/usr/bin/env bash
# Sets up (packages, build folder), builds, and runs the demo on the mock HCA.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
[ -f "$build/build.ninja" ] || meson setup "$build" "$root" >/dev/null
ninja -C "$build" examples/walkthrough >/dev/null
exec "$build/examples/walkthrough" "$@"
