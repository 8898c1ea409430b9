#!/bin/bash
# Builds ssae on an air-gapped GPU host and runs the GPU checks and
# benchmarks in one go (one call of a rented machine).
#
#   tools/gpu-device-check.sh [STEP...]    steps: build test sanitize bench
#                                          variants torch (default: all)
#
# Needs the dependency .debs in .deps/debs (tools/gpu-host-deps.sh fetch, on
# a networked machine). Logs go to $OUT (default /tmp/ssae-gpu-out); the
# build to $BUILD (default /tmp/ssae-gpu-build). If the tree does not
# configure, a snapshot in .gpuwork/src (same layout) is tried.
set -u
OUT=${OUT:-/tmp/ssae-gpu-out}
BUILD=${BUILD:-/tmp/ssae-gpu-build}
mkdir -p "$OUT"
steps=${*:-build test sanitize bench variants torch}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
log() { echo "=== $(date -u +%T) $*"; }
export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
eval "$(tools/gpu-host-deps.sh env .deps)" || exit 1
src=$(pwd)
model=$src/src/model/default.safetensors

if has build; then
  log "device"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv
  nvcc --version | tail -1
  log "configure"
  if ! meson setup "$BUILD" -Dbuildtype=release -Dgpu_sm=90 -Dwerror=false -Dlv2=disabled \
      > "$OUT/configure.log" 2>&1; then
    tail -5 "$OUT/configure.log"
    log "the tree does not configure; trying .gpuwork/src"
    rm -rf "$BUILD"
    src=$(pwd)/.gpuwork/src
    (cd "$src" && meson setup "$BUILD" -Dbuildtype=release -Dgpu_sm=90 -Dwerror=false \
      -Dlv2=disabled > "$OUT/configure.log" 2>&1) || { tail -20 "$OUT/configure.log"; exit 1; }
  fi
  grep -E "CUDA backend|torch" "$OUT/configure.log"
  log "build"
  ninja -C "$BUILD" -j16 ssae tests/gpu/test_cuda_forward > "$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
  log "built"
fi
T=$BUILD/tests/gpu/test_cuda_forward
export SSAE_BUILD_ROOT=$BUILD

if has test; then
  log "test: kernels vs float64 and the CPU"
  timeout 300 "$T" 2>&1 | tee "$OUT/test_forward.log" | grep -vE "^(auto|generic|tiled)" ; echo "rc=${PIPESTATUS[0]}"
  grep -E "n=1048576|n=1 |n=4097" "$OUT/test_forward.log" | head -40
  log "test: fallback"
  timeout 120 "$T" --fallback 2>&1 | tail -12
  log "test: PyTorch float64"
  timeout 300 python3 "$src/tests/gpu/test_cuda_torch.py" 2>&1 | tail -20
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer $tool"
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$T" --tiny \
      > "$OUT/sanitize_$tool.log" 2>&1
    echo "rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|Hazard|all passed|failures" \
      "$OUT/sanitize_$tool.log" | sort | uniq -c | head -10
  done
fi

if has bench; then
  log "ssae bench"
  timeout 300 "$BUILD/ssae" bench --model "$model" --seconds 0.5 2>&1 | tee "$OUT/bench.log"
fi

if has variants; then
  for k in generic tiled32 tiled64 tiled128; do
    log "kernel $k"
    SSAE_CUDA_KERNEL=$k timeout 120 "$BUILD/ssae" bench --model "$model" --backend cuda \
      --seconds 0.05 --batches 1,32,256,4096,65536,1048576 2>&1 | sed -n '/kernel alone/,$p'
  done
fi

if has torch; then
  log "bench_torch"
  timeout 400 python3 "$src/tools/bench_torch.py" "$model" --seconds 0.5 2>&1 |
    tee "$OUT/bench_torch.log" | grep -v Warning
fi
log "done"
