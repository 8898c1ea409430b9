#!/bin/sh
# One command from a fresh Debian 12 machine to a passing test suite:
# installs dependencies, builds in build-test/, runs every test, then fuzzes
# the model loader briefly (libFuzzer, clang, build-fuzz/).
#   tools/test.sh [meson test arguments]     e.g. tools/test.sh --suite engine
set -e
cd "$(dirname "$0")/.."
tools/install-deps.sh --test
if [ -d build-test ]; then
  meson setup --reconfigure build-test -Dbuildtype=debugoptimized
else
  meson setup build-test -Dbuildtype=debugoptimized
fi
ninja -C build-test
meson test -C build-test --print-errorlogs --num-processes 2 "$@"
[ $# -eq 0 ] || exit 0

# The model loader and the audio path take files from anyone: 30 s each of
# coverage-guided fuzzing from their seed corpora (tests/model/fuzz_corpus,
# tests/dsp/fuzz_corpus) on every full run.
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang meson setup build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized \
    -Dcuda=disabled -Dlv2=disabled -Djack=disabled -Dportaudio=disabled -Dcairo=disabled
fi
ninja -C build-fuzz tests/model/fuzz_model_load tests/dsp/fuzz_audio_load
meson test -C build-fuzz --no-rebuild --print-errorlogs "model loader libFuzzer 30 s" \
  "audio path libFuzzer 30 s"
