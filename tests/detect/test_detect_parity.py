"""One detector, live and offline: a generated recording with a fault and
stretches of digital silence goes through the real-time engine (`ssae
monitor --input`, JSON-lines events) and through the offline path (`ssae
report`, its printed alarm spans), with the same threshold, smoothing and
hysteresis; both must give the same alarm spans, window for window and to
the microsecond (doc/SPEC.md, section 4: an alarm runs from the time of the
window that turned it on to that of the window that turned it off).

The silence is placed where ignoring it would change the spans: inside the
fault (it must end the alarm, which comes back after it) and at the start
of a clip; a run of 63 zeros inside the fault must not. A fault that lasts
to the end of a clip leaves an alarm open in both."""
import array
import json
import os
import re
import subprocess
import sys
import tempfile
import wave

from ssae_testlib import check, done

ssae, gen = os.environ["SSAE"], sys.argv[1]
RATE = 16000  # the default model's rate: no resampling on either path


def make_clip(path, seed, seconds, anomaly, at, length, zeros):
    """ssae-gen's clip with the sample ranges in zeros set to exact zeros."""
    subprocess.run([gen, "--seed", str(seed), "--seconds", str(seconds), "--rate", str(RATE),
                    "--anomaly", anomaly, "--at", str(at), "--length", str(length), "-o", path],
                   check=True)
    with wave.open(path) as w:
        params = w.getparams()
        x = array.array("h", w.readframes(params.nframes))
    assert params.nchannels == 1 and params.sampwidth == 2 and params.framerate == RATE
    for a, b in zeros:
        for i in range(a, b):
            x[i] = 0
    with wave.open(path, "wb") as w:
        w.setparams(params)
        w.writeframes(x.tobytes())


def live_spans(path, d, opts):
    """[(on window, on t, off window or None, off t or None)] from the
    engine's alarm events."""
    ev = os.path.join(d, "events.jsonl")
    p = subprocess.run([ssae, "monitor", "--input", path, "--backend", "cpu", "--no-meter",
                        "--events", ev] + opts, capture_output=True, text=True)
    check(p.returncode == 0, f"monitor rc {p.returncode}: {p.stderr}")
    spans = []
    with open(ev) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "alarm_on":
                check(not spans or spans[-1][2] is not None, f"alarm_on while on: {line}")
                spans.append((e["window"], f"{e['t']:.6f}", None, None))
            elif e["event"] == "alarm_off":
                check(spans and spans[-1][2] is None, f"alarm_off while off: {line}")
                if spans and spans[-1][2] is None:
                    spans[-1] = spans[-1][:2] + (e["window"], f"{e['t']:.6f}")
    return spans


SPAN = re.compile(r"^  alarm ([\d.]+) s \.\. (?:([\d.]+) s|end of file) "
                  r"\(windows (\d+) \.\.(?: (\d+))?\)$")


def offline_spans(path, d, opts):
    p = subprocess.run([ssae, "report", path, "-o", os.path.join(d, "r.png"), "--backend", "cpu"]
                       + opts, capture_output=True, text=True)
    if p.returncode != 0 and "without cairo" in p.stderr:
        print("SKIP: ssae report needs cairo:", p.stderr.strip())
        sys.exit(77)
    check(p.returncode == 0, f"report rc {p.returncode}: {p.stderr}")
    spans = []
    for line in p.stdout.splitlines():
        m = SPAN.match(line)
        if m:
            t_on, t_off, w_on, w_off = m.groups()
            spans.append((int(w_on), t_on, int(w_off) if w_off else None, t_off))
        elif line.startswith("  alarm"):
            check(False, f"unreadable span line: {line!r}")
    return spans


def compare(name, path, d, opts, live_opts=()):
    live = live_spans(path, d, opts + list(live_opts))
    offline = offline_spans(path, d, opts)
    print(f"{name} {' '.join(opts) or '(defaults)'}\n  live    {live}\n  offline {offline}")
    check(live == offline, f"{name} {opts}: live and offline spans differ")
    return live


def sec(s):
    return round(s * RATE)


with tempfile.TemporaryDirectory() as d:
    # Bearing clicks from 3 to 9 s; digital silence inside them (from a
    # sample that is no multiple of the hop), 63 zeros inside them, and
    # silence in the normal part.
    a = os.path.join(d, "clicks.wav")
    s0, s1 = sec(5.0101) + 3, sec(5.8)
    make_clip(a, 5, 12, "clicks", 3, 6,
              [(s0, s1), (sec(4.2), sec(4.2) + 63), (sec(10.3) + 7, sec(10.5))])
    for opts in ([], ["--smoothing", "0.3", "--on", "2", "--off", "8"],
                 ["--threshold", "9", "--smoothing", "0", "--on", "4", "--off", "3"]):
        spans = compare("clicks", a, d, opts)
        # The silence ends the alarm within a window of its 64th zero, and
        # the fault raises it again after the silence.
        ends = [float(t) for _, _, _, t in spans if t is not None]
        starts = [float(t) for _, t, _, _ in spans]
        check(any(s0 / RATE < t < (s0 + 64 + 512) / RATE for t in ends),
              f"{opts}: no alarm ends at the silence ({s0 / RATE:.3f} s): {spans}")
        check(any(s1 / RATE < t < 9 for t in starts),
              f"{opts}: no alarm after the silence ({s1 / RATE:.3f} s): {spans}")
        check(not any(4.2 < t < 4.4 for t in ends),
              f"{opts}: 63 zeros ended an alarm: {spans}")

    # The engine's blocks (a whole block is scanned for silence before the
    # frames it completes) change nothing.
    base = compare("clicks", a, d, [])
    for block in ("97", "1000", "4096"):
        check(compare("clicks", a, d, [], ["--block", block]) == base,
              f"--block {block} changes the spans")

    # Silence at the start; a squeal from 5 s to the end: the alarm is still
    # on when the clip ends.
    b = os.path.join(d, "squeal.wav")
    make_clip(b, 7, 8, "squeal", 5, 3, [(0, sec(0.4))])
    spans = compare("squeal", b, d, [])
    check(spans and spans[-1][2] is None and 5 < float(spans[-1][1]) < 6,
          f"squeal: no alarm open at the end: {spans}")

done()
