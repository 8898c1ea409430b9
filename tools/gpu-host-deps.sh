#!/bin/sh
# Build dependencies for an air-gapped GPU host (no package access).
#
#   tools/gpu-host-deps.sh fetch [DIR]    on a networked Debian/Ubuntu machine:
#                                         downloads the .debs into DIR/debs
#                                         (default .deps; /.deps/ is git-ignored)
#   eval "$(tools/gpu-host-deps.sh env [DIR])"
#                                         on the GPU host: unpacks every .deb in
#                                         DIR/debs into DIR/root (dpkg -x, no
#                                         root needed, nothing touches /),
#                                         rewrites the .pc files to that prefix
#                                         and prints the PKG_CONFIG_PATH,
#                                         LD_LIBRARY_PATH, LIBRARY_PATH,
#                                         PYTHONPATH and PATH lines
#                                         (meson-python, pure Python, and
#                                         patchelf, which it runs: for `pip
#                                         install .` and its test).
#
# The packages are Debian 12's (libc 2.36); they run on any newer glibc
# (Ubuntu 24.04 has 2.39).
set -e
cmd=${1:-}
dir=${2:-.deps}
pkgs="libkissfft-dev libkissfft-float131 libsndfile1-dev libsndfile1 libsoxr-dev
libsoxr0 libflac12 libflac-dev libogg0 libogg-dev libvorbis0a libvorbisenc2
libvorbis-dev libopus0 libopus-dev libmpg123-0 libmpg123-dev libmp3lame0
libmp3lame-dev python3-mesonpy python3-pyproject-metadata patchelf"
case "$cmd" in
fetch)
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download $pkgs)
  ;;
env)
  [ -d "$dir/debs" ] || { echo "gpu-host-deps: no $dir/debs (run 'fetch' first)" >&2; exit 1; }
  root=$(cd "$dir" && pwd)/root
  mkdir -p "$root"
  for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$root"; done
  lib="$root/usr/lib/x86_64-linux-gnu"
  # .pc files name /usr (prefix=, and soxr's literal -L/-I paths).
  for pc in "$lib"/pkgconfig/*.pc "$root"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] || continue
    sed -i -e "s|^prefix=.*|prefix=$root/usr|" \
           -e "s|-L/usr/lib|-L$root/usr/lib|g" \
           -e "s|-I/usr/include|-I$root/usr/include|g" "$pc"
  done
  # Development symlinks point at absolute /usr/lib paths in a few packages.
  for l in "$lib"/*.so; do
    [ -L "$l" ] || continue
    t=$(readlink "$l")
    case "$t" in /*) ln -sf "$root$t" "$l" ;; esac
  done
  echo "export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
  echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  echo "export LIBRARY_PATH=$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
  echo "export PYTHONPATH=$root/usr/lib/python3/dist-packages\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export PATH=\$PATH:$root/usr/bin"
  ;;
*)
  echo "usage: $0 fetch|env [DIR]" >&2
  exit 2
  ;;
esac
