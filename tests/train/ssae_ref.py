"""Shared helpers of the training tests: the SPEC's PyTorch module, raw
float32 I/O for train_probe, the inputs and references the gradient and
Adam tests share, the end of a test, and the skip rule (exit 77 without
torch)."""
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


def run_ok(args, **kw):
    """run(), exiting 1 with the program's stderr where it fails."""
    r = run(args, **kw)
    if r.returncode:
        print(r.stderr)
        sys.exit(1)
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


def perturbed_model(M, Fr, L, S, n, seed):
    """The SPEC module initialised from seed, then given non-trivial
    LayerNorm parameters and a basis row of mixed scale; its flat
    parameters; and n log-mel-like windows from the same seed."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = SpectralShapeAutoencoder(M, Fr, L, S)
    vec = flat(m)
    vec = vec + rng.normal(0, 0.1, size=vec.shape).astype(np.float32) * (np.abs(vec) < 1e-6)
    load_flat(m, vec)
    return m, vec, logmel_like(rng, n, Fr, M)


def adam_inputs(rng, n, steps):
    """n parameters and `steps` gradients of them, of scales 1e-6 to 10."""
    p0 = rng.normal(0, 1, n).astype(np.float32)
    gs = (rng.normal(0, 1, (steps, n)) * np.logspace(-6, 1, n)).astype(np.float32)
    return p0, gs


def torch_adam(p0, gs, lr, wd):
    """The parameters after torch.optim.Adam's steps (betas 0.9, 0.999, eps
    1e-8, as train_probe's adam commands are given) on the gradients gs."""
    t = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.Adam([t], lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    for g in gs:
        t.grad = torch.from_numpy(g.copy())
        opt.step()
    return t.detach().numpy()


def probe_adam(probe_exe, tmp, mode, p0, gs, lr, wd, env=None):
    """train_probe's adam or cuda_adam: the parameters p0 after a step on
    each gradient of gs (betas and eps as torch_adam's); env: the probe's
    environment (None: this one's)."""
    pf, gf, of = (os.path.join(tmp, f) for f in ("p", "g", "o"))
    write(pf, p0)
    write(gf, gs)
    run_ok([probe_exe, mode, lr, 0.9, 0.999, 1e-8, wd, len(gs), pf, gf, of], env=env)
    return read(of)


def finish(fails):
    """The end of a test: the failures, exit status 1 if any."""
    if fails:
        print("FAIL:\n  " + "\n  ".join(fails))
        sys.exit(1)
    print("ok")
