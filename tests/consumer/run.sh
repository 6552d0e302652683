#!/usr/bin/env bash
# Builds tests/consumer/project against this checkout as a Meson subproject, runs it,
# and checks that rdmakit's own tests, benchmarks and tools stayed out of the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/consumer/project" "$work/consumer"
mkdir -p "$work/consumer/subprojects"
ln -s "$root" "$work/consumer/subprojects/rdmakit"
meson setup "$work/build" "$work/consumer" >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
ninja -C "$work/build" >"$work/ninja.log" 2>&1 || { cat "$work/ninja.log"; exit 1; }
"$work/build/consumer"
targets=$(meson introspect --targets "$work/build")
for t in test_core_types conformance_mock policy_grid rdmakit-pingpong walkthrough; do
  if grep -q "\"name\": \"$t\"" <<<"$targets"; then
    echo "rdmakit built '$t' as a subproject: tests, benchmarks, tools and examples must stay off" >&2
    exit 1
  fi
done
echo "consumer build OK"
