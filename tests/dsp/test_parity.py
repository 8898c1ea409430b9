"""Log-mel parity with torchaudio (SPEC section 1).

The oracle is torchaudio.transforms.MelSpectrogram configured as the SPEC
says, then 10*log10(x + 2.220446049250313e-16), computed in float64 (the
filterbank too: torch's default dtype is set to float64 before it is built).
float64 because torchaudio's own float32 pipeline is off from its float64
result by about 0.001 dB on a full-scale square wave: float rounding inside
the FFT leaves a floor ~140 dB under the peak, which shows on bins 80-90 dB
down. ssae computes the FFT, power and mel sums in double and must be within
0.001 dB on every bin within 90 dB of its frame's peak.

16 kHz signals go through ssae's log-mel directly (tests/dsp/dsp_tool).
48 kHz signals are written as 16-bit WAV files and go through `ssae
features` (libsoxr resampling to 16 kHz); the oracle gets the very samples
ssae resampled (dsp_tool load), so the check is on the features, not on
two different resamplers.
"""
import os
import subprocess
import sys
import tempfile
import wave

try:
    import numpy as np
    import torch
    import torchaudio
except ImportError as e:  # the oracle is missing: skip, never pass
    print(f"skip: {e}")
    sys.exit(77)

EPS = 2.220446049250313e-16
TOL_DB = 0.001
RANGE_DB = 90.0
DSP_TOOL = sys.argv[1]
SSAE = os.environ["SSAE"]
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)


def signals(sr, seconds=4.0, seed=1):
    rng = np.random.default_rng(seed)
    n = int(sr * seconds)
    t = np.arange(n) / sr
    white = rng.uniform(-0.5, 0.5, n)
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / sr)
    spec[1:] /= np.sqrt(f[1:])
    spec[0] = 0
    pink = np.fft.irfft(spec, n)
    pink *= 0.5 / np.abs(pink).max()
    f0, f1 = 50.0, 7900.0
    chirp = 0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t * t))
    machine = sum(0.3 / k * np.sin(2 * np.pi * 120 * k * t + k) for k in range(1, 9))
    machine += 0.02 * rng.standard_normal(n)
    silence = np.zeros(n)
    square = np.where(np.sin(2 * np.pi * 1000.3 * t) >= 0, 1.0, -1.0) * (32767 / 32768)
    return {"white": white, "pink": pink, "chirp": chirp, "tone+noise": machine,
            "silence": silence, "square": square}


def oracle(x, pad, dtype=torch.float64, **kw):
    args = dict(sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0.0,
                f_max=None, power=2.0, center=True, pad_mode=pad, norm="slaney",
                mel_scale="slaney")
    args.update(kw)
    mel = torchaudio.transforms.MelSpectrogram(**args).to(dtype)
    m = mel(torch.from_numpy(np.asarray(x, dtype=np.float32)).to(dtype))
    return (10 * torch.log10(m + EPS)).numpy().T


failures = []


def compare(name, ours, ref, tol=TOL_DB):
    if ours.shape != ref.shape:
        failures.append(f"{name}: shape {ours.shape}, torchaudio {ref.shape}")
        return
    mask = ref >= ref.max(axis=1, keepdims=True) - RANGE_DB
    err = np.abs(ours.astype(np.float64) - ref)[mask].max()
    status = "ok" if err <= tol else "FAIL"
    print(f"{status} {name}: {ours.shape[0]} frames, max |err| {err:.2e} dB "
          f"on {mask.sum()} bins within {RANGE_DB:g} dB of the frame peak")
    if err > tol:
        failures.append(f"{name}: max error {err:.3g} dB > {tol} dB")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")


def write_wav16(path, x, sr):
    pcm = np.clip(np.round(np.asarray(x) * 32768), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())


with tempfile.TemporaryDirectory() as tmp:
    inp, out = os.path.join(tmp, "in.npy"), os.path.join(tmp, "out.npy")
    # 16 kHz straight into the front end.
    for name, x in signals(16000).items():
        x = x.astype(np.float32)
        np.save(inp, x)
        for pad in ("reflect", "constant"):
            run([DSP_TOOL, "logmel", inp, out, f"pad_mode={pad}"])
            ours = np.load(out)
            compare(f"16k {name} {pad}", ours, oracle(x, pad))
            if name == "square":
                # torchaudio's float32 pipeline, for the record (not the oracle).
                r64 = oracle(x, pad)
                mask = r64 >= r64.max(axis=1, keepdims=True) - RANGE_DB
                d = np.abs(oracle(x, pad, torch.float32) - r64)[mask].max()
                print(f"   (torchaudio float32 vs float64 on this signal: {d:.2e} dB)")

    # Short streams: the start and end padding overlap (torchaudio refuses
    # reflect padding of a signal not longer than n_fft/2).
    rng = np.random.default_rng(5)
    for n, pads in ((100, ("constant",)), (513, ("reflect", "constant")),
                    (700, ("reflect", "constant")), (1500, ("reflect", "constant"))):
        x = (0.3 * rng.standard_normal(n)).astype(np.float32)
        np.save(inp, x)
        for pad in pads:
            run([DSP_TOOL, "logmel", inp, out, f"pad_mode={pad}"])
            compare(f"16k noise {n} samples {pad}", np.load(out), oracle(x, pad))

    # The other scale and norm, and a size that is not a power of two
    # (kiss_fftr in float: 0.01 dB on signals without deep spectral gaps).
    x = signals(16000)["chirp"].astype(np.float32)
    np.save(inp, x)
    run([DSP_TOOL, "logmel", inp, out, "mel_scale=htk", "mel_norm=none", "n_mels=40",
         "fmin=50", "fmax=7000"])
    compare("16k chirp htk/none 40 mels 50-7000 Hz", np.load(out),
            oracle(x, "reflect", mel_scale="htk", norm=None, n_mels=40, f_min=50.0,
                   f_max=7000.0))
    for name in ("white", "tone+noise"):
        x = signals(16000)[name].astype(np.float32)
        np.save(inp, x)
        run([DSP_TOOL, "logmel", inp, out, "n_fft=400", "hop_length=160"])
        compare(f"16k {name} n_fft 400 hop 160 (kiss_fftr)", np.load(out),
                oracle(x, "reflect", n_fft=400, hop_length=160), tol=0.01)

    # 48 kHz files through `ssae features` (resampled by ssae).
    for name, x in signals(48000, seed=2).items():
        wav = os.path.join(tmp, "in48.wav")
        write_wav16(wav, x, 48000)
        run([DSP_TOOL, "load", wav, inp, "16000", "0"])
        y = np.load(inp)[0]
        if y.shape[0] != 4 * 16000:
            failures.append(f"48k {name}: resampled to {y.shape[0]} samples, not 64000")
        for pad in ("reflect", "constant"):
            run([SSAE, "features", "--pad-mode", pad, wav, "-o", out])
            compare(f"48k->16k {name} {pad}", np.load(out), oracle(y, pad))

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all parity checks passed")
