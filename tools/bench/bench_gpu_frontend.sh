#!/bin/bash
# Offline scoring, side by side in one call: `ssae score --backend cuda`
# (the GPU front end: decode on CPU threads, everything else on the GPU),
# `--backend cpu`, and the PyTorch GPU pipeline a user would write
# (tools/bench/torch_gpu_pipeline.py: torchaudio MelSpectrogram on the GPU
# + the SPEC module), on N generated ten-second clips (tools/ssae-gen).
#
#   tools/bench/bench_gpu_frontend.sh [-b BUILD_DIR] [-n CLIPS] [-r ROUNDS] [-d DIR]
#
# Also `--backend auto` on the same set and, with cpu and cuda, on its first
# 100 clips (a job too small for the GPU's start-up: auto must stay on the
# CPU); cuda and cpu on the set four times over (a job four times the size:
# the GPU's fixed start-up spread over more work); and a process that only
# starts CUDA (the driver and a context) and exits (tools/bench/pinned_bench
# 0, built with CUDA): what any CUDA program pays on the host, with the
# driver's eight hardware queues and with one as ssae score asks; and the
# host's memory bandwidth (tools/bench/host_membw), from which the fastest a
# fresh process could score the set (the start and exit plus the bytes it
# must move through host memory). Prints a table (wall seconds per round,
# the median, clips/s), checks that the cuda and cpu file scores agree
# (1e-5 relative), and prints the per-window limits of the GPU path
# computed from the kernels' arithmetic and data movement
# (gpu/ssae_cuda_frontend.cu): PCIe bytes per second of audio, FLOPs per
# window, HBM bytes per window.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DIR=/tmp/ssae_bench_gpu_clips
. "$HERE/bench_clips.sh"
bench_options "$0 [-b BUILD_DIR] [-n CLIPS] [-r ROUNDS] [-d DIR]" "$@"
MODEL=$ROOT/src/model/default.safetensors
bench_clips "$DIR" 1 "$N"
SMALL=()
for i in $(seq 1 100); do SMALL+=("$DIR/clip$i.wav"); done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

run_timed() { # name, command...: appends the wall seconds to $OUT/name.t
  local name=$1; shift
  local t0 t1
  t0=$(now)
  if "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; then :; else
    echo "$name failed (status $?):" >&2; tail -5 "$OUT/$name.err" >&2; echo fail >> "$OUT/$name.t"; return 0
  fi
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }' >> "$OUT/$name.t"
}

# The PyTorch side needs a python3 with torch and torchaudio (PYTHON).
PY=${PYTHON:-python3}
TORCH_OK=1
"$PY" -c "import torch, torchaudio, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  2>/dev/null || TORCH_OK=0
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS ..." >&2
  run_timed cuda "$SSAE" score -q --stats --backend cuda "$DIR"
  grep -h "GPU front end:" "$OUT/cuda.err" >&2 || true
  # the same with the driver's default of eight hardware queues (ssae
  # score asks for one, ssae_cli_one_cuda_queue)
  run_timed cuda8 env CUDA_DEVICE_MAX_CONNECTIONS=8 "$SSAE" score -q --backend cuda "$DIR"
  run_timed cpu "$SSAE" score -q --backend cpu "$DIR"
  run_timed auto "$SSAE" score -q --backend auto "$DIR"
  # a small job (the first 100 clips): auto must stay on the CPU path
  run_timed small_auto "$SSAE" score -q --backend auto "${SMALL[@]}"
  run_timed small_cpu "$SSAE" score -q --backend cpu "${SMALL[@]}"
  run_timed small_cuda "$SSAE" score -q --backend cuda "${SMALL[@]}"
  run_timed x4_cuda "$SSAE" score -q --backend cuda "$DIR" "$DIR" "$DIR" "$DIR"
  run_timed x4_cpu "$SSAE" score -q --backend cpu "$DIR" "$DIR" "$DIR" "$DIR"
  if [ -x "$BUILD/tools/bench/pinned_bench" ]; then
    run_timed floor "$BUILD/tools/bench/pinned_bench" 0
    run_timed floor1 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$BUILD/tools/bench/pinned_bench" 0
  fi
  if [ $TORCH_OK = 1 ]; then
    run_timed torch "$PY" "$HERE/torch_gpu_pipeline.py" "$MODEL" "$DIR"/clip*.wav
  fi
done
# The host's memory bandwidth (tools/bench/host_membw, every CPU): what the
# decoding threads and the copy engine share once the context exists.
if [ -x "$BUILD/tools/bench/host_membw" ]; then
  "$BUILD/tools/bench/host_membw" | tail -1 > "$OUT/membw.txt" || rm -f "$OUT/membw.txt"
fi
du -sb "$DIR" | cut -f1 > "$OUT/bytes.txt"
if grep -q "went on on the CPU" "$OUT/cuda.err"; then
  echo "WARNING: the GPU front end fell back to the CPU:" >&2; cat "$OUT/cuda.err" >&2
fi

/usr/bin/python3 - "$OUT" "$N" "$TORCH_OK" <<'EOF'
import statistics, sys
out, n, torch_ok = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rows = [("ssae score --backend cuda", "cuda"), ("cuda, the driver's 8 queues", "cuda8"),
        ("ssae score --backend cpu", "cpu"),
        ("ssae score --backend auto", "auto")]
if torch_ok:
    rows.append(("PyTorch GPU (torchaudio + module)", "torch"))
rows += [("100 clips: --backend auto", "small_auto"), ("100 clips: --backend cpu", "small_cpu"),
         ("100 clips: --backend cuda", "small_cuda"),
         ("4x the set: --backend cuda", "x4_cuda"), ("4x the set: --backend cpu", "x4_cpu")]
import os
if os.path.exists(f"{out}/floor.t"):
    rows.append(("CUDA start + exit, no work", "floor"))
    rows.append(("the same, one queue", "floor1"))
med = {}
print(f"{'pipeline':36s} {'rounds (s)':28s} {'median s':>9s} {'clips/s':>9s}")
for label, key in rows:
    ts = [l.strip() for l in open(f"{out}/{key}.t")]
    ok = [float(t) for t in ts if t != "fail"]
    m = statistics.median(ok) if ok else float("nan")
    med[key] = m
    clips = 100 if key.startswith("small") else 4 * n if key.startswith("x4") else n
    rate = f"{clips / m:9.0f}" if ok and not key.startswith("floor") else f"{'-':>9s}"
    print(f"{label:36s} {' '.join(ts):28s} {m:9.3f} {rate}")
if med["cuda"] == med["cuda"]:
    print(f"cuda / cpu speed-up: {med['cpu'] / med['cuda']:.2f}x"
          + (f", cuda / PyTorch: {med['torch'] / med['cuda']:.1f}x" if torch_ok else ""))
print(f"auto / cpu: {med['cpu'] / med['auto']:.2f}x ({n} clips), "
      f"{med['small_cpu'] / med['small_auto']:.2f}x (100 clips)")
print(f"cuda / cpu at {4 * n} files (the set 4 times): {med['x4_cpu'] / med['x4_cuda']:.2f}x; "
      f"the extra {3 * n} files: {(med['x4_cpu'] - med['cpu']) / (med['x4_cuda'] - med['cuda']):.2f}x")
if med["cuda8"] == med["cuda8"]:
    print(f"one hardware queue against the driver's eight: {med['cuda8'] / med['cuda']:.2f}x")
if "floor" in med:
    print(f"a CUDA process's start and exit alone: {med['floor']:.3f} s, one queue "
          f"{med['floor1']:.3f} s (cuda at {n} files beyond it: "
          f"{med['cpu'] / max(med['cuda'] - med['floor1'], 1e-9):.2f}x)")

# The floor of a fresh process at this size: CUDA's start and exit with one
# queue, plus the bytes that must move through host memory after the context
# exists: the files' samples read from the page cache and written into the
# page-locked blocks (at the copy rate, bytes read + written) and read again
# by the copy engine (at the read rate).
if "floor1" in med and os.path.exists(f"{out}/membw.txt"):
    f = open(f"{out}/membw.txt").read().split()
    copy_gbs, read_gbs = float(f[1]), float(f[2])
    gb = int(open(f"{out}/bytes.txt").read()) / 1e9
    move = 2 * gb / copy_gbs + gb / read_gbs
    low = med["floor1"] + move
    print(f"host memory ({f[0]} threads): copy {copy_gbs:.1f} GB/s, read {read_gbs:.1f} GB/s; "
          f"{gb:.2f} GB of files to blocks and over PCIe: {move:.3f} s; with CUDA's start and "
          f"exit: {low:.3f} s for {n} files, at most {med['cpu'] / low:.2f}x the CPU path")

def scores(key):
    d = {}
    for l in open(f"{out}/{key}.out"):
        f = l.rstrip("\n").split("\t")
        d[f[0]] = float(f[1])
    return d
a, b = scores("cpu"), scores("cuda")
bad = [p for p in a if p not in b or abs(a[p] - b[p]) > 1e-5 * max(abs(a[p]), 1e-30)]
print(f"file scores cuda vs cpu: {len(a) - len(bad)}/{len(a)} within 1e-5 relative")

# The limits, from the kernels (defaults: 16 kHz, n_fft 1024, hop 512, M 64,
# F 5, L 32, S 64). In steady state a window brings one new frame.
sr, nfft, hop, M, F, L, S = 16000, 1024, 512, 64, 5, 32, 64
bins, C = nfft // 2 + 1, F * S
win_per_s = sr / hop
pcie_in = 2 * sr                      # 16-bit files: PCM read by the device as int16
pcie_out = 4 * win_per_s              # one float score per window
print(f"PCIe per second of audio: {pcie_in + pcie_out:,.0f} B "
      f"({pcie_in:,} B PCM in as int16 (float files: twice that), {pcie_out:,.0f} B scores out)")
h = nfft // 2                                  # the real frame as a half-size complex FFT
fft = 5 * h * (h.bit_length() - 1) + 10 * h    # and its split into the real transform's bins
mel_w = 2 * bins                               # Slaney bank: about two weights per bin
front = nfft + fft + 3 * bins + 2 * mel_w + 30 * M   # window, FFT, power, mel, log
model = 2 * (M * S + L * C + L * L + F * M * L) + 3 * F * M
print(f"FLOPs per window (FP64): {front + model:,} = front end {front:,} "
      f"(FFT {fft:,}) + model {model:,} (slice encoder once per frame)")
hbm_in = 4 * hop                      # PCM: append writes the new samples as float
hbm_frame = 4 * hop + 4 * M + 8 * S   # the frame's new samples read, its bands and codes written
hbm_win = 8 * C + 4 * F * M + 4       # a window reads its F codes and F frames, writes its score
print(f"HBM bytes per window (upper bound, L2 hits not subtracted): "
      f"{hbm_in + hbm_frame + hbm_win:,} = PCM {hbm_in:,} + frame {hbm_frame:,} + window {hbm_win:,}")
EOF
