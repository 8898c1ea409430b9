#!/bin/sh
# Installs what ssae needs on Debian 12 (apt-get; sudo when not root).
#   tools/install-deps.sh          build and run
#   tools/install-deps.sh --test   also the test oracles and peers (torch,
#                                  torchaudio, jackd, sndfile-tools, lilv, jalv,
#                                  slurm-wlm, munge, python3-yaml for the
#                                  cluster tests; mosquitto, promtool, curl,
#                                  systemd-analyze for the service tests)
set -e
pkgs="meson ninja-build pkg-config gcc libkissfft-dev libsndfile1-dev libsoxr-dev
portaudio19-dev libjack-jackd2-dev lv2-dev libcairo2-dev
libcyaml-dev libyaml-dev libmosquitto-dev libmicrohttpd-dev libsystemd-dev"
if [ "$1" = "--test" ]; then
  pkgs="$pkgs python3 python3-numpy python3-torch python3-torchaudio jackd2
python3-pytest python3-mesonpy patchelf python3-venv sndfile-tools liblilv-dev lilv-utils jalv sordi clang libclang-rt-14-dev valgrind
slurm-wlm munge python3-yaml mosquitto mosquitto-clients prometheus curl systemd"
fi
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends $missing
