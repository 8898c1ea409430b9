# What tools/gpu-device-check.sh and tools/gpu-train-check.sh share, sourced
# by them from the tree's root after they set OUT and steps: has STEP (is the
# step asked for), log, the CUDA and dependency environment (.deps), src
# (the tree) and device_info.
mkdir -p "$OUT"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
log() { echo "=== $(date -u +%T) $*"; }
export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
eval "$(tools/gpu-host-deps.sh env .deps)" || exit 1
src=$(pwd)

# The GPU, its driver and clocks, and the CUDA compiler: the head of a log.
device_info() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total \
    --format=csv
  nvcc --version | tail -1
}
