"""ssae monitor --input FILE as fast as possible: a STATUS event at each
--status period of audio time, the first one included.

The worker judges the period once per batch, at the batch's last window; the
first batch held all that was fed while the backend started (up to 256
windows, some 8 s of audio), so with --status 0.1 the first STATUS came at
8.3 s and later ones a second apart. Each period now gets its event within a
window hop and a block of its end (the first: of the first window, 0.16 s
with the default features). Both the model's rate and a resampled stereo
file. Standard library only."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import wave

SSAE = os.environ["SSAE"]
failures = []

HOP = 0.032          # the built-in model: hop 512 at 16 kHz
FIRST_WINDOW = 0.16  # (frames - 1) * hop + n_fft / 2, in seconds


def check(ok, what):
    print(f"{'ok' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def wav(path, rate, seconds, channels):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        n = int(rate * seconds)
        w.writeframes(b"".join(
            struct.pack("<" + "h" * channels,
                        *(int(6000 * math.sin((0.02 + 0.01 * c) * k) +
                              300 * math.sin(1.3 * k * k)) for c in range(channels)))
            for k in range(n)))


with tempfile.TemporaryDirectory() as d:
    for rate, seconds, channels in ((16000, 30, 1), (48000, 12, 2)):
        f = os.path.join(d, f"in{rate}.wav")
        wav(f, rate, seconds, channels)
        block = 512 / rate  # --block's default, in seconds
        for period in (1.0, 0.1):
            ev = os.path.join(d, "ev.jsonl")
            p = subprocess.run([SSAE, "monitor", "--backend", "cpu", "--input", f, "--status",
                                str(period), "--events", ev], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=300)
            what = f"{rate} Hz x{channels}, --status {period}"
            if p.returncode != 0:
                check(False, f"{what}: rc {p.returncode} {p.stderr.decode(errors='replace')!r}")
                continue
            with open(ev) as fh:
                ts = [e["t"] for e in map(json.loads, fh) if e["event"] == "status"]
            late = HOP + block + 1e-6
            first_due = max(period, FIRST_WINDOW)
            check(ts and ts[0] <= first_due + late,
                  f"{what}: first status at {ts[0] if ts else None} s (due {first_due} s)")
            gaps = [b - a for a, b in zip(ts, ts[1:])]
            check(all(0 < g <= period + late for g in gaps),
                  f"{what}: status every period (largest gap {max(gaps, default=0):.3f} s)")
            # one per period, and the last one when the engine ends
            want = int(seconds / period + 1e-9)
            check(want <= len(ts) <= want + 1, f"{what}: {len(ts)} status events, {want} periods")

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all passed")
