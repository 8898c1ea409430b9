#!/bin/bash
# CUDA training on an air-gapped GPU host, in one call of a rented
# machine: build, the CUDA training tests, compute-sanitizer on small runs,
# the training benchmark against PyTorch on the same GPU.
#
#   tools/gpu-train-check.sh [STEP...]     steps: build test bench tune
#                                          sanitize (default: all)
#
# bench: CLIPS generated clips (default 40), EPOCHS (20); also the recordings
# in DATA when set.
#
# Needs the dependency .debs in .deps/debs (tools/gpu-host-deps.sh fetch).
# Logs go to $OUT (default /tmp/ssae-train-out), the build to $BUILD
# (default /tmp/ssae-train-build). Uses the python3 on PATH (the one with
# torch on the GPU host).
set -u
OUT=${OUT:-/tmp/ssae-train-out}
BUILD=${BUILD:-/tmp/ssae-train-build}
steps=${*:-build test bench tune sanitize}
. tools/gpu-check-common.sh
PROBE=$BUILD/tests/train/train_probe

if has build; then
  log "device"
  device_info
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
  log "configure"
  meson setup "$BUILD" -Dbuildtype=release -Dgpu_sm=90 -Dwerror=false -Dlv2=disabled \
    > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
  grep -E "CUDA backend" "$OUT/configure.log"
  log "build"
  ninja -C "$BUILD" -j16 ssae tests/train/train_probe > "$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
  log "built"
fi
export SSAE=$BUILD/ssae SSAE_BUILD_ROOT=$BUILD PYTHONPATH=$src/tools

if has test; then
  log "test_cuda_train.py"
  timeout 400 python3 "$src/tests/train/test_cuda_train.py" "$PROBE" 2>&1 | tee "$OUT/test_cuda_train.log"
  echo "rc=${PIPESTATUS[0]}"
  log "test_train_cli.py (auto picks the GPU: early stop, Ctrl-C, --backend cuda)"
  timeout 200 python3 "$src/tests/train/test_train_cli.py" 2>&1 | tee "$OUT/test_train_cli.log" | tail -8
  echo "rc=${PIPESTATUS[0]}"
fi

if has bench; then
  log "bench_train.py --device cuda (generated clips)"
  timeout 300 python3 "$src/tools/bench/bench_train.py" --device cuda --ssae "$BUILD/ssae" \
    --clips "${CLIPS:-40}" --epochs "${EPOCHS:-20}" --repeat 3 --threads 16 2>&1 |
    grep -v Warning | tee "$OUT/bench_train_cuda.log"
  if [ -n "${DATA:-}" ] && [ -d "$DATA" ]; then
    log "bench_train.py --device cuda $DATA"
    timeout 300 python3 "$src/tools/bench/bench_train.py" --device cuda --ssae "$BUILD/ssae" \
      --epochs "${EPOCHS:-20}" --repeat 3 --threads 16 "$DATA" 2>&1 |
      grep -v Warning | tee "$OUT/bench_train_cuda_data.log"
  fi
fi

if has tune; then
  # windows per block group: the training loop's own rate (log line) for
  # each, 21 epochs of generated data, batch 512
  d=$(mktemp -d)
  python3 -c "
import sys; sys.path.insert(0, '$src/tests/train')
import numpy as np
from gen_audio import normal, write_wav
r = np.random.default_rng(0)
for i in range(40): write_wav('$d/n%02d.wav' % i, normal(r, 10.0))"
  for wb in 1 2 4 8; do
    printf "WB %s: " $wb
    SSAE_CUDA_TRAIN_WB=$wb "$BUILD/ssae" train -o "$d/m.safetensors" --val 0 --epochs 21 \
      --backend cuda "$d" 2>&1 | grep "^epoch 21/"
  done
fi

if has sanitize; then
  d=$(mktemp -d)
  "$PROBE" init 64 5 32 64 "$d/p"
  python3 -c "
import numpy as np
r = np.random.default_rng(1)
x = (-60 + 8 * r.normal(size=(300, 1, 1)) + 6 * r.normal(size=(300, 5, 64))).astype(np.float32)
x.tofile('$d/x')"
  python3 -c "import numpy as np; np.fromfile('$d/x', np.float32)[:40 * 320].tofile('$d/x40')"
  # the whole loop (epochs, validation, early stop) under memcheck and
  # initcheck; the kernels' shared memory under racecheck on a small batch
  for tool in memcheck initcheck racecheck; do
    log "compute-sanitizer $tool"
    if [ $tool != racecheck ]; then
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$PROBE" train cuda 64 5 32 \
        64 2 64 1 2 "$d/p" "$d/x" "$d/o" > "$OUT/sanitize_$tool.log" 2>&1
      echo "train: rc=$?"
    fi
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$PROBE" be_grad cuda 64 5 32 \
      64 1 "$d/p" "$d/x40" "$d/g" >> "$OUT/sanitize_$tool.log" 2>&1
    echo "be_grad: rc=$?"
    # the drop-in module's backward kernel in its other modes (an upstream
    # gradient with and without the input's, the fused loss) on 37 windows
    # (three groups, the last short), when torch sees the GPU; not under
    # initcheck, which checks only the kernels it is told to and then takes
    # what torch's own kernels wrote (the input, the loss's gradient) for
    # uninitialised memory
    if [ $tool != initcheck ] &&
      python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
      PYTHONPATH=$BUILD/python:$src/tools timeout 240 compute-sanitizer --tool $tool \
        --error-exitcode 9 --kernel-name kns=k_vjp_tc python3 -c "
import torch, ssae.torch as st
torch.manual_seed(0)
m = st.SpectralShapeAutoencoder().cuda()
x = torch.randn(37, 320, device='cuda') * 12 - 40
xg = x.clone().requires_grad_()
torch.nn.functional.mse_loss(m(xg), x).backward()
torch.nn.functional.mse_loss(m(x), x).backward()
m.reconstruction_loss(x).backward()
torch.cuda.synchronize()
assert m.uses_kernel and xg.grad is not None" >> "$OUT/sanitize_$tool.log" 2>&1
      echo "module: rc=$?"
    fi
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|Uninitialized" \
      "$OUT/sanitize_$tool.log" | sort | uniq -c | head -8
  done
fi

log "done"
