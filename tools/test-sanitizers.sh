#!/bin/sh
# The test suites under the sanitizers, reproducibly:
#
#   tools/test-sanitizers.sh [asan] [tsan]      (default: both)
#
# asan: build-asan/ with -Db_sanitize=address,undefined, every test.
# tsan: build-tsan/ with -Db_sanitize=thread, the suites whose code runs on
#       several threads: core (the fork-join pool the CPU backend, the
#       gradients and the GPU scorer's decoders share), engine (ring stress,
#       engine, monitor, JACK), lv2 (the plugin's engine inside a host,
#       jalv included) and threads (the CPU gradients on ssae's threads and
#       on a lent team).
#
# Both build with -Db_lundef=false (the sanitizer runtimes are linked into
# the programs, not into the plugin and libraries) and without CUDA (the
# sanitizers do not see into the driver). A configured directory is reused;
# JOBS (default: every core) sets the build's parallelism; extra meson test
# arguments go in MESON_TEST_ARGS (e.g. "--num-processes 1" on a small
# machine); ASAN_BUILD and TSAN_BUILD rename the build directories. Exits
# non-zero when a build or a test fails; the logs are in
# DIR/meson-logs/testlog.txt.
set -eu
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
abuild=${ASAN_BUILD:-build-asan}
tbuild=${TSAN_BUILD:-build-tsan}
which=${*:-asan tsan}
rc=0

setup() { # DIR SANITIZERS
  if [ ! -f "$1/build.ninja" ]; then
    meson setup "$1" -Db_sanitize="$2" -Db_lundef=false \
      -Dbuildtype=debugoptimized -Dcuda=disabled >"$1.setup.log" 2>&1 ||
      { tail -20 "$1.setup.log"; return 1; }
    rm -f "$1.setup.log"
  fi
  ninja -C "$1" -j"$jobs"
}

for w in $which; do
  case $w in
  asan)
    echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test ($abuild)"
    setup "$abuild" address,undefined || { rc=1; continue; }
    # shellcheck disable=SC2086
    meson test -C "$abuild" --print-errorlogs ${MESON_TEST_ARGS:-} || rc=1
    ;;
  tsan)
    echo "== ThreadSanitizer: core, engine, lv2 and threads suites ($tbuild)"
    setup "$tbuild" thread || { rc=1; continue; }
    # halt_on_error: the first race fails the test with its report (the
    # default exit code 66 at the end would too, later). Address space
    # randomisation off: some kernels place mappings where TSan's shadow
    # memory cannot live ("unexpected memory mapping").
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
    export TSAN_OPTIONS
    run=""
    if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
      run="setarch $(uname -m) -R"
    fi
    # shellcheck disable=SC2086
    $run meson test -C "$tbuild" --print-errorlogs --suite core --suite engine --suite lv2 \
      --suite threads ${MESON_TEST_ARGS:-} || rc=1
    ;;
  *)
    echo "usage: tools/test-sanitizers.sh [asan] [tsan]" >&2
    exit 2
    ;;
  esac
done
exit $rc
