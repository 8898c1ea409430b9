#!/bin/sh
# The demo: installs what ssae needs (tools/install-deps.sh), builds ssae (meson), generates a recording of a fan with a fault
# (tools/ssae-gen), plays it through the real-time engine at real-time pace
# with the default model (`ssae monitor --input FILE --realtime`: live meter,
# alarm events), and draws the report picture (`ssae report`).
#
#   tools/demo.sh                      (fault: bearing clicks from 5 s to 8 s)
#   ANOMALY=squeal tools/demo.sh       clicks | squeal | imbalance | clog
#   BUILD=dir OUT=dir SEED=n tools/demo.sh   (defaults: build, BUILD/demo, 42)
set -e
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=${OUT:-$build/demo}
anomaly=${ANOMALY:-clicks}
seed=${SEED:-42}

tools/install-deps.sh
if [ ! -d "$build" ]; then
  meson setup "$build" >/dev/null
fi
echo "== building ssae in $build/"
ninja -C "$build" >/dev/null
mkdir -p "$out"
wav="$out/fan-$anomaly.wav"
"$build/tools/ssae-gen" --seed "$seed" --seconds 12 --anomaly "$anomaly" --at 5 --length 3 \
  -o "$wav" --labels "$out/fan-$anomaly.labels.tsv"
echo "== $wav: 12 s of a fan; fault '$anomaly' from 5.0 s to 8.0 s (labels: $out/fan-$anomaly.labels.tsv)"
echo "== playing it through the real-time engine (default model), live:"
"$build/ssae" monitor --input "$wav" --realtime --events "$out/events.jsonl" >"$out/monitor.out"
echo "== alarm events (JSON lines, also in $out/events.jsonl):"
grep '"alarm_' "$out/events.jsonl" || echo "(no alarm)"
echo "== report picture:"
if "$build/ssae" report "$wav" -o "$out/fan-$anomaly.png"; then
  echo "== the picture is $(cd "$out" && pwd)/fan-$anomaly.png"
else
  echo "== no picture (see the message above)"
fi
