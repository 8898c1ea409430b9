#!/bin/bash
# Builds ssae on an air-gapped GPU host and runs the GPU checks and
# benchmarks in one go (one call of a rented machine).
#
#   tools/gpu-device-check.sh [STEP...]    steps: build quick test variants ncu
#                                          bench torch sanitize (default: all but
#                                          quick)
# The kernels are the table in the binary (test_cuda_forward --list):
# `variants` benchmarks each of them forced (latency kernels at small
# batches, the others at 4096, 65536 and 1048576 windows).
# Environment: KERNELS (variants; default: every kernel of the table),
# BATCHES (variants), NCU_KERNELS (ncu at 65536 windows), NCU1_KERNELS (ncu
# kernel duration at 1 window), SSAE_TEST_KERNELS (kernels the tests force),
# TORCH_TIMEOUT (seconds for the PyTorch float64 test).
#
# Needs the dependency .debs in .deps/debs (tools/gpu-host-deps.sh fetch, on
# a networked machine). Logs go to $OUT (default /tmp/ssae-gpu-out); the
# build to $BUILD (default /tmp/ssae-gpu-build). If the tree does not
# configure, a snapshot in .gpuwork/src (same layout) is tried.
set -u
OUT=${OUT:-/tmp/ssae-gpu-out}
BUILD=${BUILD:-/tmp/ssae-gpu-build}
steps=${*:-build test variants ncu bench torch sanitize}
. tools/gpu-check-common.sh
model=$src/src/model/default.safetensors

if has build; then
  log "device"
  device_info
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
  ninja -C "$BUILD" -j16 ssae tests/gpu/test_cuda_forward tools/ssae-gen > "$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
  log "built"
fi
T=$BUILD/tests/gpu/test_cuda_forward
export SSAE_BUILD_ROOT=$BUILD
# name, auto's largest batch ("any"), opt-in|auto, purpose; tab-separated
table=$("$T" --list 2>/dev/null)

if has quick; then
  log "test --quick: every kernel up to 4097 windows"
  timeout 200 "$T" --quick > "$OUT/test_quick.log" 2>&1; echo "rc=$?"
  grep -E "FAIL|failures|all passed" "$OUT/test_quick.log" | head -20
  grep -E "^(auto|batch1_cluster|warp_fp32|warp_3xtf32)/" "$OUT/test_quick.log" |
    grep -E "F=(5|7) .*n=(1|33|4097) " | cut -c1-160 | head -30
fi

if has test; then
  log "test: kernels vs float64 and the CPU"
  timeout 300 "$T" 2>&1 | tee "$OUT/test_forward.log" | grep -vE "^[a-z0-9_]+/[a-z0-9_]+ +M=" ; echo "rc=${PIPESTATUS[0]}"
  echo "worst per forced kernel over all dims and sizes: relL2 worst-window score-rel (f64), relL2 score-rel (cpu)"
  awk '/^[a-z0-9_]+\/[a-z0-9_]+ +M=/ { split($1, k, "/"); for (i = 7; i <= 11; i++) { split($i, v, "=");
       if (v[2] + 0 > w[k[1], i]) w[k[1], i] = v[2] + 0 }; seen[k[1]] = 1; rows[k[1]]++ }
       END { for (n in seen) { printf "%-16s %4d rows", n, rows[n];
             for (i = 7; i <= 11; i++) printf " %.2e", w[n, i]; printf "\n" } }' \
    "$OUT/test_forward.log" | sort
  grep -E "n=1048576" "$OUT/test_forward.log" | cut -c1-110 | head -12
  log "test: fallback"
  timeout 120 "$T" --fallback 2>&1 | tail -12
  log "test: PyTorch float64"
  timeout "${TORCH_TIMEOUT:-300}" python3 "$src/tests/gpu/test_cuda_torch.py" 2>&1 | tail -20
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer $tool"
    # --tiny: every kernel's small batches; --last-round: one full round of
    # the per-warp kernels plus a few tiles (the warps-per-tile last round;
    # only they have one: every row of the table at that size takes the
    # sanitizer past any time limit).
    for sz in --tiny --last-round; do
      k=${SSAE_TEST_KERNELS:-}
      [ "$sz" = --last-round ] && k=${SSAE_TEST_KERNELS:-warp_fp32,warp_3xtf32}
      SSAE_TEST_KERNELS=$k timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$T" $sz \
        > "$OUT/sanitize_$tool$sz.log" 2>&1
      echo "$sz rc=$?"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|Hazard|all passed|failures" \
        "$OUT/sanitize_$tool$sz.log" | sort | uniq -c | head -10
    done
  done
fi

if has bench; then
  log "ssae bench"
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 \
    > "$OUT/clocks.log" 2>&1 &
  smi=$!
  timeout 300 "$BUILD/ssae" bench --model "$model" --seconds 0.5 2>&1 | tee "$OUT/bench.log"
  kill $smi
  echo "SM clock samples during the bench (MHz: count, at > 300 W):" \
    "$(awk -F', ' '$2 > 300 {print $1}' "$OUT/clocks.log" | sort -n | uniq -c | tr '\n' ' ')"
fi

if has variants; then
  [ -n "${KERNELS:-}$table" ] || { echo "no kernel table: $T --list failed"; exit 1; }
  for k in ${KERNELS:-$(echo "$table" | cut -f1)}; do
    log "kernel $k"
    # latency kernels (auto gives them small batches only) and generic at
    # small batches, the others at large ones
    amax=$(echo "$table" | awk -F'\t' -v k="$k" '$1 == k { print $2 }')
    case $k:$amax in generic:*|*:[0-9]*) b=1,8,32,256,4096 ;; *) b=4096,65536,1048576 ;; esac
    SSAE_CUDA_KERNEL=$k timeout 120 "$BUILD/ssae" bench --model "$model" --backend cuda \
      --seconds 0.05 --batches "${BATCHES:-$b}" 2>&1 | sed -n '/kernel alone/,$p' | grep -v '^#'
  done
fi

if has ncu; then
  # The CUDA function of kernel NAME is ssae_NAME_kernel (the tiled
  # widths share ssae_tiled_kernel): the regex is ssae_ and the name up to
  # its first digit (a forced kernel is the only forward kernel launched).
  for k in ${NCU_KERNELS-warp_fp32 tiled128}; do
    log "ncu: $k at 65536 windows"
    SSAE_CUDA_KERNEL=$k timeout 120 ncu --launch-skip 2 --launch-count 1 -k regex:"ssae_${k%%[0-9]*}" \
      --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats \
      --section SchedulerStats --metrics smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall \
      "$BUILD/ssae" bench --model "$model" --backend cuda --batches 65536 --seconds 0.01 \
      > "$OUT/ncu_$k.txt" 2>&1
    echo "rc=$?"
    grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Executed Ipc A|Warp Cycles Per Issued|Registers Per|pcsamp|ffma|Executed Instructions  " "$OUT/ncu_$k.txt" | sed 's/smsp__pcsamp_warps_issue_//' | head -24
  done
  # Kernel duration at batch 1 as the chip runs it (no clock locking, no
  # cache flush between kernels); NCU_CLOCKS="" gives ncu's default (base
  # clock, caches flushed) instead.
  for k in ${NCU1_KERNELS-batch1_cluster small_batch}; do
    log "ncu: $k at 1 window (kernel duration)"
    for cc in "${NCU_CLOCKS---clock-control none --cache-control none}"; do
      SSAE_CUDA_KERNEL=$k timeout 60 ncu $cc --launch-skip 5 --launch-count 5 -k regex:"ssae_${k%%[0-9]*}" \
        --metrics gpu__time_duration.sum,smsp__cycles_elapsed.avg.per_second \
        "$BUILD/ssae" bench --model "$model" --backend cuda --batches 1 --seconds 0.01 \
        > "$OUT/ncu_${k}1.txt" 2>&1
      echo "${cc:-default}: $(grep -E "gpu__time_duration" "$OUT/ncu_${k}1.txt" | awk '{print $NF, $(NF-1)}' | tr '\n' ' ');" \
        "clock $(grep -E "cycles_elapsed" "$OUT/ncu_${k}1.txt" | awk '{print $(NF-1), $NF}' | head -1)"
    done
  done
fi

if has torch; then
  log "bench_torch"
  timeout 400 python3 "$src/tools/bench/bench_torch.py" "$model" --seconds 0.5 2>&1 |
    tee "$OUT/bench_torch.log" | grep -v Warning
fi
log "done"
