#!/bin/sh
# One command from a fresh Debian 12 machine to a passing test suite:
# installs dependencies, builds in build-test/, runs every test, then fuzzes
# the model loader, the audio path, the shard outputs' readers and the
# service config briefly (libFuzzer, clang, build-fuzz/).
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

# The model loader, the audio path, the shard outputs' readers (--resume,
# merge) and the service config take files from anyone: 30 s each of
# coverage-guided fuzzing from their seed corpora (tests/*/fuzz_corpus) on
# every full run (the config's where the service is built).
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang meson setup build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized \
    -Dcuda=disabled -Dlv2=disabled -Djack=disabled -Dportaudio=disabled -Dcairo=disabled
fi
fuzz_targets="tests/model/fuzz_model_load tests/dsp/fuzz_audio_load tests/shard/fuzz_shard_lines"
fuzz_tests="model loader libFuzzer 30 s|audio path libFuzzer 30 s|shard output lines libFuzzer 30 s"
if ninja -C build-fuzz -t targets all | grep -q '^tests/service/fuzz_config:'; then
  fuzz_targets="$fuzz_targets tests/service/fuzz_config"
  fuzz_tests="$fuzz_tests|service config libFuzzer 30 s"
fi
# shellcheck disable=SC2086
ninja -C build-fuzz $fuzz_targets
IFS='|'
# shellcheck disable=SC2086
meson test -C build-fuzz --no-rebuild --print-errorlogs $fuzz_tests
