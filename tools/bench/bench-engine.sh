#!/bin/sh
# Real-time engine benchmark (BENCHMARKS.md "Real-time engine"): how many
# 16 kHz channels one engine sustains at real-time pace with zero drops, the
# window-to-score latency, and memory. Builds build-bench/ if needed.
#
#   tools/bench/bench-engine.sh            CPU backend (this machine)
#   tools/bench/bench-engine.sh cuda       CUDA backend (e.g. on the H100 host)
#
# BENCH_SECONDS (default 10) sets the seconds per channel count, CHANNELS
# (a comma list) the channel counts, BENCH_BUILD the build directory;
# with cuda, GROUP_COUNTS (default "4 8 12") the input-group runs (one
# feeding thread per group) at GROUP_CHANNELS (default 4096,6144).
#
# Each line: channels, windows, dropped, batches, latency p50/p99/max (ms),
# audio-thread time per 256-sample block (mean, max ms), its mean over the
# blocks that complete a frame (the floor under the last channel's latency),
# the share of the 16 ms period the audio thread used, max RSS (MB), backend.
set -e
cd "$(dirname "$0")/../.."
backend=${1:-cpu}
secs=${BENCH_SECONDS:-10}
build=${BENCH_BUILD:-build-bench}
setup="-Dbuildtype=release"
# On the air-gapped GPU host the dependencies come from .deps (see
# tools/gpu-host-deps.sh); the build there is Hopper-only, like
# tools/gpu-device-check.sh's.
if [ -d .deps ] && ! pkg-config --exists kissfft-float 2>/dev/null; then
  export PATH=/usr/local/cuda/bin:$PATH
  eval "$(tools/gpu-host-deps.sh env .deps)"
  setup="$setup -Dgpu_sm=90 -Dwerror=false -Dlv2=disabled"
fi
[ -d "$build" ] || meson setup "$build" $setup >/dev/null
ninja -C "$build" -j"$(nproc)" tools/bench/engine_bench ssae tools/ssae-gen >/dev/null
# engine_bench exits 1 when a channel count dropped windows: the sweep
# goes past the capacity on purpose, so only its other failures stop here
bench() { "$build/tools/bench/engine_bench" "$@" || [ $? -eq 1 ]; }
B=bench
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader || true
if [ "$backend" = cuda ]; then
  # All channels' windows of a period arrive within the audio thread's
  # feature pass: the worker takes what is there, up to 8192 at a time.
  $B --backend cuda --batch 8192 --seconds "$secs" \
    --channels "${CHANNELS:-256,1024,2048,4096,6144,8192}"
  # Several audio threads into one engine (input groups: one per sound
  # card, JACK client or network stream), same invocation.
  for g in ${GROUP_COUNTS:-4 8 12}; do
    $B --backend cuda --batch 8192 --seconds "$secs" --groups "$g" \
      --channels "${GROUP_CHANNELS:-4096,6144}"
  done
  # The CPU backend on the same host, side by side.
  $B --backend cpu --cpu-threads 1 --seconds "$secs" --channels 256,1024
else
  # The worker scores on its own thread (CPU threads 1): with the audio
  # thread busy on one core, a helper thread of the model only competes
  # with it. Side by side: every core for the model (0), and a worker that
  # sleeps as soon as the ring is empty (no spinning).
  $B --backend cpu --cpu-threads 1 --seconds "$secs" \
    --channels "${CHANNELS:-1,16,32,64,128,256,512,768,1024}"
  $B --backend cpu --cpu-threads 0 --seconds "$secs" --channels 64,256
  $B --backend cpu --cpu-threads 1 --spin-ms -1 --seconds "$secs" --channels 64,256
fi
# Resident memory of the monitor (1 channel, file at real-time pace, 5 s).
tmp=$(mktemp -d)
$build/tools/ssae-gen --seconds 6 -o "$tmp/x.wav" >/dev/null
/usr/bin/time -f "monitor --input --realtime (5 s, backend $backend): max RSS %M KB" \
  $build/ssae monitor --backend "$backend" --input "$tmp/x.wav" --realtime \
  --duration 5 --no-meter >/dev/null
rm -rf "$tmp"
