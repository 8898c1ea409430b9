"""Shared helpers of the training tests: the SPEC's PyTorch module, raw
float32 I/O for train_probe, and the skip rule (exit 77 without torch)."""
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn  # noqa: F401  (re-exported to the tests)
except ImportError as e:  # the oracle is absent: skip, never pass
    print("skip: needs torch and numpy (%s)" % e)
    sys.exit(77)

NAMES = ["slice_encoder.0.weight", "slice_encoder.0.bias",
         "slice_encoder.1.weight", "slice_encoder.1.bias", "global_basis",
         "bottleneck_mlp.0.weight", "bottleneck_mlp.0.bias",
         "bottleneck_mlp.1.weight", "bottleneck_mlp.1.bias",
         "slice_decoder.0.weight", "slice_decoder.0.bias"]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from ssae_torch import SpectralShapeAutoencoder  # noqa: E402,F401  (the SPEC module, one copy)

def flat(model):
    sd = model.state_dict()
    return np.concatenate([sd[k].detach().cpu().numpy().astype(np.float32).ravel() for k in NAMES])


def load_flat(model, vec):
    sd = model.state_dict()
    i = 0
    new = {}
    for k in NAMES:
        n = sd[k].numel()
        new[k] = torch.from_numpy(np.asarray(vec[i:i + n], dtype=np.float32).reshape(sd[k].shape).copy())
        i += n
    assert i == len(vec), (i, len(vec))
    model.load_state_dict(new)


def split(model, vec):
    out, i = {}, 0
    for k in NAMES:
        n = model.state_dict()[k].numel()
        out[k] = vec[i:i + n]
        i += n
    return out


def probe():
    """The train_probe program: first argument (meson passes it) or
    $SSAE_TRAIN_PROBE."""
    p = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SSAE_TRAIN_PROBE")
    if not p or not os.path.exists(p):
        print("usage: %s TRAIN_PROBE (run through meson test)" % sys.argv[0])
        sys.exit(1)
    return p


def run(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    return r


def write(path, arr):
    np.asarray(arr, dtype=np.float32).tofile(path)


def read(path):
    return np.fromfile(path, dtype=np.float32)


def logmel_like(rng, n, frames, n_mels):
    """Windows on the scale of real log-mel frames (about -100 ... +20 dB):
    a smooth spectral shape per window plus noise."""
    base = -60 + 25 * np.sin(np.linspace(0, 3, n_mels))[None, None, :]
    shift = rng.normal(0, 8, size=(n, 1, 1))
    x = base + shift + rng.normal(0, 6, size=(n, frames, n_mels))
    return np.clip(x, -100, 20).reshape(n, frames * n_mels).astype(np.float32)
