"""Shared fixtures: the float64 oracle (tools/ssae_torch.py, the SPEC module),
log-mel-scale inputs from generated audio, WAV files, the ssae program."""
import os
import sys
import wave

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.environ.get("SSAE_SOURCE_ROOT", "."), "tools"))
import ssae_torch  # noqa: E402

import ssae  # noqa: E402

SOURCE = os.environ.get("SSAE_SOURCE_ROOT", ".")
DEFAULT_MODEL = os.path.join(SOURCE, "src", "model", "default.safetensors")


def rel_l2(a, b):
    a = torch.as_tensor(np.asarray(a) if not isinstance(a, torch.Tensor) else a).double()
    b = torch.as_tensor(np.asarray(b) if not isinstance(b, torch.Tensor) else b).double()
    return float((a - b).norm() / b.norm())


def signal(seconds=4.0, sr=16000, seed=0):
    """Tones, noise, a click and digital silence: log-mel inputs of real
    scale (about -150 ... +20 dB)."""
    rng = np.random.RandomState(seed)
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 1234 * t ** 1.1)
    x += 0.05 * rng.randn(len(t))
    x[len(t) // 2:len(t) // 2 + 20] += 0.8
    x[-sr // 2:] = 0.0
    return np.clip(x, -1, 32767 / 32768)


def write_wav(path, x, sr=16000):
    pcm = np.round(np.asarray(x) * 32768).clip(-32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768.0


def frames_to_windows(frames, f):
    t, m = frames.shape
    idx = np.arange(t - f + 1)[:, None] + np.arange(f)[None, :]
    return np.ascontiguousarray(frames[idx].reshape(t - f + 1, f * m))


@pytest.fixture(scope="session")
def logmel_frames():
    return ssae.logmel(signal().astype(np.float32))


@pytest.fixture(scope="session")
def windows(logmel_frames):
    return frames_to_windows(logmel_frames, 5)


@pytest.fixture(scope="session")
def random_model_path(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("m") / "random.safetensors")
    ssae_torch.save_model(ssae_torch.make_model(seed=3), p)
    return p


@pytest.fixture(params=["default", "random"])
def model_path(request, random_model_path):
    return DEFAULT_MODEL if request.param == "default" else random_model_path


def oracle(path):
    return ssae_torch.load_model(path, dtype=torch.float64)[0]
