"""Machine-like test sounds: a motor hum (harmonics of a slowly wandering
fundamental, a resonance, broadband noise) for normal operation; anomalies
add clicks, a squeal, or a shift of the harmonic balance."""
import os
import wave

import numpy as np

SR = 16000


def write_wav(path, x, sr=SR):
    x = np.clip(np.asarray(x), -1, 1 - 1 / 32768)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((x * 32768).astype("<i2").tobytes())


def normal(rng, seconds, kind=None, strength=1.0):
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = 118 + rng.normal(0, 2.0)
    wob = 1 + 0.004 * np.sin(2 * np.pi * rng.uniform(0.2, 0.6) * t + rng.uniform(0, 6))
    phase = 2 * np.pi * f0 * np.cumsum(wob) / SR
    x = np.zeros(n)
    amps = [1.0, 0.6, 0.45, 0.3, 0.25, 0.15, 0.12, 0.08, 0.06, 0.05]
    for k, a in enumerate(amps, 1):
        x += a * (1 + rng.normal(0, 0.05)) * np.sin(k * phase + rng.uniform(0, 6))
    noise = rng.normal(0, 1, n)
    # a resonance around 1.8 kHz shaped from the noise
    res = np.convolve(noise, np.hanning(9) * np.cos(2 * np.pi * 1800 / SR * np.arange(9)), "same")
    x = 0.08 * x + 0.01 * noise + 0.01 * res
    if kind == "clicks":
        for c in rng.uniform(0, seconds - 0.05, size=int(seconds * 5)):
            i = int(c * SR)
            m = min(200, n - i)
            x[i:i + m] += 0.25 * strength * rng.normal(0, 1, m) * np.exp(-np.arange(m) / 30)
    elif kind == "squeal":
        f = rng.uniform(2500, 4500)
        x += 0.012 * strength * np.sin(2 * np.pi * f * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.7 * t))
    elif kind == "shift":
        # a worn bearing: odd harmonics grow, level up
        x *= 1 + 0.3 * strength
        for k in (3, 5, 7):
            x += 0.03 * strength * np.sin(k * phase * 1.02 + rng.uniform(0, 6))
    return x


def auc(neg, pos):
    neg, pos = np.asarray(neg), np.asarray(pos)
    gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return gt / (len(neg) * len(pos))


def make_set(tmp, strength=0.3, seed=11):
    """The training tests' data, the same bytes for the same seed: 10 normal
    2 s clips in tmp/train, 10 normal and 12 anomalous (clicks, squeal,
    shift in turn) held-out clips. Returns (train_dir, normal, anomalous)."""
    rng = np.random.default_rng(seed)
    train_dir = os.path.join(tmp, "train")
    os.makedirs(train_dir)
    for i in range(10):
        write_wav(os.path.join(train_dir, "n%02d.wav" % i), normal(rng, 2.0))
    test_norm, test_anom = [], []
    for i in range(10):
        p = os.path.join(tmp, "tn%d.wav" % i)
        write_wav(p, normal(rng, 2.0))
        test_norm.append(p)
    for i, kind in enumerate(["clicks", "squeal", "shift"] * 4):
        p = os.path.join(tmp, "ta%d.wav" % i)
        write_wav(p, normal(rng, 2.0, kind, strength))
        test_anom.append(p)
    return train_dir, test_norm, test_anom
