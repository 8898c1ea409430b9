"""`ssae features` on good and bad inputs (SPEC section 4): the .npy output
loads in numpy with the right shape; missing file, not audio, empty file,
zero-length audio, a file shorter than one window and a bad channel index
each give a message naming the file and the reason and exit status 1, never
a crash; a run over several files writes the good ones and still exits 1;
usage errors exit 2. Needs numpy only (no torch)."""
import os
import struct
import subprocess
import sys
import tempfile
import wave

try:
    import numpy as np
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

from ssae_testlib import check, done, fail, run_expect  # noqa: E402

SSAE = os.environ["SSAE"]


def expect(args, status, *words):
    return run_expect([SSAE, "features", *args], status, *words, timeout=60)


def wav(path, seconds, sr=16000, channels=1):
    n = int(round(seconds * sr))
    t = np.arange(n) / sr
    x = np.stack([0.3 * np.sin(2 * np.pi * (300 + 200 * c) * t) for c in range(channels)], 1)
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(np.round(x * 32767).astype("<i2").tobytes())


with tempfile.TemporaryDirectory() as d:
    good = os.path.join(d, "good.wav")
    wav(good, 10.0)
    stereo = os.path.join(d, "stereo.wav")
    wav(stereo, 1.0, channels=2)
    short = os.path.join(d, "short.wav")
    wav(short, 0.1)  # 1600 samples: 4 frames, a window needs 5 (2048 samples)
    just = os.path.join(d, "just.wav")
    wav(just, 2048 / 16000)  # exactly one window
    zero = os.path.join(d, "zero.wav")
    wav(zero, 0.0)
    empty = os.path.join(d, "empty.wav")
    open(empty, "wb").close()
    text = os.path.join(d, "notes.wav")
    with open(text, "w") as f:
        f.write("this is not audio\n" * 20)
    trunc = os.path.join(d, "trunc.wav")  # a RIFF header and nothing else
    with open(trunc, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt ")
    missing = os.path.join(d, "missing.wav")
    out = os.path.join(d, "out.npy")

    p = expect([good, "-o", out], 0)
    a = np.load(out)
    if a.shape != (313, 64) or a.dtype != np.float32 or not a.flags.c_contiguous:
        fail(f"10 s file gave {a.shape} {a.dtype}, want (313, 64) float32")
    with open(out, "rb") as f:
        head = f.read(10)
    if head[:8] != b"\x93NUMPY\x01\x00" or (10 + head[8] + 256 * head[9]) % 64:
        fail(f"not an aligned .npy v1.0 header: {head!r}")
    expect([just, "-o", out], 0)
    if np.load(out).shape != (5, 64):
        fail(f"2048-sample file gave {np.load(out).shape}, want (5, 64)")
    expect([stereo, "--channel", "1", "-o", out], 0)
    ch1 = np.load(out)
    expect([stereo, "--channel", "mix", "-o", out], 0)
    mix = np.load(out)
    expect([stereo, "-o", out], 0)
    ch0 = np.load(out)
    # 300 Hz in channel 0, 500 Hz in channel 1: different peak bands; the mix has both.
    b0, b1 = ch0.mean(0).argmax(), ch1.mean(0).argmax()
    if b0 >= b1 or mix.mean(0)[b0] < ch0.mean(0)[b0] - 7 or mix.mean(0)[b1] < ch1.mean(0)[b1] - 7:
        fail(f"channel selection/mix wrong: bands {b0} {b1}")

    expect([missing, "-o", out], 1, missing, "No such file")
    expect([text, "-o", out], 1, text, "not a readable audio file")
    expect([empty, "-o", out], 1, empty, "empty file")
    expect([zero, "-o", out], 1, zero, "zero-length")
    expect([trunc, "-o", out], 1, trunc)
    expect([short, "-o", out], 1, short, "shorter than one window", "4 frames")
    expect([good, "--channel", "3", "-o", out], 1, good, "channel 3 asked for, file has 1 channel")
    expect([stereo, "--channel", "2", "-o", out], 1, "channel 2 asked for, file has 2 channels")

    # --model takes the model's feature settings (the default model has the SPEC's).
    model = os.path.join(os.environ.get("SSAE_SOURCE_ROOT", "."), "src/model/default.safetensors")
    if os.path.exists(model):
        expect([good, "-o", out], 0)
        plain = np.load(out)
        expect([good, "--model", model, "-o", out], 0)
        if not np.array_equal(np.load(out), plain):
            fail("--model with the default model changed the frames")
        expect([good, "--model", text, "-o", out], 1, text)

    outdir = os.path.join(d, "many")
    p = expect([missing, text, good, empty, short, stereo, "-o", outdir], 1, missing, text, empty,
               short, "2 of 6 files written")
    for name in ("good.npy", "stereo.npy"):
        if not os.path.exists(os.path.join(outdir, name)):
            fail(f"run over several files did not write {name}")
    if os.path.exists(os.path.join(outdir, "short.npy")):
        fail("a failed file left an output behind")

    expect([good], 2, "no output")
    expect(["-o", out], 2, "no input")
    expect([good, "-o", out, "--channel", "left"], 2, "--channel")
    expect([good, "-o", out, "--n-fft", "1023"], 2, "n_fft")
    expect([good, "-o", out, "--bogus"], 2, "unknown option '--bogus'")
    p = subprocess.run([SSAE, "features", "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "usage: ssae features" in p.stdout,
          "--help does not print usage with status 0")

done()
