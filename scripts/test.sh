#!/usr/bin/env bash
# Sets up (packages, build folder), builds and runs every test on the mock, and ends
# with "N passed, N failed". Extra arguments go to `meson setup` (e.g. -Db_sanitize=address,undefined).
# BUILD_DIR picks the build folder (default: build). A folder it creates is compiled at
# -Og with line tables (-g1): a third of the compile time of -O2 -g, and the tests run as
# fast. The benchmarks keep -O2 (bench/meson.build); ASan+UBSan (CI) covers what
# optimization can expose; `meson configure build -Doptimization=2` for a release check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" -Doptimization=g -Ddebug=false -Dcpp_args=-g1 "$@" >/dev/null
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@" >/dev/null
fi
# What these tests run, no more: not the benchmarks (`ninja -C build` builds those too),
# nor the programs of the rxe and ibverbs suites, which need an RDMA device to do more
# than skip, nor the installed rdmakit-perf with its device runners (perf-full; the tools
# suite runs a build of it with the mock's tested runners only). CI's rxe stage builds and
# runs those: `meson test -C build --suite ibverbs --suite perf-full`.
skip_suites=(rxe ibverbs perf-full)
if ! { ninja -C "$build" build.ninja &&  # first: a changed meson.build reconfigures
       list=$(python3 "$root/scripts/test_targets.py" "$build" "${skip_suites[@]}") &&
       mapfile -t targets <<<"$list" && ninja -C "$build" "${targets[@]}"; } >"$build/ninja.log" 2>&1; then
  tail -n 60 "$build/ninja.log"
  echo "0 passed, 1 failed (the build failed)"
  exit 1
fi
status=0
meson test -C "$build" --no-rebuild "${skip_suites[@]/#/--no-suite=}" --print-errorlogs \
  --num-processes "${RDMAKIT_TEST_JOBS:-2}" >/dev/null || status=$?
python3 "$root/scripts/summarize_tests.py" "$build/meson-logs/testlog.json" || status=1
exit $status
