#!/bin/bash
# The GPU front end's test many times while other GPU processes run beside
# it (on a busy GPU the work of several contexts interleaves: ordering bugs
# between streams show up there and rarely alone).
#
#   tools/gpu-concurrency-check.sh [RUNS]      (default 120)
#
# Builds in $BUILD (default /tmp/ssae-gpu-build; on an air-gapped GPU host
# with the .debs of tools/gpu-host-deps.sh in .deps/debs), then runs
# test_cuda_frontend RUNS times while test_engine_devfe (cuda, cuda-fail)
# and test_cuda_frontend --fallback loop beside it. Prints each failure's
# last lines and the count; exits 1 when any run failed.
set -u
runs=${1:-120}
BUILD=${BUILD:-/tmp/ssae-gpu-build}
export PATH=/usr/local/cuda/bin:$PATH
if [ -d .deps/debs ]; then eval "$(tools/gpu-host-deps.sh env .deps)" || exit 1; fi
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dbuildtype=release -Dwerror=false -Dlv2=disabled > /dev/null || exit 1
fi
ninja -C "$BUILD" tests/gpu/test_cuda_frontend tests/engine/test_engine_devfe > /dev/null || exit 1
t="$BUILD/tests"
stop=$(mktemp -u)
( while [ ! -e "$stop" ]; do
    "$t/engine/test_engine_devfe" cuda > /dev/null 2>&1
    "$t/engine/test_engine_devfe" cuda-fail > /dev/null 2>&1
  done ) &
( while [ ! -e "$stop" ]; do "$t/gpu/test_cuda_frontend" --fallback > /dev/null 2>&1; done ) &
fails=0
log=$(mktemp)
for i in $(seq 1 "$runs"); do
  "$t/gpu/test_cuda_frontend" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then echo "skip: no CUDA device"; touch "$stop"; wait; exit 77; fi
  if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    echo "run $i failed:"
    grep FAIL "$log" | head -3
  fi
done
touch "$stop"
wait
rm -f "$stop" "$log"
echo "test_cuda_frontend: $fails failures in $runs runs beside two other GPU test loops"
[ "$fails" -eq 0 ]
