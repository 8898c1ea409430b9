#!/bin/bash
# Offline scoring on every GPU of a host, one process each (`ssae score
# --device N`), against one process on GPU 0 and against the CPU path, on the
# same generated clips, in turn for a few rounds (BENCHMARKS.md, "The GPU
# front end, offline").
#
#   tools/bench/bench_gpus.sh [-b BUILD_DIR] [-n CLIPS_PER_GPU] [-r ROUNDS] [-d DIR]
#
# The clips (ten seconds each, tools/ssae-gen) go into one folder per GPU;
# each GPU's process gets its folder and an equal share of the host's cores
# (--jobs). Prints the wall seconds of each round and checks that the
# per-GPU processes' file scores equal the one process's, bit for bit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DIR=/tmp/ssae_bench_gpus
. "$HERE/bench_clips.sh"
bench_options "$0 [-b BUILD_DIR] [-n CLIPS_PER_GPU] [-r ROUNDS] [-d DIR]" "$@"
G=$( (nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true) | wc -l)
[ "$G" -ge 1 ] || { echo "no GPU (nvidia-smi lists none)" >&2; exit 1; }
CORES=$(nproc)
JOBS=$(( CORES / G > 0 ? CORES / G : 1 ))
echo "# $G GPU(s), $CORES cores ($JOBS decoding threads per GPU process), $N clips per GPU"
folders=()
for g in $(seq 0 $((G - 1))); do
  folders+=("$DIR/gpu$g")
  bench_clips "$DIR/gpu$g" $((g * N + 1)) "$N"
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  t0=$(now)
  "$SSAE" score -q --backend cuda --device 0 "${folders[@]}" > "$OUT/one.tsv"
  t1=$(now)
  pids=()
  for g in $(seq 0 $((G - 1))); do
    "$SSAE" score -q --backend cuda --device "$g" --jobs "$JOBS" "${folders[$g]}" \
      > "$OUT/gpu$g.tsv" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t2=$(now)
  "$SSAE" score -q --backend cpu "${folders[@]}" > "$OUT/cpu.tsv"
  t3=$(now)
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v g="$G" 'BEGIN {
    printf "round: one process on GPU 0 %.3f s | %d processes, one per GPU %.3f s | CPU %.3f s\n",
           b - a, g, c - b, d - c }'
done
sort "$OUT/one.tsv" > "$OUT/one_s.tsv"
cat "$OUT"/gpu*.tsv | sort > "$OUT/all_s.tsv"
if cmp -s "$OUT/one_s.tsv" "$OUT/all_s.tsv"; then
  echo "file scores: one process per GPU = one process, bit for bit ($(wc -l < "$OUT/all_s.tsv") files)"
else
  echo "file scores: one process per GPU differ from one process" >&2
  exit 1
fi
