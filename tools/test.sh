#!/bin/sh
# One command from a fresh Debian 12 machine to a passing test suite:
# installs dependencies, builds in build-test/, runs every test.
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
