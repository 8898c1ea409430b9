#!/bin/bash
# Builds ssae on an air-gapped GPU host and runs the GPU checks and
# benchmarks in one go (one call of a rented machine).
#
#   tools/gpu-device-check.sh [STEP...]    steps: build test variants ncu bench
#                                          torch sanitize (default: all)
#
# Needs the dependency .debs in .deps/debs (tools/gpu-host-deps.sh fetch, on
# a networked machine). Logs go to $OUT (default /tmp/ssae-gpu-out); the
# build to $BUILD (default /tmp/ssae-gpu-build). If the tree does not
# configure, a snapshot in .gpuwork/src (same layout) is tried.
set -u
OUT=${OUT:-/tmp/ssae-gpu-out}
BUILD=${BUILD:-/tmp/ssae-gpu-build}
mkdir -p "$OUT"
steps=${*:-build test variants ncu bench torch sanitize}
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
  for k in generic small tiled32 tiled64 tiled128 tiled128w; do
    log "kernel $k"
    SSAE_CUDA_KERNEL=$k timeout 120 "$BUILD/ssae" bench --model "$model" --backend cuda \
      --seconds 0.05 --batches 1,32,256,4096,65536,1048576 2>&1 | sed -n '/kernel alone/,$p'
  done
fi

if has ncu; then
  for k in tiled128 tiled128w; do
    log "ncu: $k at 65536 windows"
    SSAE_CUDA_KERNEL=$k timeout 120 ncu --launch-skip 2 --launch-count 1 -k regex:tiled \
      --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats \
      --section SchedulerStats --metrics smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall \
      "$BUILD/ssae" bench --model "$model" --backend cuda --batches 65536 --seconds 0.01 \
      > "$OUT/ncu_$k.txt" 2>&1
    echo "rc=$?"
    grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Executed Ipc A|Warp Cycles Per Issued|Registers Per|pcsamp|Executed Instructions  " "$OUT/ncu_$k.txt" | head -24
  done
  log "ncu: generic at 1 window"
  SSAE_CUDA_KERNEL=generic timeout 60 ncu --launch-skip 5 --launch-count 1 -k regex:generic \
    --section SpeedOfLight --section WarpStateStats \
    "$BUILD/ssae" bench --model "$model" --backend cuda --batches 1 --seconds 0.01 \
    > "$OUT/ncu_generic1.txt" 2>&1
  grep -E "Duration|SM Frequency|Warp Cycles Per Issued" "$OUT/ncu_generic1.txt" | head
fi

if has torch; then
  log "bench_torch"
  timeout 400 python3 "$src/tools/bench_torch.py" "$model" --seconds 0.5 2>&1 |
    tee "$OUT/bench_torch.log" | grep -v Warning
fi
log "done"
