#!/bin/sh
# jalv (a real host: threaded worker, JACK) loads the plugin from the build
# tree on a JACK dummy server of its own and prints the control outputs.
# usage: jalv_test.sh BUNDLE_DIR
set -u
bundle=$1
fail() { echo "FAIL: $*" >&2; [ -n "${out:-}" ] && cat "$out" >&2; exit 1; }

# In a sanitizer build the plugin needs the sanitizer runtimes inside jalv,
# which is built without them: meson passes them in SSAE_SANITIZER_PRELOAD.
if [ -n "${SSAE_SANITIZER_SKIP:-}" ]; then
  echo "sanitizer build with a compiler whose runtimes cannot be preloaded" >&2
  exit 77
fi
if [ -n "${SSAE_SANITIZER_PRELOAD:-}" ]; then
  set -- env LD_PRELOAD="$SSAE_SANITIZER_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$(dirname "$0")/jalv.ubsan.supp"
else
  set --
fi

for tool in jackd jalv jack_wait; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is not installed" >&2; exit 77; }
done

tmp=$(mktemp -d) || exit 1
jackd_pid=
cleanup() {
  [ -n "$jackd_pid" ] && kill "$jackd_pid" 2>/dev/null && wait "$jackd_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# A server nobody else uses: its own name (and so its own sockets). The
# name is fixed: JACK's registry has 8 server slots and frees the slot of a
# server that died without unregistering only when a server of the same name
# starts, so a name per run would leak a slot each time one is killed.
JACK_DEFAULT_SERVER="ssae_test_lv2_jalv"
export JACK_DEFAULT_SERVER
jackd --no-realtime -d dummy -r 16000 -p 512 -C 1 -P 1 > "$tmp/jackd.log" 2>&1 &
jackd_pid=$!
if ! jack_wait -w -t 10 > /dev/null 2>&1; then
  cat "$tmp/jackd.log" >&2
  echo "the JACK dummy server did not start" >&2
  exit 77
fi

export LV2_PATH="$(dirname "$bundle"):/usr/lib/lv2:/usr/local/lib/lv2"
out="$tmp/jalv.out"
# jalv's console reads commands from stdin and quits at its end: keep it
# open for a few seconds of (silent) audio and ask twice for the outputs.
# The threshold given on the command line must come back as the one in use.
{ sleep 3; echo monitors; sleep 2; echo monitors; sleep 0.5; } |
  timeout 30 "$@" jalv -p -c threshold=7.5 -n ssae-test urn:ssae:lv2:mono > "$out" 2>&1
rc=$?
[ $rc -eq 124 ] && fail "jalv did not exit"
[ $rc -ne 0 ] && fail "jalv exited with status $rc"

grep -qi "error" "$out" && fail "errors in jalv's output"
# The console prompt "> " may precede a line.
value() { sed -n "s/^\(> \)*$1 = \([-0-9.e+]*\).*/\2/p" "$out"; }
for sym in score window_score alarm threshold_used drops latency windows; do
  [ -n "$(value $sym)" ] || fail "jalv did not print the output '$sym'"
done
w1=$(value windows | head -n 1)
w2=$(value windows | tail -n 1)
thr=$(value threshold_used | tail -n 1)
drops=$(value drops | tail -n 1)
echo "windows $w1 -> $w2, threshold_used $thr, drops $drops"
awk -v a="$w1" -v b="$w2" 'BEGIN { exit !(a > 10 && b >= a + 20) }' ||
  fail "the plugin is not scoring in real time (windows $w1 then $w2)"
awk -v t="$thr" 'BEGIN { exit !(t == 7.5) }' || fail "threshold_used = $thr, set 7.5"
awk -v d="$drops" 'BEGIN { exit !(d == 0) }' || fail "$drops windows dropped"
echo ok
