"""The offline commands on hostile audio files (the reader's checks seen
from the command line, SPEC section 4): `ssae score`, `ssae features` and
`ssae train`, each given a good file beside a float WAV with a NaN at
1.5 s, a 1 Hz WAV and a 402 MHz WAV, name each bad file and its reason
(the NaN's time, the rate), still process the good file, and exit 1; train
refuses the bad files before training and writes its model from the good
ones. Standard library only."""
import math
import os
import struct
import tempfile

from ssae_testlib import done, fail, run_expect

SSAE = os.environ["SSAE"]


def wav(path, rate, samples, float32=False):
    if float32:
        data = b"".join(struct.pack("<f", s) for s in samples)
        fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    else:
        data = b"".join(struct.pack("<h", int(32767 * s)) for s in samples)
        fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + \
        struct.pack("<I", len(data)) + data
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def run(args, status, *words):
    return run_expect([SSAE, *args], status, *words)


def main():
    d = tempfile.mkdtemp(prefix="ssae_hostile_cli_")
    good = [os.path.join(d, f"good{i}.wav") for i in range(3)]
    for i, g in enumerate(good):
        wav(g, 16000, [0.3 * math.sin(0.05 * (i + 1) * k) + 0.01 * math.sin(1.3 * k * k)
                       for k in range(32000)])
    nan = os.path.join(d, "nan.wav")
    s = [0.2 * math.sin(0.1 * k) for k in range(32000)]
    s[24000] = float("nan")
    wav(nan, 16000, s, float32=True)
    one_hz = os.path.join(d, "one_hz.wav")
    wav(one_hz, 1, [0.1] * 100000)
    mhz = os.path.join(d, "mhz.wav")
    wav(mhz, 402000000, [0.1] * 1000)
    bad = [(nan, "1.500000 s"), (one_hz, "1 Hz"), (mhz, "402000000 Hz")]
    words = [w for b, r in bad for w in (b, r)]

    p = run(["score", "--backend", "cpu", good[0], nan, one_hz, mhz], 1, *words)
    if good[0] not in p.stdout:
        fail(f"score: the good file is missing from stdout {p.stdout!r}")
    npy = os.path.join(d, "good.npy")
    run(["features", good[0], "-o", npy], 0)
    for b, r in bad:
        run(["features", b, "-o", os.path.join(d, "bad.npy")], 1, b, r)
    if os.path.exists(os.path.join(d, "bad.npy")):
        fail("features wrote a .npy for a refused file")
    model = os.path.join(d, "m.safetensors")
    p = run(["train", "-o", model, "--epochs", "1", "--backend", "cpu", *good, nan, one_hz, mhz],
            1, *words)
    if not os.path.exists(model):
        fail(f"train wrote no model from the good files: {p.stderr!r}")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)
    done()


main()
