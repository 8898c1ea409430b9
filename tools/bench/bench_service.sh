#!/bin/sh
# The plant service's cost (BENCHMARKS.md "Plant service"): MACHINES
# machines (default 256) on one engine, `ssae monitor --input FILE
# --realtime` (the real-time engine fed at the file's pace by the monitor's
# audio loop) with MQTT (a mosquitto started here on a loopback port),
# metrics (scraped every second during the run) and clips all on, against
# the same run with the outputs off; the runs alternate, ROUNDS times each
# (default 2). A fault plays on every eighth machine, so alarms, their
# events and clips are part of the load. The broker, the subscriber and the
# scraper run at nice 10: on a plant they live elsewhere, here they share
# the two cores with the monitor (whose own output threads run at nice 10
# too).
#
#   tools/bench/bench_service.sh            build-h/ (or BENCH_BUILD)
#
# BENCH_SECONDS (default 8) is the length of the recording and of each run;
# OUTPUTS (default "mqtt metrics clips") the outputs of the "on" runs (the
# events file is always written in them).
# Each line: outputs on/off, windows, scored, dropped, window-to-score
# latency p50/p99/max (ms), MQTT messages received by a subscriber and per
# second (retained ones of an earlier run left out), alarms, clips, max RSS
# (MB; the recording itself, loaded whole as floats, is MACHINES x seconds x
# 64 kB of it; the clips' pre-roll rings MACHINES x (pre-roll + 3 s) x 32 kB).
set -e
cd "$(dirname "$0")/../.."
build=${BENCH_BUILD:-build-h}
secs=${BENCH_SECONDS:-8}
machines=${MACHINES:-256}
rounds=${ROUNDS:-2}
outs=${OUTPUTS:-mqtt metrics clips}
for p in mosquitto mosquitto_sub curl /usr/bin/time; do
  command -v "$p" >/dev/null || { echo "bench_service: $p is missing" >&2; exit 1; }
done
ninja -C "$build" ssae tools/ssae-gen >/dev/null
SSAE=$PWD/$build/ssae
GEN=$PWD/$build/tools/ssae-gen
tmp=$(mktemp -d /tmp/ssae_bench_service.XXXXXX)
broker=
cleanup() {
  [ -n "$broker" ] && kill "$broker" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The recording: MACHINES channels, each a different stretch of a normal
# fan; every eighth one has bearing clicks from a third of the run on.
"$GEN" --seed 3 --seconds $((secs * 3)) --anomaly none -o "$tmp/normal.wav"
"$GEN" --seed 4 --seconds "$secs" --anomaly clicks --at $((secs / 3)) \
  --length $((secs / 3)) -o "$tmp/fault.wav"
/usr/bin/python3 - "$tmp" "$machines" "$secs" <<'EOF'
import sys, wave, array
tmp, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = 16000
def read(p):
    with wave.open(p) as w:
        return array.array("h", w.readframes(w.getnframes()))
normal, fault = read(f"{tmp}/normal.wav"), read(f"{tmp}/fault.wav")
L = secs * rate
chans = []
for c in range(n):
    if c % 8 == 7:
        chans.append(fault[:L])
    else:
        o = (c * 7919) % (len(normal) - L)
        chans.append(normal[o:o + L])
out = array.array("h", bytes(2 * L * n))
for c, x in enumerate(chans):
    out[c::n] = x
with wave.open(f"{tmp}/bench.wav", "wb") as w:
    w.setnchannels(n); w.setsampwidth(2); w.setframerate(rate)
    w.writeframes(out.tobytes())
EOF

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'listener %s 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\n' "$port" \
  > "$tmp/mosquitto.conf"
[ "$(id -u)" = 0 ] && echo "user root" >> "$tmp/mosquitto.conf"
nice -n 10 mosquitto -c "$tmp/mosquitto.conf" > "$tmp/mosquitto.log" 2>&1 &
broker=$!
sleep 0.5

names=$(/usr/bin/python3 -c "print(','.join('m%03d' % i for i in range($machines)))")
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
echo "# $machines machines, $secs s at 16 kHz, ssae monitor --input --realtime --backend cpu"
printf '%-18s %8s %8s %7s %8s %8s %8s %9s %8s %6s %5s %7s\n' outputs windows scored dropped \
  p50_ms p99_ms max_ms mqtt_msgs msgs/s alarms clips rss_MB

one_run() { # $1: on|off
  rm -rf "$tmp/clips" "$tmp/sub.txt" "$tmp/events.jsonl"
  set -- "$1" --input "$tmp/bench.wav" --realtime --backend cpu --no-meter --channel all \
    --names "$names"
  if [ "$1" = on ]; then
    mport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    nice -n 10 mosquitto_sub -h 127.0.0.1 -p "$port" -t 'ssae/#' -t 'homeassistant/#' -q 1 -R \
      > "$tmp/sub.txt" 2>/dev/null &
    sub=$!
    sleep 0.3
    set -- "$@" --node bench --events "$tmp/events.jsonl"
    case " $outs " in *" mqtt "*) set -- "$@" --mqtt "mqtt://127.0.0.1:$port" ;; esac
    case " $outs " in *" clips "*) set -- "$@" --clips "$tmp/clips" ;; esac
    scraper=
    case " $outs " in *" metrics "*)
      set -- "$@" --metrics "127.0.0.1:$mport"
      (for _ in $(seq $((secs + 1))); do
         sleep 1; nice -n 10 curl -s -m 2 "http://127.0.0.1:$mport/metrics" > /dev/null || true
       done) &
      scraper=$! ;;
    esac
  fi
  shift
  /usr/bin/time -f '%M' -o "$tmp/rss" "$SSAE" monitor "$@" > /dev/null 2> "$tmp/err" || {
    cat "$tmp/err" >&2; exit 1; }
  msgs=0
  clips=0
  alarms=0
  if [ -n "${sub:-}" ]; then
    sleep 1
    kill "$sub" $scraper 2>/dev/null || true
    wait "$sub" $scraper 2>/dev/null || true
    sub=
    msgs=$(wc -l < "$tmp/sub.txt")
    clips=$(ls "$tmp/clips" 2>/dev/null | wc -l)
    alarms=$(grep -c '"alarm_on"' "$tmp/events.jsonl" || true)
    outputs=$(echo "$outs" | tr ' ' +)
  else
    alarms=$(sed -n 's/.*, \([0-9]*\) alarm(s)$/\1/p' "$tmp/err" | tail -1)
    outputs=off
  fi
  sed -n 's/.* \([0-9]*\) windows, \([0-9]*\) scored, \([0-9]*\) dropped, .* latency p50 \([0-9.]*\) ms p99 \([0-9.]*\) ms max \([0-9.]*\) ms.*/\1 \2 \3 \4 \5 \6/p' \
    "$tmp/err" | tail -1 | {
    read -r w s d p50 p99 mx
    printf '%-18s %8s %8s %7s %8s %8s %8s %9s %8.0f %6s %5s %7.0f\n' "$outputs" "$w" "$s" "$d" \
      "$p50" "$p99" "$mx" "$msgs" "$(echo "$msgs / $secs" | bc -l)" "$alarms" "$clips" \
      "$(echo "$(cat "$tmp/rss") / 1024" | bc -l)"
  }
}

for _ in $(seq "$rounds"); do
  one_run on
  one_run off
done
