"""GPU log-mel parity with torchaudio in float64 (SPEC section 1), as
tests/dsp/test_parity.py checks the CPU front end: the GPU front end's
frames (gpu/ssae_cuda_frontend.h, fed in random block sizes by
`test_cuda_frontend --logmel`) within 0.001 dB of
torchaudio.transforms.MelSpectrogram + 10*log10(x + eps) computed in
float64, on every bin within 90 dB of its frame's peak; on the dsp parity
signals (white, pink, chirp, tones and noise, silence, a full-scale square
wave), short streams, the HTK scale without norm, and n_fft 400 (a plain
DFT in double on the GPU: the same 0.001 dB, where the CPU's float
kiss_fftr is held to 0.01). Exits 77 without torch or a CUDA device.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchaudio
except ImportError as e:  # the oracle is missing: skip, never pass
    print(f"skip: {e}")
    sys.exit(77)

TOOL = sys.argv[1]
if subprocess.run([TOOL, "--probe"]).returncode != 0:
    print("skip: no CUDA device")
    sys.exit(77)

EPS = 2.220446049250313e-16
TOL_DB = 0.001
RANGE_DB = 90.0
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


def oracle(x, pad, **kw):
    args = dict(sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0.0,
                f_max=None, power=2.0, center=True, pad_mode=pad, norm="slaney",
                mel_scale="slaney")
    args.update(kw)
    mel = torchaudio.transforms.MelSpectrogram(**args).to(torch.float64)
    m = mel(torch.from_numpy(np.asarray(x, dtype=np.float32)).to(torch.float64))
    return (10 * torch.log10(m + EPS)).numpy().T


failures = []


def compare(name, ours, ref, tol=TOL_DB):
    if ours.shape != ref.shape:
        failures.append(f"{name}: shape {ours.shape}, torchaudio {ref.shape}")
        return
    mask = ref >= ref.max(axis=1, keepdims=True) - RANGE_DB
    err = np.abs(ours.astype(np.float64) - ref)[mask].max()
    print(f"{'ok' if err <= tol else 'FAIL'} {name}: {ours.shape[0]} frames, max |err| "
          f"{err:.2e} dB on {mask.sum()} bins within {RANGE_DB:g} dB of the frame peak")
    if err > tol:
        failures.append(f"{name}: max error {err:.3g} dB > {tol} dB")


def gpu_logmel(tmp, x, *keys):
    inp, out = os.path.join(tmp, "in.npy"), os.path.join(tmp, "out.npy")
    np.save(inp, np.asarray(x, dtype=np.float32))
    p = subprocess.run([TOOL, "--logmel", inp, out, *keys], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"test_cuda_frontend --logmel failed ({p.returncode}): {p.stderr}")
    return np.load(out)


with tempfile.TemporaryDirectory() as tmp:
    for name, x in signals(16000).items():
        for pad in ("reflect", "constant"):
            compare(f"GPU 16k {name} {pad}", gpu_logmel(tmp, x, f"pad_mode={pad}"),
                    oracle(x, pad))
    rng = np.random.default_rng(5)
    for n, pads in ((100, ("constant",)), (513, ("reflect", "constant")),
                    (700, ("reflect", "constant")), (1500, ("reflect", "constant"))):
        x = (0.3 * rng.standard_normal(n)).astype(np.float32)
        for pad in pads:
            compare(f"GPU 16k noise {n} samples {pad}", gpu_logmel(tmp, x, f"pad_mode={pad}"),
                    oracle(x, pad))
    x = signals(16000)["chirp"]
    compare("GPU 16k chirp htk/none 40 mels 50-7000 Hz",
            gpu_logmel(tmp, x, "mel_scale=htk", "mel_norm=none", "n_mels=40", "fmin=50",
                       "fmax=7000"),
            oracle(x, "reflect", mel_scale="htk", norm=None, n_mels=40, f_min=50.0,
                   f_max=7000.0))
    for name in ("white", "tone+noise", "square"):
        x = signals(16000)[name]
        compare(f"GPU 16k {name} n_fft 400 hop 160 (DFT in double)",
                gpu_logmel(tmp, x, "n_fft=400", "hop_length=160"),
                oracle(x, "reflect", n_fft=400, hop_length=160))

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all GPU parity checks passed")
