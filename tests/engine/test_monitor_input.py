"""`ssae monitor --input FILE` plays a file through the real-time engine; its
window scores equal `ssae score --windows` on the same file, window for
window (mono 16 kHz; a stereo 48 kHz file, channel 1, resampled; real-time
pace), also through the device front end (--gpu-frontend). Also: events as
JSON lines, with an alarm's keys (SPEC section 4: machine, time, id;
alarm_off's duration, peak score and reason), usage errors, a missing
file."""
import datetime
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import wave

SSAE = os.environ["SSAE"]


def write_wav(path, rate, channels, seconds, seed):
    rng = random.Random(seed)
    n = int(rate * seconds)
    frames = bytearray()
    for i in range(n):
        t = i / rate
        for c in range(channels):
            # noise plus a hum whose pitch changes half way
            f = 220.0 * (c + 1) if t < seconds / 2 else 700.0
            v = 0.05 * rng.uniform(-1, 1) + 0.2 * math.sin(2 * math.pi * f * t)
            frames += struct.pack("<h", max(-32768, min(32767, int(v * 32767))))
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))


def run(args, **kw):
    return subprocess.run([SSAE] + args, capture_output=True, text=True, **kw)


def read_tsv(path):
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == "path\twindow\ttime\tscore", lines[0]
    rows = []
    for ln in lines[1:]:
        p, w, t, s = ln.split("\t")
        rows.append((p, int(w), float(t), float(s)))
    return rows


def compare(tmp, wav, extra, realtime=False, monitor_extra=()):
    s_tsv = os.path.join(tmp, "score.tsv")
    m_tsv = os.path.join(tmp, "monitor.tsv")
    ev = os.path.join(tmp, "events.jsonl")
    r = run(["score", "--backend", "cpu", "--windows", s_tsv] + extra + [wav])
    assert r.returncode == 0, r.stderr
    args = ["monitor", "--backend", "cpu", "--input", wav, "--windows", m_tsv,
            "--events", ev, "--no-meter"] + extra + list(monitor_extra)
    if realtime:
        args.append("--realtime")
    t0 = time.monotonic()
    r = run(args)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    a, b = read_tsv(s_tsv), read_tsv(m_tsv)
    assert len(a) == len(b) and len(a) > 10, (len(a), len(b))
    for x, y in zip(a, b):
        assert x[0] == y[0] and x[1] == y[1], (x, y)
        assert abs(x[2] - y[2]) < 1e-9, (x, y)
        assert abs(x[3] - y[3]) <= 1e-6 * abs(x[3]) + 1e-12, (x, y)
    # stdout is not a terminal here: the events come out there too
    out = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    with open(ev) as f:
        evs = [json.loads(l) for l in f if l.strip()]
    assert out == evs, (out, evs)
    status = [e for e in evs if e["event"] == "status"]
    assert status, evs
    last = status[-1]
    for k in ("t", "channel", "event", "score", "threshold", "windows",
              "dropped", "backend", "latency_ms"):
        assert k in last, (k, last)
    assert last["windows"] == len(a) and last["dropped"] == 0, last
    assert last["backend"] == "cpu"
    # The file's channel that was picked (--channel N), 0 for a mono file.
    want_ch = int(extra[extra.index("--channel") + 1]) if "--channel" in extra else 0
    for e in evs:
        if e["event"] in ("alarm_on", "alarm_off"):
            assert e["channel"] == want_ch and e["t"] > 0 and e["score"] is not None, e
    print(f"{os.path.basename(wav)} {' '.join(extra + list(monitor_extra))}"
          f"{' realtime' if realtime else ''}:"
          f" {len(a)} windows equal; {wall:.2f} s wall")
    return wall


def alarm_keys(tmp, wav):
    """A threshold far below every score raises an alarm at once; the
    file's trailing digital silence ends it. Both events carry SPEC section
    4's keys; alarm_off's peak is the highest window score from the window
    that raised the alarm to the last one before the silence."""
    ev = os.path.join(tmp, "alarm.jsonl")
    tsv = os.path.join(tmp, "alarm.tsv")
    r = run(["monitor", "--input", wav, "--events", ev, "--windows", tsv, "--no-meter",
             "--threshold", "1e-6"])
    assert r.returncode == 0, r.stderr
    with open(ev) as f:
        evs = [json.loads(l) for l in f if l.strip()]
    alarms = [e for e in evs if e["event"] in ("alarm_on", "alarm_off")]
    assert [e["event"] for e in alarms] == ["alarm_on", "alarm_off"], alarms
    on, off = alarms
    for e in alarms:
        assert e["machine"] == "ch0", e
        wall = datetime.datetime.strptime(e["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        assert len(e["time"]) == 24 and abs(
            (wall - datetime.datetime.utcnow()).total_seconds()) < 600, e
        assert len(e["id"]) == 36 and e["id"][14] == "4", e
    assert on["id"] == off["id"], alarms
    assert "duration_s" not in on and "peak_score" not in on, on
    assert abs(off["duration_s"] - (off["t"] - on["t"])) < 1e-6, alarms
    assert off["reason"] == "silence", off
    rows = read_tsv(tsv)
    scores = {w: s for _, w, _, s in rows}
    peak = max(scores[w] for w in range(on["window"], off["window"]))
    assert abs(off["peak_score"] - peak) <= 1e-6 * peak, (off, peak)
    # A second run: a new alarm, a new id.
    r = run(["monitor", "--input", wav, "--events", ev, "--no-meter", "--threshold", "1e-6"])
    with open(ev) as f:
        again = [json.loads(l) for l in f if l.strip() and '"alarm_on"' in l]
    assert r.returncode == 0 and len(again) == 1 and again[0]["id"] != on["id"], again
    print(f"alarm keys: {on['id']} on at {on['t']:.3f} s, off at {off['t']:.3f} s "
          f"({off['reason']}), peak {off['peak_score']:.6g}")


def write_wav_then_silence(path, seconds, silence_s):
    write_wav(path, 16000, 1, seconds, 5)
    with wave.open(path, "rb") as w:
        frames = w.readframes(w.getnframes())
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(frames + bytes(2 * int(16000 * silence_s)))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        mono = os.path.join(tmp, "mono16k.wav")
        write_wav(mono, 16000, 1, 4.0, 1)
        compare(tmp, mono, [])
        stereo = os.path.join(tmp, "stereo48k.wav")
        write_wav(stereo, 48000, 2, 2.0, 2)
        compare(tmp, stereo, ["--channel", "1"])
        # The device front end (its CPU path here): the same windows.
        compare(tmp, mono, [], monitor_extra=["--gpu-frontend"])
        compare(tmp, stereo, ["--channel", "1"], monitor_extra=["--gpu-frontend"])
        loud_quiet = os.path.join(tmp, "loud_quiet.wav")
        write_wav_then_silence(loud_quiet, 2.0, 1.0)
        alarm_keys(tmp, loud_quiet)
        short = os.path.join(tmp, "short.wav")
        write_wav(short, 16000, 1, 1.5, 3)
        wall = compare(tmp, short, [], realtime=True)
        assert wall >= 1.3, f"--realtime took {wall:.2f} s for 1.5 s of audio"

        r = run(["monitor", "--input", os.path.join(tmp, "nope.wav"), "--no-meter"])
        assert r.returncode == 1 and "nope.wav" in r.stderr, (r.returncode, r.stderr)
        r = run(["monitor", "--realtime"])
        assert r.returncode == 2 and "--input" in r.stderr, r.stderr
        r = run(["monitor", "--input", mono, "--bogus"])
        assert r.returncode == 2 and "--bogus" in r.stderr, r.stderr
        r = run(["monitor", "--input", mono, "--threshold", "x"])
        assert r.returncode == 2, r.stderr
        r = run(["monitor", "--help"])
        assert r.returncode == 0 and "--input" in r.stdout
    return 0


if __name__ == "__main__":
    sys.exit(main())
