#!/bin/sh
# Real-time engine benchmark (BENCHMARKS.md "Real-time engine"): how many
# 16 kHz channels one engine sustains at real-time pace with zero drops, the
# window-to-score latency, and memory. Builds build-bench/ if needed.
#
#   tools/bench-engine.sh            CPU backend (this machine)
#   tools/bench-engine.sh cuda       CUDA backend (e.g. on the H100 host)
#
# Each line: channels, windows, dropped, batches, latency p50/p99/max (ms),
# audio-thread time per 256-sample block (mean, max ms), the share of the
# 16 ms period the audio thread used, max RSS (MB), backend.
set -e
cd "$(dirname "$0")/.."
backend=${1:-cpu}
# On the air-gapped GPU host the dependencies come from .deps (see
# tools/gpu-host-deps.sh).
if [ -d .deps ]; then
  export PATH=/usr/local/cuda/bin:$PATH
  eval "$(tools/gpu-host-deps.sh env .deps)"
fi
[ -d build-bench ] || meson setup build-bench -Dbuildtype=release >/dev/null
ninja -C build-bench tests/engine/engine_bench ssae tools/ssae-gen >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader || true
if [ "$backend" = cuda ]; then
  # All channels' windows arrive together: one batch per period.
  build-bench/tests/engine/engine_bench --backend cuda --batch 8192 --seconds 10 \
    --channels 256,1024,2048,4096,6144,8192
  build-bench/tests/engine/engine_bench --backend cpu --seconds 10 --channels 256,512,1024
else
  build-bench/tests/engine/engine_bench --backend cpu --seconds 10 \
    --channels 1,16,64,128,256,384,512
fi
# Resident memory of the monitor (1 channel, file at real-time pace, 5 s).
tmp=$(mktemp -d)
build-bench/tools/ssae-gen --seconds 6 -o "$tmp/x.wav" >/dev/null
/usr/bin/time -f "monitor --input --realtime (5 s, backend $backend): max RSS %M KB" \
  build-bench/ssae monitor --backend "$backend" --input "$tmp/x.wav" --realtime \
  --duration 5 --no-meter >/dev/null
rm -rf "$tmp"
