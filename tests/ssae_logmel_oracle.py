"""The log-mel oracle of SPEC section 1 for the CPU and GPU parity tests
(tests/dsp/test_parity.py, tests/gpu/test_gpu_parity.py):
torchaudio.transforms.MelSpectrogram configured as the SPEC says, then
10*log10(x + eps), in float64 (importing this sets torch's default dtype to
float64, so the filterbank is built in float64 too); the test signals; and
compare(), which holds a result to the oracle on every bin within RANGE_DB
of its frame's peak and appends what fails to `failures`. Imports numpy,
torch and torchaudio: a test imports it inside its ImportError guard."""
import numpy as np
import torch
import torchaudio

EPS = 2.220446049250313e-16
TOL_DB = 0.001
RANGE_DB = 90.0
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)

failures = []


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
