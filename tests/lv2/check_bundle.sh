#!/bin/sh
# The bundle in the build tree: lv2info (lilv-utils) parses both plugins,
# and sord_validate checks every TTL file against the LV2 schemas of
# Debian's lv2-dev. usage: check_bundle.sh BUNDLE_DIR
set -u
bundle=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

for tool in lv2info sord_validate; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is not installed" >&2; exit 77; }
done
spec_dirs=
for d in /usr/lib/lv2 /usr/local/lib/lv2 /usr/share/lv2; do
  [ -f "$d/core.lv2/lv2core.ttl" ] && spec_dirs="$spec_dirs $d"
done
[ -n "$spec_dirs" ] || { echo "the LV2 schemas (lv2-dev) are not installed" >&2; exit 77; }
[ -f "$bundle/manifest.ttl" ] || fail "$bundle/manifest.ttl missing"

lv2_path=$(dirname "$bundle")
for d in $spec_dirs; do lv2_path="$lv2_path:$d"; done
export LV2_PATH="$lv2_path"

check_plugin() { # URI PORTS AUDIO_SYMBOLS...
  uri=$1 ports=$2
  shift 2
  out=$(lv2info "$uri" 2>&1) || fail "lv2info $uri: $out"
  echo "$out" | grep -q "Class: *Analyser Plugin" || fail "$uri is not an analyser plugin"
  echo "$out" | grep -q "lv2core#hardRTCapable" || fail "$uri lacks hardRTCapable"
  echo "$out" | grep -q "worker#interface" || fail "$uri lacks the worker interface"
  echo "$out" | grep -q "state#interface" || fail "$uri lacks the state interface"
  echo "$out" | grep -q "worker#schedule" || fail "$uri does not require worker#schedule"
  n=$(echo "$out" | grep -c "^[[:space:]]*Port [0-9]*:")
  [ "$n" = "$ports" ] || fail "$uri has $n ports, expected $ports"
  for sym in control notify threshold smoothing alarm_on alarm_off enable \
             score window_score alarm threshold_used drops latency windows "$@"; do
    echo "$out" | grep -q "Symbol: *$sym\$" || fail "$uri has no port '$sym'"
  done
  bin=$(echo "$out" | sed -n 's|^[[:space:]]*Binary:[[:space:]]*file://||p')
  [ -f "$bin" ] || fail "$uri: the binary '$bin' named by manifest.ttl does not exist"
  echo "$uri: $n ports, binary $bin"
}
check_plugin urn:ssae:lv2:mono 16 in out
check_plugin urn:ssae:lv2:stereo 18 in_l in_r out_l out_r
[ -f "$bundle/default.safetensors" ] || fail "the default model is not in the bundle"

schemas=$(for d in $spec_dirs; do find "$d" -name '*.ttl'; done)
# shellcheck disable=SC2086
out=$(sord_validate $schemas "$bundle"/*.ttl 2>&1) || fail "sord_validate: $out"
echo "$out" | tail -n 1
echo "$out" | grep -q "Found 0 errors" || fail "sord_validate: $out"

# The validator itself must catch a broken file (else this test proves
# nothing): a port index that is not an integer.
tmp=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
sed 's/lv2:index 3 ;/lv2:index "three" ;/' "$bundle/ssae.ttl" > "$tmp/ssae.ttl"
# shellcheck disable=SC2086
if sord_validate $schemas "$tmp/ssae.ttl" >/dev/null 2>&1; then
  fail "sord_validate accepted a broken port index"
fi
echo ok
