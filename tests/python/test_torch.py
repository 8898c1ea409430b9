"""ssae.torch.SpectralShapeAutoencoder against the SPEC module
(tools/ssae_torch.py): forward within SPEC section 2's tolerances of
float64, gradients of every parameter and of the input within 1e-4 of
autograd in float64, the fused reconstruction loss's too, 200 Adam steps
(with either loss) ending at the plain module's loss,
model files both ways, fallbacks (library absent, kernel failure) with one
warning, bad input, parameters changed without a trace (.data)."""
import warnings

import numpy as np
import pytest
import torch

import ssae
import ssae._lib
import ssae._torch_net
import ssae.torch as st
import ssae_torch
from conftest import (DEFAULT_MODEL, check_loss_grads, check_reconstruction_backward,
                      check_reconstruction_loss, check_untracked_changes, loss_after_failure,
                      oracle, rel_l2)


def pair(seed=0, path=None):
    """(drop-in module, float64 SPEC module) with the same weights."""
    if path is not None:
        m = st.SpectralShapeAutoencoder.from_file(path)
    else:
        torch.manual_seed(seed)
        m = st.SpectralShapeAutoencoder()
    ref = ssae_torch.SpectralShapeAutoencoder()
    ref.load_state_dict(m.state_dict())
    return m, ref.double()


def runtime_warnings(rec):
    return [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]


def test_same_interface():
    m = st.SpectralShapeAutoencoder(n_mels=32, frames=3, latent_dim=8, slice_latent_dim=16)
    ref = ssae_torch.SpectralShapeAutoencoder(n_mels=32, frames=3, latent_dim=8,
                                              slice_latent_dim=16)
    assert [(k, v.shape) for k, v in m.state_dict().items()] == \
        [(k, v.shape) for k, v in ref.state_dict().items()]
    ref.load_state_dict(m.state_dict())
    x = torch.randn(7, 96) * 20 - 50
    with torch.no_grad():
        assert rel_l2(m(x), ref.double()(x.double())) <= 1e-6


@pytest.mark.parametrize("which", ["default", "random"])
def test_forward_vs_float64(which, windows):
    m, ref = pair(path=DEFAULT_MODEL) if which == "default" else pair(seed=1)
    x = torch.from_numpy(windows)
    with torch.no_grad():
        y = m(x)
        y_ref = ref(x.double())
    assert m.uses_kernel
    assert rel_l2(y, y_ref) <= 1e-6
    s = ((y.double() - x.double()) ** 2).mean(1)
    s_ref = ((y_ref - x.double()) ** 2).mean(1)
    assert float(((s - s_ref).abs() / s_ref).max()) <= 1e-5
    assert tuple(m(x.view(-1, 5, 64)).shape) == (len(x), 320)


def test_gradients_vs_float64(windows):
    m, ref = pair(seed=2)
    x = torch.from_numpy(windows[:300]).clone().requires_grad_(True)
    x64 = x.detach().double().requires_grad_(True)
    g = torch.Generator().manual_seed(5)
    up = torch.randn(x.shape, generator=g)
    y = m(x)
    assert type(y.grad_fn).__name__ != "AddmmBackward0"  # the kernel, not plain ops
    (y * up).sum().backward()
    (ref(x64) * up.double()).sum().backward()
    got = dict(m.named_parameters())
    for name, p in ref.named_parameters():
        err = rel_l2(got[name].grad, p.grad)
        assert err <= 1e-4, (name, err)
    assert rel_l2(x.grad, x64.grad) <= 1e-4
    # the MSE loss as training uses it, input without gradient
    m.zero_grad()
    ref.zero_grad()
    xs = x.detach()
    torch.nn.functional.mse_loss(m(xs), xs).backward()
    torch.nn.functional.mse_loss(ref(xs.double()), xs.double()).backward()
    for name, p in ref.named_parameters():
        assert rel_l2(got[name].grad, p.grad) <= 1e-4, name


class _Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, w):
        return w * self.k


def test_parametrized_weight(windows):
    """A weight under torch.nn.utils.parametrize (its tensor computed, not
    in the module's parameter dictionary): the kernels get the computed
    tensor, and the gradient reaches the parametrization's original."""
    from torch.nn.utils import parametrize
    m, ref = pair(seed=6)
    parametrize.register_parametrization(m.slice_decoder[0], "weight", _Scale(0.5))
    parametrize.register_parametrization(ref.slice_decoder[0], "weight", _Scale(0.5))
    x = torch.from_numpy(windows[:200])
    with torch.no_grad():
        assert rel_l2(m(x), ref(x.double())) <= 1e-6
    y = m(x)
    assert type(y.grad_fn).__name__ != "AddmmBackward0"  # the kernel, not plain ops
    torch.nn.functional.mse_loss(y, x).backward()
    torch.nn.functional.mse_loss(ref(x.double()), x.double()).backward()
    got = m.slice_decoder[0].parametrizations.weight.original.grad
    want = ref.slice_decoder[0].parametrizations.weight.original.grad
    assert rel_l2(got, want) <= 1e-4


def test_backward_from_kept_activations(windows, monkeypatch):
    """The training forward keeps its activations; the backward from them
    equals the backward that runs the forward again, bit for bit, and the
    training forward is within SPEC accuracy of the float64 module."""
    m, ref = pair(seed=9)
    net = st._Net.get(m._dims())
    x = torch.from_numpy(windows[:100])  # 4 chunks, the last one partial
    p = m._params()
    y, act = net.forward_train(x, p)
    y_kept = y.clone()
    with torch.no_grad():
        assert rel_l2(y, ref(x.double())) <= 1e-6
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    dx1, g1 = net.backward(x, dy, p, True, act)
    dx2, g2 = net.backward(x, dy, p, True)
    assert torch.equal(dx1, dx2)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    # the module's autograd path keeps them too (and a second backward
    # through the same graph runs the forward again)
    y = m(x)
    (y * dy).sum().backward(retain_graph=True)
    first = [q.grad.clone() for q in p]
    (y * dy).sum().backward()
    for a, q in zip(first, p):
        assert torch.allclose(q.grad, 2 * a, rtol=1e-6, atol=0)
    # a batch too large to keep them (here: any): nothing kept, the
    # backward recomputes, the same bits
    m.zero_grad()
    monkeypatch.setattr(ssae._torch_net, "KEEP_ACTIVATIONS_BYTES", 0)
    y0, act0 = net.forward_train(x, p)
    assert act0 is None and torch.equal(y0, y_kept)
    (m(x) * dy).sum().backward()
    for a, q in zip(first, p):
        assert torch.equal(q.grad, a)


def test_reconstruction_loss_vs_float64(windows):
    m, ref = pair(seed=11)
    check_reconstruction_loss(m, ref, torch.from_numpy(windows[:300]))
    # (n, F, M) input; a batch too large to keep the activations
    x = torch.from_numpy(np.tile(windows, (41, 1))[:5003])
    assert x.numel() * 4 * 6 > ssae._torch_net.KEEP_ACTIVATIONS_BYTES
    check_reconstruction_loss(m, ref, x.view(-1, 5, 64))


def test_reconstruction_loss_falls_back(windows):
    """A kernel failure in the fused pass: one warning, the module goes on
    in plain PyTorch, the same loss and gradients."""
    m, _ = pair(seed=12)
    plain = ssae_torch.SpectralShapeAutoencoder()
    plain.load_state_dict(m.state_dict())
    x = torch.from_numpy(windows[:100])
    m.reconstruction_loss(x)  # warm
    loss, msgs = loss_after_failure(m, x)
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert not m.uses_kernel and type(loss.grad_fn).__name__ == "MseLossBackward0"
    check_loss_grads(m, loss, plain, x)


def test_reconstruction_backward(windows):
    """The fused step without autograd: reconstruction_loss and backward's
    loss and gradients, bit for bit; after a kernel failure, one warning
    and the plain module's loss and gradients."""
    m, _ = pair(seed=14)
    check_reconstruction_backward(m, torch.from_numpy(windows[:300]))
    plain = ssae_torch.SpectralShapeAutoencoder()
    plain.load_state_dict(m.state_dict())
    x = torch.from_numpy(windows[:100])
    m.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m.fail_next()
        loss = m.reconstruction_backward(x)
    msgs = [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert not m.uses_kernel and loss.grad_fn is None
    check_loss_grads(m, loss, plain, x)


def test_untracked_parameter_changes(windows):
    """Parameters changed through .data (no version bump) or replaced by a
    non-contiguous view: the next call computes with their new values."""
    m, _ = pair(seed=21)
    check_untracked_changes(m, torch.from_numpy(windows[:200]))


def mse_step(model, xb):
    return torch.nn.functional.mse_loss(model(xb), xb)


def fused_step(model, xb):
    return model.reconstruction_loss(xb)


def train(model, data, steps=200, batch=128, seed=0, loss_of=mse_step):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    loss = None
    for _ in range(steps):
        idx = torch.randint(0, len(data), (batch,), generator=g)
        xb = data[idx]
        loss = loss_of(model, xb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(data), data))


def test_adam_training_matches_plain_module(windows):
    """The drop-in module (with mse_loss, and with its fused loss) trained
    for 200 Adam steps ends at the loss of the plain module in float64
    within 1e-3, on the mean over six batch orders. One run alone is
    chaotic at that level in any float32 arithmetic: moving the float64
    module's starting parameters by 1e-7 relative (float32's rounding)
    moves its final loss over 9e-4, and PyTorch's own module in float32
    ends 1.9e-3 from float64 on the first order, while the kernels'
    gradients are within 1e-6 of float64 at every step (the tests above).
    A kernel with a bias, not rounding, moves the mean as well."""
    data = torch.from_numpy(windows)
    torch.manual_seed(7)
    m0 = st.SpectralShapeAutoencoder()
    with torch.no_grad():
        start = float(torch.nn.functional.mse_loss(m0(data), data))

    def copy(kind):
        m = kind()
        m.load_state_dict(m0.state_dict())
        return m

    got = {"mse_loss": [], "fused loss": [], "float64": []}
    for order in range(6):
        m, fused = copy(st.SpectralShapeAutoencoder), copy(st.SpectralShapeAutoencoder)
        got["mse_loss"].append(train(m, data, seed=order))
        got["fused loss"].append(train(fused, data, seed=order, loss_of=fused_step))
        got["float64"].append(train(copy(ssae_torch.SpectralShapeAutoencoder).double(),
                                    data.double(), seed=order))
        assert m.uses_kernel and fused.uses_kernel
    ref = float(np.mean(got["float64"]))
    for kind in ("mse_loss", "fused loss"):
        assert max(got[kind]) < 0.5 * start, (kind, got[kind], start)  # it trained
        mean = float(np.mean(got[kind]))
        assert abs(mean - ref) <= 1e-3 * ref, (kind, got[kind], got["float64"])


def test_model_files(tmp_path):
    m = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL)
    assert not m.training
    ref, meta = ssae_torch.load_model(DEFAULT_MODEL)
    for k, v in ref.state_dict().items():
        assert torch.equal(m.state_dict()[k], v), k
    assert float(meta["threshold"]) == pytest.approx(float(m.ssae_metadata["threshold"]))
    out = str(tmp_path / "copy.safetensors")
    m.save(out, {"provenance": "test"})
    back, meta2 = ssae_torch.load_model(out)
    for k, v in back.state_dict().items():
        assert torch.equal(m.state_dict()[k], v), k
    assert meta2["provenance"] == "test"
    assert float(meta2["threshold"]) == pytest.approx(float(meta["threshold"]))
    assert ssae.Model(out).threshold == pytest.approx(ssae.Model().threshold)
    # a module of other dimensions, written by PyTorch's side, read by ssae
    small = ssae_torch.make_model(32, 3, 8, 16, seed=1)
    p = str(tmp_path / "small.safetensors")
    ssae_torch.save_model(small, p, {"n_mels": "32", "frames": "3"})
    s = st.SpectralShapeAutoencoder.from_file(p)
    assert (s.n_mels, s.frames, s.latent_dim, s.slice_latent_dim) == (32, 3, 8, 16)
    with pytest.raises(OSError, match="nothere"):
        st.SpectralShapeAutoencoder.from_file(str(tmp_path / "nothere.safetensors"))
    # no threshold (a fresh module's file, a silent training set's): read and
    # saved again, it stays none
    fresh = str(tmp_path / "fresh.safetensors")
    st.SpectralShapeAutoencoder().save(fresh)
    again = str(tmp_path / "again.safetensors")
    st.SpectralShapeAutoencoder.from_file(fresh).save(again)
    assert ssae.Model(again).threshold is None
    assert ssae_torch.load_model(again)[1]["threshold"] == "none"
    with pytest.raises(ValueError, match="threshold 'nan' is not a non-negative number"):
        s.save(str(tmp_path / "nan-threshold.safetensors"), {"threshold": "nan"})
    with pytest.raises(ValueError, match="global_basis holds NaN"):
        with torch.no_grad():
            m.global_basis[0, 0] = float("nan")
        m.save(str(tmp_path / "nan.safetensors"))


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_kernel_failure_falls_back(where, windows):
    m, _ = pair(seed=3)
    plain = ssae_torch.SpectralShapeAutoencoder()
    plain.load_state_dict(m.state_dict())
    x = torch.from_numpy(windows[:100])
    for mod in (m, plain):
        mod.zero_grad()
    st.SpectralShapeAutoencoder.forward(m, x)  # warm the kernel
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        if where == "forward":
            m.fail_next()
        y = m(x)
        if where == "backward":
            m.fail_next()
        torch.nn.functional.mse_loss(y, x).backward()
        y2 = m(x)  # stays on PyTorch
        torch.nn.functional.mse_loss(y2, x).backward()
    torch.nn.functional.mse_loss(plain(x), x).backward()
    torch.nn.functional.mse_loss(plain(x), x).backward()
    msgs = runtime_warnings(rec)
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert not m.uses_kernel
    assert rel_l2(y2.detach(), plain(x).detach()) <= 1e-5
    got = dict(m.named_parameters())
    for name, p in plain.named_parameters():
        assert rel_l2(got[name].grad, p.grad) <= 1e-4, name


def test_library_absent(monkeypatch, windows):
    m, _ = pair(seed=4)
    x = torch.from_numpy(windows[:50])
    with torch.no_grad():
        want = m(x)
    monkeypatch.setenv("SSAE_LIBRARY", "/nonexistent/libssae.so")
    ssae._lib.reset()
    st._warned.discard("lib")
    try:
        m2, _ = pair(seed=4)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with torch.no_grad():
                a = m2(x)
                b = m2(x)
        msgs = runtime_warnings(rec)
        assert len(msgs) == 1 and "/nonexistent/libssae.so" in msgs[0], msgs
        assert not m2.uses_kernel
        assert rel_l2(a, want) <= 1e-5 and torch.equal(a, b)
        with pytest.raises(ssae.LibraryNotFound, match="nonexistent"):
            ssae.Model()
    finally:
        monkeypatch.delenv("SSAE_LIBRARY")
        ssae._lib.reset()
    assert ssae.library_available()


def test_bad_input():
    m = st.SpectralShapeAutoencoder()
    with pytest.raises(TypeError, match="float64"):
        m(torch.zeros(2, 320, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"shape \(2, 300\)"):
        m(torch.zeros(2, 300))
    with pytest.raises(ValueError, match="contiguous"):
        m(torch.zeros(320, 4).T)
    with pytest.raises(TypeError, match="ndarray"):
        m(np.zeros((2, 320), np.float32))
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            m(torch.zeros(2, 320, device="cuda"))
    # non-finite parameters: the kernel refuses them, the module says so and
    # goes on in PyTorch (NaN in, NaN out, as the SPEC module)
    with torch.no_grad():
        m.slice_decoder[0].bias[0] = float("inf")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = m(torch.zeros(2, 320))
    assert not torch.isfinite(y).all()
    assert any("not finite" in s for s in runtime_warnings(rec))


def test_float64_module_runs_plain_pytorch(windows):
    m, ref = pair(seed=6)
    m = m.double()
    x = torch.from_numpy(windows[:20]).double()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            assert rel_l2(m(x), ref(x)) <= 1e-12


@pytest.mark.skipif(not st._custom_op_available(), reason="torch < 2.4: no torch.library.custom_op")
def test_custom_op_compiles(windows):
    m, ref = pair(seed=8)
    x = torch.from_numpy(windows[:64])
    f = torch.compile(m, fullgraph=True)
    with torch.no_grad():
        assert rel_l2(f(x), ref(x.double())) <= 1e-6
    params = [p.detach() for p in m._params()]
    torch.library.opcheck(torch.ops.ssae.autoencoder.default, (x, params, [64, 5, 32, 64]))
    torch.library.opcheck(torch.ops.ssae.autoencoder_backward.default,
                          (x, torch.randn_like(x), params, [64, 5, 32, 64]))
    # a compiled training step: the op and its backward op in the graph
    xg = x.clone().requires_grad_(True)
    x64 = x.double().requires_grad_(True)
    up = torch.randn(x.shape, generator=torch.Generator().manual_seed(4))
    (f(xg) * up).sum().backward()
    (ref(x64) * up.double()).sum().backward()
    got = dict(m.named_parameters())
    for name, p in ref.named_parameters():
        assert rel_l2(got[name].grad, p.grad) <= 1e-4, name
    assert rel_l2(xg.grad, x64.grad) <= 1e-4
