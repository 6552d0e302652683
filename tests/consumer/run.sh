#!/usr/bin/env bash
# Consumer tests: tests/consumer/project (main.cpp on the mock HCA) built from scratch as
# a downstream project would build it, in <work> (under the build folder; wiped first).
#   run.sh subproject <work>  Meson, rdmakit through packaging/rdmakit.wrap: the program
#                             runs, rdmakit builds none of its own targets, and nothing
#                             warns, with libibverbs and with -Drdmakit:ibverbs=disabled
#   run.sh install <work>     header-only `meson install` to <work>/prefix (nothing is
#                             compiled), then the Meson project via pkg-config, and
#                             `c++ ... $(pkg-config --cflags --libs rdmakit-mock)`
#   run.sh cmake <work>       the same install, then find_package(rdmakit CONFIG) and
#                             rdmakit::mock; COMPONENTS ibverbs fails cleanly without libibverbs;
#                             the benchmark below with rdmakit::bench, run briefly
#   run.sh benchmark <work>   the ten-line Google Benchmark program of the README
#                             (tests/consumer/bench-project: rdmakit-bench, a policy grid)
#                             with rdmakit through the wrap, run briefly
# Environment (set by tests/consumer/meson.build): RDMAKIT_CXX, the build's compiler
# command (may start with ccache); RDMAKIT_VERSION, meson.project_version();
# RDMAKIT_HAVE_IBVERBS, true when the build has the ibverbs backend; RDMAKIT_HAVE_RDMACM,
# its rdmacm backend (librdmacm) too.
set -euo pipefail
mode=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
project=$root/tests/consumer/project
read -r -a cxx <<<"${RDMAKIT_CXX:-c++}"
version=${RDMAKIT_VERSION:?}
have_ibverbs=${RDMAKIT_HAVE_IBVERBS:-false}
have_rdmacm=${RDMAKIT_HAVE_RDMACM:-false}
# The nested rdmakit builds follow this build: the ibverbs backend where it has one.
ibverbs_opt=auto
[ "$have_ibverbs" = true ] || ibverbs_opt=disabled
rm -rf "$work"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
# step <log name> <command...>: runs the command into <log name>.log; shows it on failure.
step() {
  local log=$1
  shift
  if ! "$@" >"$log.log" 2>&1; then
    tail -n 80 "$log.log"
    fail "$* (log: $work/$log.log)"
  fi
}
no_warnings() {
  if grep -n -E "WARNING|CMake Warning|warning:" "$1"; then fail "$1 has warnings (above)"; fi
}
# The program's own check, plus the version and whether the ibverbs ($2) and rdmacm ($3,
# default: the build's) parts were built.
check_run() {
  local out
  out=$("$1") || { printf '%s\n' "$out"; fail "$1 failed"; }
  printf '%s\n' "$out"
  grep -q "^rdmakit $version, mock0: SEND/RECV ok, RDMA WRITE ok$" <<<"$out" || fail "$1: unexpected output"
  if [ "$2" = true ]; then
    grep -q "^ibverbs backend: built" <<<"$out" || fail "$1: the ibverbs backend was not found"
  else
    grep -q "^ibverbs backend: not built" <<<"$out" || fail "$1: the ibverbs backend was built"
  fi
  if [ "${3:-$have_rdmacm}" = true ]; then
    grep -q "^rdmacm backend: built" <<<"$out" || fail "$1: the rdmacm backend was not found"
  else
    grep -q "^rdmacm backend: not built" <<<"$out" || fail "$1: the rdmacm backend was built"
  fi
}
# The ten-line benchmark (tests/consumer/bench-project/bench.cpp), run briefly: the whole
# grid (2 transports × 2 signaling × 2 polling policies × 2 sizes), named from the
# policies, and no run stopped with an error.
check_bench() {
  step bench "$1" --benchmark_min_time=0.01
  cat bench.log
  if grep -q "ERROR OCCURRED" bench.log; then fail "a benchmark stopped with an error (above)"; fi
  for n in "write/RC/signal_all/busy_poll<16>/64/real_time" "write/UC/signal_every<16>/adaptive<1024,16,16>/4096/real_time"; do
    grep -q -F "$n " bench.log || fail "benchmark $n did not run"
  done
  [ "$(grep -c "^write/" bench.log)" = 16 ] || fail "the grid did not run 16 benchmarks (bench.log)"
}
# A header-only install to $work/prefix: with examples, tests, benchmarks, tools and docs
# off there is nothing to compile. Checks what is installed; sets pcdir.
install_rdmakit() {
  step rdmakit-setup meson setup rdmakit-build "$root" --prefix="$work/prefix" \
    -Dexamples=disabled -Dtests=disabled -Dbenchmarks=disabled -Dtools=disabled -Ddocs=disabled \
    -Dibverbs=$ibverbs_opt
  [ "$(meson introspect --targets rdmakit-build)" = "[]" ] ||
    fail "a header-only configuration still has build targets: $(meson introspect --targets rdmakit-build)"
  step rdmakit-install meson install -C rdmakit-build
  grep -q "ninja: no work to do" rdmakit-install.log || fail "meson install compiled something (rdmakit-install.log)"
  local pc
  pc=$(find prefix -name rdmakit.pc)
  [ -n "$pc" ] || fail "no rdmakit.pc installed"
  pcdir=$work/$(dirname "$pc")
  local expect=(include/rdmakit/rdmakit.hpp include/rdmakit/config.hpp include/rdmakit/backends/mock.hpp
                include/rdmakit/benchmark.hpp share/doc/rdmakit/LICENSE)
  for f in rdmakit.pc rdmakit-mock.pc rdmakit-bench.pc; do expect+=("${pcdir#"$work/prefix/"}/$f"); done
  local cmakedir=${pcdir%/pkgconfig}/cmake/rdmakit
  for f in rdmakitConfig.cmake rdmakitConfigVersion.cmake; do expect+=("${cmakedir#"$work/prefix/"}/$f"); done
  for f in "${expect[@]}"; do [ -f "prefix/$f" ] || fail "not installed: $f"; done
  local ibv_files=(include/rdmakit/backends/ibverbs.hpp "${pcdir#"$work/prefix/"}/rdmakit-ibverbs.pc")
  for f in "${ibv_files[@]}"; do
    if [ "$have_ibverbs" = true ]; then [ -f "prefix/$f" ] || fail "not installed: $f"
    else [ ! -e "prefix/$f" ] || fail "installed without libibverbs: $f"; fi
  done
  local cm_pc=${pcdir#"$work/prefix/"}/rdmakit-rdmacm.pc
  if [ "$have_rdmacm" = true ]; then [ -f "prefix/$cm_pc" ] || fail "not installed: $cm_pc"
  else [ ! -e "prefix/$cm_pc" ] || fail "installed without librdmacm: $cm_pc"; fi
  [ ! -e prefix/bin ] || fail "a header-only install put programs in bin/: $(ls prefix/bin)"
  if grep -n -e "-std" "$pcdir"/*.pc; then fail "a .pc file sets the C++ standard (above)"; fi
}

# A copy of consumer project $1 whose subprojects/ holds the wrap as shipped, next to
# the rdmakit sources. An rdmakit installed on this machine would be taken first (as it
# should): `fallback` forces the wrap then.
with_wrap() {
  cp -r "$1" consumer
  mkdir consumer/subprojects
  cp "$root/packaging/rdmakit.wrap" consumer/subprojects/
  ln -s "$root" consumer/subprojects/rdmakit
  fallback=()
  if pkg-config --exists rdmakit-mock; then
    fallback=(--force-fallback-for=rdmakit,rdmakit-mock,rdmakit-ibverbs,rdmakit-rdmacm,rdmakit-bench)
  fi
  export CXX="${cxx[*]}"
}

case $mode in
subproject)
  with_wrap "$project"
  step setup meson setup build consumer "${fallback[@]}" -Drdmakit:ibverbs=$ibverbs_opt
  no_warnings setup.log
  grep -q "Executing subproject rdmakit" setup.log || fail "rdmakit did not come from the wrap (setup.log)"
  step build ninja -C build
  check_run build/consumer "$have_ibverbs"
  targets=$(meson introspect --targets build)
  for t in test_core_types test_version test_benchmark conformance_mock policy_grid rdmakit-pingpong rdmakit-perf walkthrough; do
    if grep -q "\"name\": \"$t\"" <<<"$targets"; then
      fail "rdmakit built '$t' as a subproject: tests, benchmarks, tools and examples must stay off"
    fi
  done
  # Without the ibverbs backend, dependency('rdmakit-ibverbs', required: false) is a quiet not-found.
  step setup-no-ibverbs meson setup --reconfigure build consumer "${fallback[@]}" -Drdmakit:ibverbs=disabled
  no_warnings setup-no-ibverbs.log
  grep -q "Dependency rdmakit-ibverbs found: NO (overridden)" setup-no-ibverbs.log ||
    fail "rdmakit-ibverbs was not a not-found dependency with -Drdmakit:ibverbs=disabled (setup-no-ibverbs.log)"
  grep -q "Dependency rdmakit-rdmacm found: NO (overridden)" setup-no-ibverbs.log ||
    fail "rdmakit-rdmacm was not a not-found dependency with -Drdmakit:ibverbs=disabled (setup-no-ibverbs.log)"
  ;;
install)
  install_rdmakit
  export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  [ "$(pkg-config --modversion rdmakit-mock)" = "$version" ] || fail "rdmakit-mock.pc is not version $version"
  # Meson: the same project, no subprojects/ folder: the installed .pc files.
  cp -r "$project" consumer
  export CXX="${cxx[*]}"
  step setup meson setup build consumer
  no_warnings setup.log
  grep -q "Run-time dependency rdmakit-mock found: YES $version" setup.log || fail "rdmakit-mock.pc not used (setup.log)"
  step build ninja -C build
  check_run build/consumer "$have_ibverbs"
  # Plain pkg-config, as a Makefile would do it: the standard comes from the user.
  read -r -a flags <<<"$(pkg-config --cflags --libs rdmakit-mock)"
  step plain "${cxx[@]}" -std=c++20 consumer/main.cpp -o plain-consumer "${flags[@]}"
  check_run ./plain-consumer false false
  if [ "$have_ibverbs" = true ]; then
    pkg-config --libs rdmakit-ibverbs | grep -q -e "-libverbs" || fail "rdmakit-ibverbs.pc does not link libibverbs"
  fi
  if [ "$have_rdmacm" = true ]; then
    pkg-config --libs rdmakit-rdmacm | grep -q -e "-lrdmacm" || fail "rdmakit-rdmacm.pc does not link librdmacm"
  fi
  if pkg-config --exists benchmark; then
    pkg-config --libs rdmakit-bench | grep -q -e "-lbenchmark" || fail "rdmakit-bench.pc does not link Google Benchmark"
  fi
  ;;
cmake)
  command -v cmake >/dev/null || { echo "cmake not found (scripts/setup.sh installs it): skipped"; exit 77; }
  install_rdmakit
  launcher=()
  if [ "${cxx[0]}" = ccache ] && [ ${#cxx[@]} -gt 1 ]; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cxx=("${cxx[@]:1}")
  fi
  step configure cmake -S "$project" -B build -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCMAKE_CXX_COMPILER="${cxx[0]}" "${launcher[@]}"
  no_warnings configure.log
  step build cmake --build build
  check_run build/consumer "$have_ibverbs"
  # Where libibverbs cannot be found (no pkg-config file, nothing under the find root):
  # find_package(rdmakit COMPONENTS ibverbs) fails with the reason, not at compile time.
  mkdir empty
  if PKG_CONFIG_LIBDIR=$work/empty PKG_CONFIG_PATH= cmake -S "$root/tests/consumer/cmake-ibverbs" -B build-no-ibverbs \
      -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_COMPILER="${cxx[0]}" \
      -DCMAKE_FIND_ROOT_PATH="$work/empty" -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
      -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH >no-ibverbs.log 2>&1; then
    cat no-ibverbs.log
    fail "find_package(rdmakit REQUIRED COMPONENTS ibverbs) succeeded without libibverbs"
  fi
  want="component ibverbs (rdmakit::ibverbs): "
  [ "$have_ibverbs" = true ] && want+="libibverbs not found" || want+="this rdmakit was installed without its ibverbs backend"
  grep -q "not found, as expected" no-ibverbs.log && grep -q -F "$want" no-ibverbs.log || {
    cat no-ibverbs.log
    fail "find_package(rdmakit COMPONENTS ibverbs) did not fail with: $want"
  }
  sed -n '/Reason given by package/,/^$/p' no-ibverbs.log
  # rdmakit::bench: the README's ten-line benchmark (Google Benchmark found by CMake).
  # Configured, not built: generating fails when rdmakit::bench is not a target (an
  # `a::b` name must be one), and the benchmark case builds and runs this same program.
  if pkg-config --exists benchmark; then
    step configure-bench cmake -S "$root/tests/consumer/bench-project" -B build-bench -G Ninja \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_COMPILER="${cxx[0]}" "${launcher[@]}"
    no_warnings configure-bench.log
    grep -q "benchmark" build-bench/build.ninja || fail "rdmakit::bench did not bring Google Benchmark (build-bench/build.ninja)"
  fi
  ;;
benchmark)
  # Google Benchmark (the system's, Debian: libbenchmark-dev) and rdmakit through the wrap.
  pkg-config --exists benchmark || { echo "Google Benchmark not found (scripts/setup.sh installs it): skipped"; exit 77; }
  with_wrap "$root/tests/consumer/bench-project"
  # At -O0 (its own default is release): what this checks, the wrap, rdmakit-bench and
  # the program's run, is the same at any level; release doubles this test's time.
  step setup meson setup build consumer "${fallback[@]}" --buildtype=debug
  no_warnings setup.log
  grep -q "Executing subproject rdmakit" setup.log && grep -q "Dependency rdmakit-bench found: YES .* (overridden)" setup.log ||
    fail "rdmakit-bench did not come from the wrap (setup.log)"
  step build ninja -C build
  check_bench build/bench
  # The README shows this program as it is: its "Benchmarking your own loop" code block.
  awk '/^## Benchmarking your own loop/ { s = 1 } s && /^```cpp/ { c = 1; next } c && /^```/ { exit } c' \
    "$root/README.md" >readme-bench.cpp
  diff readme-bench.cpp "$root/tests/consumer/bench-project/bench.cpp" ||
    fail "README.md's benchmark differs from tests/consumer/bench-project/bench.cpp (above)"
  ;;
*)
  fail "unknown mode $mode (subproject, install, cmake, benchmark)"
  ;;
esac
echo "consumer $mode: OK"
