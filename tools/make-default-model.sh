#!/bin/sh
# Regenerates the default model (src/model/default.safetensors) from
# generated normal fan sound, reproducibly: the same seeds, the same
# training settings, the same weights (training is deterministic and does not
# depend on the number of threads; only the train_date metadata differs).
#
#   tools/make-default-model.sh [BUILD_DIR]     (default: build)
#
# 1. tools/ssae-gen --set: 60 normal 10 s clips (seed 1).
# 2. ssae train: default dimensions and features, 60 epochs, seed 1, CPU.
# 3. tools/ssae-threshold: the threshold for the live detector, 1.1 x the
#    largest 0.1 s-smoothed window score over the training clips (the
#    engine's default smoothing), instead of train's file-score gamma fit,
#    which sits inside the normal window scores and raises false alarms.
set -e
cd "$(dirname "$0")/.."
build=${1:-build}
[ -d "$build" ] || meson setup "$build"
ninja -C "$build" ssae tools/ssae-gen tools/ssae-threshold
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/tools/ssae-gen" --set "$tmp/set" --train 60 --test 0 --seconds 10 --seed 1
"$build/ssae" train -q -o "$tmp/model.safetensors" --epochs 60 --seed 1 --backend cpu \
  --threads 2 --percentile 0.99 "$tmp/set/train"
"$build/tools/ssae-threshold" "$tmp/model.safetensors" -o src/model/default.safetensors \
  "$tmp"/set/train/*.wav
ls -l src/model/default.safetensors
