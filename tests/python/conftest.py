"""Shared fixtures: the float64 oracle (tools/ssae_torch.py, the SPEC module),
log-mel-scale inputs from generated audio, WAV files, the ssae program."""
import os
import sys
import warnings
import wave

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.environ.get("SSAE_SOURCE_ROOT", "."), "tools"))
sys.path.insert(0, os.path.join(os.environ.get("SSAE_SOURCE_ROOT", "."), "tests"))
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


def check_reconstruction_loss(m, ref, x):
    """m.reconstruction_loss against mse_loss of the float64 module: the
    fused pass (its own autograd node), loss and every parameter's gradient
    within 1e-4 (the oracle: ref, the float64 SPEC module with m's
    weights), an upstream gradient other than 1 scaling them; the
    unfused cases (x wanting its gradient, no_grad, an empty batch) equal
    mse_loss(m(x), x)."""
    dev = x.device
    x64 = x.detach().cpu().double().reshape(-1, 320)
    m.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = m.reconstruction_loss(x)
        assert type(loss.grad_fn).__name__ == "_ReconLossBackward"
        assert loss.shape == () and loss.device == dev and loss.dtype == torch.float32
        (2.5 * loss).backward()
    check_loss_grads(m, loss, ref, x64, scale=2.5)
    # the input's gradient too: mse_loss(m(x), x) on the module's kernels
    xg = x.detach().clone().requires_grad_(True)
    xr = x64.clone().requires_grad_(True)
    lg = m.reconstruction_loss(xg)
    assert type(lg.grad_fn).__name__ == "MseLossBackward0"
    lg.backward()
    torch.nn.functional.mse_loss(ref(xr), xr).backward()
    assert rel_l2(xg.grad.cpu().reshape(-1, 320), xr.grad) <= 1e-4
    with torch.no_grad():
        xf = x.reshape(-1, 320)
        assert torch.equal(m.reconstruction_loss(x), torch.nn.functional.mse_loss(m(xf), xf))
    with warnings.catch_warnings(record=True):  # mean of an empty tensor
        e = m.reconstruction_loss(x[:0])
    assert torch.isnan(e)


def check_reconstruction_backward(m, x):
    """m.reconstruction_backward(x) against reconstruction_loss(x) and
    backward() on the same module: the loss and every gradient the same
    bits, no graph on the loss; a second call adds into .grad as backward
    does; a parameter that wants no gradient gets none (the others the
    same); x wanting its own gradient gets it (the unfused path)."""
    m.zero_grad(set_to_none=True)
    loss = m.reconstruction_loss(x)
    loss.backward()
    want_loss = loss.detach().clone()
    want = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = m.reconstruction_backward(x)
    assert got.grad_fn is None and not got.requires_grad and got.device == x.device
    assert torch.equal(got, want_loss)
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, want[n]), n
    m.reconstruction_backward(x)
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, want[n] + want[n]), n
    m.zero_grad(set_to_none=True)
    m.global_basis.requires_grad_(False)
    try:
        m.reconstruction_backward(x)
        assert m.global_basis.grad is None
        for n, p in m.named_parameters():
            if n != "global_basis":
                assert torch.equal(p.grad, want[n]), n
    finally:
        m.global_basis.requires_grad_(True)
    m.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_(True)
    lg = m.reconstruction_backward(xg)
    assert xg.grad is not None and lg.grad_fn is None
    assert abs(float(lg) - float(want_loss)) <= 1e-6 * float(want_loss)
    for n, p in m.named_parameters():
        assert rel_l2(p.grad.cpu(), want[n].cpu()) <= 1e-5, n


def check_loss_grads(m, loss, ref, x_ref, scale=1.0):
    """m's loss (its backward done, the gradients scaled by scale) against
    mse_loss(ref(x_ref), x_ref): the value within 1e-5, every parameter's
    gradient within 1e-4 (relative)."""
    ref.zero_grad()
    want = torch.nn.functional.mse_loss(ref(x_ref), x_ref)
    want.backward()
    lv, wv = float(loss.detach()), float(want.detach())
    assert abs(lv - wv) <= 1e-5 * wv, (lv, wv)
    got = dict(m.named_parameters())
    for name, p in ref.named_parameters():
        err = rel_l2(got[name].grad.cpu() / scale, p.grad.cpu())
        assert err <= 1e-4, (name, err)


def loss_after_failure(m, x):
    """m.reconstruction_loss(x) and its backward with the next kernel call
    failing (the test hook), gradients cleared first: (the loss, the
    RuntimeWarnings' messages)."""
    m.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m.fail_next()
        loss = m.reconstruction_loss(x)
        loss.backward()
    return loss, [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]


def check_untracked_changes(m, x):
    """Parameters changed in place through .data (which PyTorch's version
    counters do not record) or replaced by a non-contiguous view are the
    values m's next call computes with: the evaluation forward (warmed up
    on the old values first), the training forward and backward, the fused
    loss and its gradients, each against the float64 SPEC module given the
    same values. x: windows on m's device."""
    import ssae_torch

    def ref():
        r = ssae_torch.SpectralShapeAutoencoder(n_mels=m.n_mels, frames=m.frames,
                                                latent_dim=m.latent_dim,
                                                slice_latent_dim=m.slice_latent_dim)
        r.load_state_dict({k: v.detach().cpu().contiguous() for k, v in m.state_dict().items()})
        return r.double()

    x64 = x.detach().cpu().double()
    with torch.no_grad():
        for _ in range(3):
            m(x)
    m.zero_grad(set_to_none=True)
    m.reconstruction_loss(x).backward()
    versions = [p._version for p in m.parameters()]
    gen = torch.Generator().manual_seed(5)
    for p in m.parameters():
        p.data.add_((torch.randn(p.shape, generator=gen) * 0.05).to(p.device))
    assert [p._version for p in m.parameters()] == versions  # no trace left there
    with torch.no_grad():
        y = m(x)
        assert rel_l2(y.cpu(), ref()(x64)) <= 1e-6
    # a square weight's .data replaced by its transpose: a view, not contiguous
    w = m.slice_encoder[1].weight
    w.data = w.data.t()
    assert not w.is_contiguous()
    with torch.no_grad():
        y = m(x)
        assert rel_l2(y.cpu(), ref()(x64)) <= 1e-6
    w.data = w.data.contiguous()
    # training: the module's forward and backward, then the fused loss
    for p in m.parameters():
        p.data.mul_(1.02)
    m.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(m(x), x)
    loss.backward()
    check_loss_grads(m, loss, ref(), x64)
    for p in m.parameters():
        p.data.mul_(0.98)
    m.zero_grad(set_to_none=True)
    loss = m.reconstruction_loss(x)
    loss.backward()
    check_loss_grads(m, loss, ref(), x64)
    assert m.uses_kernel
