"""CUDA tensors (skipped without a GPU; meson then reports skip): results
come back on the input's device within SPEC section 2's tolerances of the
float64 module; the kernel reads the tensor's own memory on the caller's
stream (a stream-ordered producer, the pointer the library saw, no wait);
the drop-in module forward and backward on CUDA (gradients within 1e-4 of
float64 autograd); the fallback under the CUDA failure hooks (same results,
one warning); the fused reconstruction loss on CUDA; mixed devices
refused."""
import warnings

import numpy as np
import pytest
import torch

import ssae
import ssae._lib
import ssae.torch as st
import ssae_torch
from conftest import (DEFAULT_MODEL, check_loss_grads, check_reconstruction_backward,
                      check_untracked_changes,
                      check_reconstruction_loss, loss_after_failure, oracle, rel_l2)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def has_entry_points():
    return ssae._lib.available() and ssae._lib.load().ssae_has_cuda_tensors


needs_entry_points = pytest.mark.skipif(not has_entry_points(),
                                        reason="this libssae has no device-pointer entry points")


def runtime_warnings(rec):
    return [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]


def score_twice(m, x):
    """Two scores of x by m and the runtime warnings they gave."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a = m.score(x)
        b = m.score(x)
    return a, b, runtime_warnings(rec)


def check_scores(got, x):
    """SPEC section 2 against the float64 module with the built-in model's
    weights."""
    ref = oracle(DEFAULT_MODEL)
    with torch.no_grad():
        x64 = torch.as_tensor(x).double().cpu()
        y_ref = ref(x64)
        s_ref = ((y_ref - x64) ** 2).mean(1)
    s = torch.as_tensor(got).double().cpu()
    assert float(((s - s_ref).abs() / s_ref).max()) <= 1e-5
    return y_ref


@needs_entry_points
def test_model_on_cuda_tensors(windows):
    m = ssae.Model(backend="cuda")
    x = torch.from_numpy(windows).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no host copy, no fallback
        s = m.score(x)
        y = m.reconstruct(x)
        s2, y2 = m.score_reconstruct(x.view(-1, 5, 64))
        frames = torch.from_numpy(np.ascontiguousarray(windows[:, :64])).cuda()
        f = m.score_frames(frames)
        empty = m.score_frames(frames[:3])
    assert s.device == x.device and y.device == x.device and f.device == x.device
    assert tuple(y2.shape) == (len(x), 5, 64) and tuple(empty.shape) == (0,)
    assert m.backend == "cuda"
    y_ref = check_scores(s, windows)
    assert rel_l2(y.cpu(), y_ref) <= 1e-6
    assert torch.equal(s2, s) and torch.equal(y2.reshape(y.shape), y)
    cpu = ssae.Model(backend="cpu")
    fc = cpu.score_frames(np.ascontiguousarray(windows[:, :64]))
    assert float(np.max(np.abs(f.cpu().numpy() - fc) / fc)) <= 1e-5
    # a view 4 bytes into its storage (the kernels read float4s: copied on
    # the device first)
    k = len(windows) - 1
    flat = x.reshape(-1)[1:1 + 320 * k]
    xv = flat.view(k, 320)
    assert xv.data_ptr() % 16 and xv.is_contiguous()
    sv = m.score(xv)
    check_scores(sv, xv.cpu().numpy())
    # a model on the CPU backend takes CUDA tensors through the host, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sc = cpu.score(x)
    assert sc.device == x.device
    assert float(((sc - s).abs() / sc).max()) <= 1e-5


@needs_entry_points
def test_in_place_on_callers_stream(windows):
    """A producer queued on a side stream is still running when the call
    returns: only a kernel ordered after it on that stream reads its data
    (another stream would read NaN), and the call did not wait for it."""
    lib = ssae._lib.load()
    m = ssae.Model(backend="cuda")
    src = torch.from_numpy(windows).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = torch.full_like(src, float("nan"))
        torch.cuda._sleep(200_000_000)  # well over 50 ms on any GPU
        x.copy_(src)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out, rec = m.score_reconstruct(x)
        busy = not side.query()
    side.synchronize()
    assert busy, "the call waited for the stream"
    assert lib.ssae_api_last_device_input() == x.data_ptr()
    check_scores(out, windows)
    assert torch.isfinite(rec).all()


@needs_entry_points
def test_model_math_3xtf32(windows):
    """The tensor-core kernel (math="3xtf32") at a throughput batch: SPEC
    section 2's tolerances like fp32."""
    xs = np.ascontiguousarray(np.tile(windows, (max(1, 8192 // len(windows) + 1), 1))[:8192])
    x = torch.from_numpy(xs).cuda()
    m = ssae.Model(backend="cuda", math="3xtf32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, y = m.score_reconstruct(x)
    assert m.math == "3xtf32" and m.backend == "cuda"
    y_ref = check_scores(s, xs)
    assert rel_l2(y.cpu(), y_ref) <= 1e-6
    with pytest.raises(ValueError, match="math"):
        ssae.Model(backend="cuda", math="bf16")


@needs_entry_points
def test_model_large_batches_on_cuda(windows):
    """Batches past the backend's buffer (65,536) and past one launch
    (1,048,576): every window scored, as the CPU scores it."""
    cpu = ssae.Model(backend="cpu")
    m = ssae.Model(backend="cuda")
    for n in (65536 * 3 + 5, (1 << 20) + 3):
        reps = n // len(windows) + 1
        xs = np.ascontiguousarray(np.tile(windows, (reps, 1))[:n])
        x = torch.from_numpy(xs).cuda()
        s = m.score(x).cpu().numpy()
        del x
        sc = cpu.score(xs)
        assert s.shape == (n,) and float(np.max(np.abs(s - sc) / sc)) <= 1e-5, n
    assert m.backend == "cuda"


@needs_entry_points
def test_module_eval_forward(windows):
    """An evaluation forward runs ssae.Model's inference kernels on weights
    folded on the device, reading the input in place, within SPEC section 2
    of float64, the same bits at every call with the same parameters (and
    as ssae.Model's, whose weights the host folded); changed parameters are
    used at the next call."""
    m = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL).cuda()
    ref = oracle(DEFAULT_MODEL)
    x = torch.from_numpy(windows).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            y1 = m(x)
            y2 = m(x)
    assert ssae._lib.load().ssae_api_last_device_input() == x.data_ptr()
    with torch.no_grad():
        x64 = x.cpu().double()
        y_ref = ref(x64)
    assert rel_l2(y1.cpu(), y_ref) <= 1e-6
    s = ((y1.cpu().double() - x64) ** 2).mean(1)
    s_ref = ((y_ref - x64) ** 2).mean(1)
    assert float(((s - s_ref).abs() / s_ref).max()) <= 1e-5
    assert torch.equal(y1, y2)
    assert torch.equal(y2, ssae.Model(backend="cuda").reconstruct(x))  # 122 windows: small_batch
    big = x.repeat(20, 1)  # 2,440 windows: warp_3xtf32
    with torch.no_grad():
        assert rel_l2(m(big), ssae.Model(backend="cuda", math="3xtf32").reconstruct(big)) <= 1e-6
    with torch.no_grad():
        m.slice_decoder[0].bias.add_(0.01)
        y3 = m(x)
        y4 = m(x)
    assert not torch.equal(y3, y2) and rel_l2(y3, y2) < 1e-2
    assert torch.equal(y3, y4)


@needs_entry_points
def test_untracked_parameter_changes_cuda(windows):
    """Parameters changed through .data (no version bump) or replaced by a
    non-contiguous view: the next call on CUDA tensors computes with them
    (evaluation forward, training forward and backward, fused loss)."""
    torch.manual_seed(22)
    m = st.SpectralShapeAutoencoder().cuda()
    check_untracked_changes(m, torch.from_numpy(windows[:300]).cuda())


OTHER_DIMS = dict(n_mels=40, frames=4, latent_dim=16, slice_latent_dim=24)


def has_parts_entry_point():
    return has_entry_points() and ssae._lib.load().ssae_has_cuda_parts


def unaligned_like(t):
    """A contiguous copy of t whose address is 4 bytes past a 16-byte
    boundary."""
    buf = torch.empty(t.numel() + 1, device=t.device)
    u = buf[1:].view(t.shape)
    u.copy_(t)
    assert u.data_ptr() % 16 != 0
    return u


@pytest.mark.skipif(not has_parts_entry_point(), reason="this libssae has no forward from pieces")
@pytest.mark.parametrize("dims", ["default", "other"])
def test_forward_from_parameter_pieces(dims, windows):
    """The evaluation forward from the parameters where they lie (the
    library gathers them: ssae_api_net_forward_cuda_parts) gives the bits
    of the forward from their flat vector: aligned pieces (float4 loads),
    a piece 4 bytes off (float loads), an input 4 bytes off (the training
    kernel's forward, after which the folded weights are made again), at
    the default and other dimensions; changes through .data are seen."""
    kw = {} if dims == "default" else OTHER_DIMS
    torch.manual_seed(31)
    m = st.SpectralShapeAutoencoder(**kw).cuda()
    win = m.frames * m.n_mels
    w = np.random.default_rng(3).normal(-60, 6, size=(150, win)).astype(np.float32)
    x = torch.from_numpy(w).cuda()
    net = st._Net(m._dims())

    def both(xi):
        ps = m._params()
        with torch.no_grad():
            y_parts = net._forward_cuda_parts(xi, ps)
            y_flat = net._forward_cuda(xi, ps, torch.cat([p.reshape(-1) for p in ps]))
        assert y_parts is not None
        return y_parts, y_flat

    # the basis normalised by the gather (after a change) as by k_update
    flat = lambda: torch.cat([p.reshape(-1) for p in m._params()])  # noqa: E731
    orig = m.global_basis.detach().clone()
    with torch.no_grad():
        y1 = net._forward_cuda(x, m._params(), flat())
        m.global_basis.data.mul_(1.25)
        net._forward_cuda(x, m._params(), flat())
        m.global_basis.data.copy_(orig)
        assert torch.equal(net._forward_cuda_parts(x, m._params()), y1)
    for xi in (x, x.repeat(10, 1)):  # small_batch; warp_3xtf32 (default dims)
        a, b = both(xi)
        assert torch.equal(a, b)
    before = both(x)[0]
    with torch.no_grad():
        m.global_basis.data.mul_(1.5)  # through .data: no version bump
        m.slice_decoder[0].bias.data.add_(0.02)
    a, b = both(x)
    assert torch.equal(a, b) and not torch.equal(a, before)
    m.slice_encoder[1].weight.data = unaligned_like(m.slice_encoder[1].weight.data)
    a, b = both(x)
    assert torch.equal(a, b)
    x_odd = unaligned_like(x)
    a, b = both(x_odd)
    assert torch.equal(a, b)
    with torch.no_grad():
        m.slice_encoder[0].weight.data.mul_(0.9)
    a, b = both(x)  # after the unaligned call: folded again
    assert torch.equal(a, b)
    with torch.no_grad():
        assert torch.equal(m(x), a)  # the module's own call


@pytest.mark.skipif(not has_parts_entry_point(), reason="this libssae has no forward from pieces")
def test_parts_entry_point_refusals(windows):
    """The C entry point refuses pieces that are not the model's parameters
    (a C caller's mistake; the package never makes them), naming the
    problem, and writes nothing."""
    import ctypes
    lib = ssae._lib.load()
    m = st.SpectralShapeAutoencoder().cuda()
    net = st._Net(m._dims())
    x = torch.from_numpy(windows[:10]).cuda()
    y = torch.zeros_like(x)
    ps = m._params()
    sizes = [p.numel() for p in ps]

    def call(tensors, counts, n=None):
        err = ssae._lib.errbuf()
        ptrs = (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])
        cnt = (ctypes.c_size_t * max(len(counts), 1))(*counts)
        rc = lib.ssae_api_net_forward_cuda_parts(net.h, ptrs, cnt,
                                                 len(tensors) if n is None else n,
                                                 x.data_ptr(), 10, y.data_ptr(), None, err)
        return rc, err.value.decode()

    rc, msg = call(ps[:-1], sizes[:-1])
    assert rc == ssae._lib.EBACKEND and "the pieces hold 19744 floats, the model has 19808" in msg
    rc, msg = call(ps, sizes[:-1] + [sizes[-1] + 4])
    assert rc == ssae._lib.EBACKEND and "more than" in msg
    rc, msg = call(ps[:-1] + [ps[-1].cpu()], sizes)
    assert rc == ssae._lib.EBACKEND and "parameter piece 10: host memory" in msg
    rc, msg = call(ps, sizes, n=0)
    assert rc == ssae._lib.EBACKEND and "0 parameter pieces" in msg
    rc, msg = call(ps * 2, sizes * 2)  # 22 pieces
    assert rc == ssae._lib.EARG and "22 parameter pieces (at most 16)" in msg
    torch.cuda.synchronize()
    assert not y.any()


def pair(seed, **dims):
    """(drop-in module, float64 SPEC module) with the same weights."""
    torch.manual_seed(seed)
    m = st.SpectralShapeAutoencoder(**dims)
    ref = ssae_torch.SpectralShapeAutoencoder(**dims)
    ref.load_state_dict(m.state_dict())
    return m, ref.double()


@needs_entry_points
@pytest.mark.parametrize("which", ["default", "random"])
def test_module_forward_on_cuda(which, windows):
    if which == "default":
        m = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL)
        ref = oracle(DEFAULT_MODEL)
    else:
        m, ref = pair(1)
    m = m.cuda()
    x = torch.from_numpy(windows).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            y = m(x)
        y_train = m.train()(x)  # the autograd path's forward
    assert y.device == x.device and m.uses_kernel
    assert ssae._lib.load().ssae_api_last_device_input() == x.data_ptr()
    with torch.no_grad():
        x64 = x.cpu().double()
        y_ref = ref(x64)
    assert rel_l2(y.cpu(), y_ref) <= 1e-6
    s = ((y.cpu().double() - x64) ** 2).mean(1)
    s_ref = ((y_ref - x64) ** 2).mean(1)
    assert float(((s - s_ref).abs() / s_ref).max()) <= 1e-5
    assert torch.equal(y_train.detach(), y)


@needs_entry_points
def test_module_gradients_on_cuda(windows):
    m, ref = pair(2)
    m = m.cuda()
    x = torch.from_numpy(windows[:300]).cuda().requires_grad_(True)
    x64 = x.detach().cpu().double().requires_grad_(True)
    g = torch.Generator().manual_seed(5)
    up = torch.randn(x.shape, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = m(x)
        assert type(y.grad_fn).__name__ == "_AutoencoderBackward"
        (y * up.cuda()).sum().backward()
    (ref(x64) * up.double()).sum().backward()
    got = dict(m.named_parameters())
    for name, p in ref.named_parameters():
        assert got[name].grad.device == x.device
        err = rel_l2(got[name].grad.cpu(), p.grad)
        assert err <= 1e-4, (name, err)
    assert rel_l2(x.grad.cpu(), x64.grad) <= 1e-4
    # the MSE loss as training uses it; a batch large enough for the
    # kernels' large window groups, no multiple of them, of more groups than
    # partial-gradient blocks (blocks take several); the input's gradient
    # too
    xs = torch.from_numpy(np.tile(windows, (41, 1))[:4999]).cuda().requires_grad_(True)
    xs64 = xs.detach().cpu().double().requires_grad_(True)
    m.zero_grad()
    ref.zero_grad()
    torch.nn.functional.mse_loss(m(xs), xs.detach()).backward()
    torch.nn.functional.mse_loss(ref(xs64), xs64.detach()).backward()
    for name, p in ref.named_parameters():
        assert rel_l2(got[name].grad.cpu(), p.grad) <= 1e-4, name
    assert rel_l2(xs.grad.cpu(), xs64.grad) <= 1e-4


@needs_entry_points
def test_module_training_forward_unaligned(windows):
    """The training forward takes the inference kernel for 16-byte aligned
    tensors and the training kernel's forward for others: both within SPEC
    section 2 of float64."""
    m, ref = pair(4)
    m = m.cuda()
    w = np.ascontiguousarray(np.tile(windows, (3, 1))[:333])
    n = w.shape[0]
    flat = torch.empty(n * 320 + 1, device="cuda")
    x_odd = flat[1:].view(n, 320)
    x_odd.copy_(torch.from_numpy(w).cuda())
    assert x_odd.data_ptr() % 16 != 0
    x = torch.from_numpy(w).cuda()
    assert x.data_ptr() % 16 == 0
    with torch.no_grad():
        y_ref = ref(x.cpu().double())
    for xi in (x, x_odd):
        y = m(xi)  # the parameters want gradients: the training forward
        assert y.grad_fn is not None
        assert rel_l2(y.detach().cpu(), y_ref) <= 1e-6


@needs_entry_points
def test_module_gradients_on_cuda_other_dims():
    """Dimensions other than the default: the general kernel (the default
    ones run on the tensor-core kernel), gradients within 1e-4 of float64
    autograd, groups that do not fill the last block."""
    m, ref = pair(3, **OTHER_DIMS)
    m = m.cuda()
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5003, 160, generator=g) * 12 - 40).cuda().requires_grad_(True)
    x64 = x.detach().cpu().double().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.nn.functional.mse_loss(m(x), x.detach()).backward()
    torch.nn.functional.mse_loss(ref(x64), x64.detach()).backward()
    got = dict(m.named_parameters())
    for name, p in ref.named_parameters():
        assert rel_l2(got[name].grad.cpu(), p.grad) <= 1e-4, name
    assert rel_l2(x.grad.cpu(), x64.grad) <= 1e-4


def has_loss_entry_point():
    return has_entry_points() and ssae._lib.load().ssae_has_cuda_loss


@pytest.mark.skipif(not has_loss_entry_point(), reason="this libssae has no fused loss")
@pytest.mark.parametrize("dims", ["default", "other"])
def test_reconstruction_loss_on_cuda(dims, windows):
    """The fused loss on CUDA tensors (the tensor-core kernel for the
    default dimensions, the trainer's for others): loss and gradients
    within 1e-4 of float64 autograd, on the input's own memory and the
    current stream; a batch of more groups than gradient blocks, no
    multiple of a group; a kernel failure falls back with one warning."""
    lib = ssae._lib.load()
    if dims == "default":
        m, ref = pair(13)
        x = torch.from_numpy(np.tile(windows, (41, 1))[:4999])
    else:
        m, ref = pair(13, **OTHER_DIMS)
        x = torch.randn(5003, 160, generator=torch.Generator().manual_seed(7)) * 12 - 40
    m = m.cuda()
    xc = x.cuda()
    if dims == "default":
        check_reconstruction_loss(m, ref, xc)
        check_reconstruction_loss(m, ref, xc[:300].view(-1, 5, 64))
        check_reconstruction_backward(m, xc)
        # an input 4 bytes past a 16-byte boundary: the kernel's copies of
        # it into shared memory (16-byte cp.async) take such rows by plain
        # loads; the same loss and gradients to fp32 accuracy
        m.zero_grad(set_to_none=True)
        la = m.reconstruction_backward(xc[:301])
        ga = {n: p.grad.clone() for n, p in m.named_parameters()}
        m.zero_grad(set_to_none=True)
        lu = m.reconstruction_backward(unaligned_like(xc[:301]))
        assert abs(lu.item() - la.item()) <= 1e-6 * abs(la.item())
        for n, p in m.named_parameters():
            assert rel_l2(p.grad.cpu(), ga[n].cpu()) <= 1e-6, n
    else:
        loss = m.reconstruction_loss(xc)
        assert type(loss.grad_fn).__name__ == "_ReconLossBackward"
        loss.backward()
        check_loss_grads(m, loss, ref, x.double())
    m.reconstruction_loss(xc)
    assert lib.ssae_api_last_device_input() == xc.data_ptr()
    # a failure: plain PyTorch from then on, the same loss
    loss, msgs = loss_after_failure(m, xc)
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert not m.uses_kernel
    check_loss_grads(m, loss, ref, x.double())


@needs_entry_points
def test_model_fallback_fail_next(windows):
    m = ssae.Model(backend="cuda")
    x = torch.from_numpy(windows).cuda()
    want = m.score(x)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m.fail_next()
        a = m.score(x)
        b, y = m.score_reconstruct(x)
    msgs = runtime_warnings(rec)
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert m.backend == "cpu"
    assert a.device == x.device and y.device == x.device
    assert float(((a - want).abs() / want).max()) <= 1e-5 and torch.equal(a, b)
    check_scores(a, windows)


@needs_entry_points
def test_model_fallback_cuda_fail_after(monkeypatch, windows):
    # run 1 is the start-up self-test; the device call is run 2: a real
    # CUDA error (an invalid launch configuration)
    monkeypatch.setenv("SSAE_CUDA_FAIL_AFTER", "1")
    m = ssae.Model(backend="cuda")
    x = torch.from_numpy(windows).cuda()
    a, b, msgs = score_twice(m, x)
    assert len(msgs) == 1 and "CUDA" in msgs[0], msgs
    assert m.backend == "cpu" and torch.equal(a, b)
    check_scores(a, windows)


@needs_entry_points
def test_module_fallback_on_cuda(windows):
    m, _ = pair(3)
    plain = ssae_torch.SpectralShapeAutoencoder()
    plain.load_state_dict(m.state_dict())
    m, plain = m.cuda(), plain.cuda()
    x = torch.from_numpy(windows[:100]).cuda()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = m(x)  # warm
        m.fail_next()
        torch.nn.functional.mse_loss(y, x).backward()  # the backward fails
        y2 = m(x)  # stays on PyTorch
    msgs = runtime_warnings(rec)
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert not m.uses_kernel
    torch.nn.functional.mse_loss(plain(x), x).backward()
    got = dict(m.named_parameters())
    for name, p in plain.named_parameters():
        assert rel_l2(got[name].grad.cpu(), p.grad.cpu()) <= 1e-4, name
    assert rel_l2(y2.detach().cpu(), plain(x).detach().cpu()) <= 1e-5


def test_logmel_of_cuda_samples(logmel_frames):
    from conftest import signal
    x = torch.from_numpy(signal().astype(np.float32)).cuda()
    f = ssae.logmel(x)
    assert f.device == x.device
    assert np.array_equal(f.cpu().numpy(), logmel_frames)


def test_mixed_devices(windows):
    m = st.SpectralShapeAutoencoder()  # weights on the CPU
    x = torch.from_numpy(windows[:10]).cuda()
    with pytest.raises(ValueError, match=r"input on cuda:0, parameters on cpu"):
        m(x)
    with pytest.raises(ValueError, match=r"input on cuda:0, parameters on cpu"):
        m.reconstruction_loss(x)
    m = m.cuda()
    with pytest.raises(ValueError, match=r"input on cpu, parameters on cuda:0"):
        m(x.cpu())
    with pytest.raises(ValueError, match=r"input on cpu, parameters on cuda:0"):
        m.reconstruction_loss(x.cpu())


@pytest.mark.skipif(not has_loss_entry_point(), reason="this libssae has no fused loss")
def test_loss_entry_point_refuses_host_memory(windows):
    """The C entry point names a buffer that is not the device's memory
    (a C caller's mistake; the package never makes it) and writes nothing."""
    lib = ssae._lib.load()
    net = st._Net((64, 5, 32, 64))
    x = torch.from_numpy(windows[:10]).cuda()
    flat = torch.cat([p.reshape(-1) for p in st.SpectralShapeAutoencoder().cuda()._params()])
    dp = torch.zeros(net.n_params, device="cuda")
    loss = torch.zeros((), device="cuda")
    host = torch.zeros(net.n_params)
    for args, what in (((flat, x, loss, host), "parameter gradients: host memory"),
                       ((flat, x.cpu(), loss, dp), "input: host memory"),
                       ((flat.cpu(), x, loss, dp), "parameters: host memory")):
        err = ssae._lib.errbuf()
        p, xi, lo, g = args
        rc = lib.ssae_api_net_loss_cuda(net.h, p.data_ptr(), xi.data_ptr(), 10, lo.data_ptr(),
                                        g.data_ptr(), None, err)
        assert rc == ssae._lib.EBACKEND and what in err.value.decode(), err.value
    torch.cuda.synchronize()
    assert float(loss) == 0 and not dp.any()


def test_without_entry_points_copies_once(monkeypatch, windows):
    """A library without the device-pointer entry points: the tensor goes
    through the host, one warning per process, same results."""
    lib = ssae._lib.load()
    monkeypatch.setattr(lib, "ssae_has_cuda_tensors", False)
    monkeypatch.setattr(ssae, "_cuda_copy_warned", False)
    m = ssae.Model()
    x = torch.from_numpy(windows).cuda()
    a, b, msgs = score_twice(m, x)
    assert len(msgs) == 1 and "copied to the host" in msgs[0], msgs
    assert a.device == x.device and torch.equal(a, b)
    check_scores(a, windows)


def graph_or_eager(m, opt, xs, loss_of, graph, warmup=3):
    """Losses and final parameters of len(xs) training steps (loss_of(m, x),
    backward, opt.step()), run eagerly or as torch.cuda.graph's whole-step
    capture: warm-up steps on a side stream, the step captured once, then
    replayed with each batch copied into its input."""
    losses = []
    if not graph:
        for x in xs:
            opt.zero_grad(set_to_none=True)
            loss = loss_of(m, x)
            loss.backward()
            opt.step()
            losses.append(loss.detach().clone())
    else:
        static_x = xs[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x in xs[:warmup]:
                static_x.copy_(x)
                opt.zero_grad(set_to_none=True)
                loss = loss_of(m, static_x)
                loss.backward()
                opt.step()
                losses.append(loss.detach().clone())
            del loss  # its autograd graph, kept alive, would tie the capture to this stream
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = loss_of(m, static_x)
            static_loss.backward()
            opt.step()
        for x in xs[warmup:]:
            static_x.copy_(x)
            g.replay()
            losses.append(static_loss.detach().clone())
    torch.cuda.synchronize()
    return torch.stack(losses).cpu(), [p.detach().cpu().clone() for p in m.parameters()]


@needs_entry_points
@pytest.mark.skipif(not has_loss_entry_point(), reason="this libssae has no fused loss")
@pytest.mark.parametrize("loss_name", ["mse", "fused"])
@pytest.mark.parametrize("dims", ["default", "other"])
def test_training_step_in_cuda_graph(loss_name, dims, windows):
    """The drop-in module's whole training step (forward, loss, backward,
    Adam) captured into a CUDA graph and replayed: the losses and the
    parameters of the same steps run eagerly, bit for bit, on ssae's
    kernels (a fallback to PyTorch would warn, an error here, and give
    other bits)."""
    kw = {} if dims == "default" else OTHER_DIMS
    win = 320 if dims == "default" else OTHER_DIMS["frames"] * OTHER_DIMS["n_mels"]
    base = torch.from_numpy(np.tile(windows.reshape(-1), 40))
    xs = [base[i * 97:i * 97 + 512 * win].reshape(512, win).cuda().contiguous()
          for i in range(8)]
    if loss_name == "mse":
        def loss_of(m, x):
            return torch.nn.functional.mse_loss(m(x), x)
    else:
        def loss_of(m, x):
            return m.reconstruction_loss(x)
    runs = []
    for graph in (False, True):
        torch.manual_seed(41)
        m = st.SpectralShapeAutoencoder(**kw).cuda()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # ssae's fallback warnings
            runs.append(graph_or_eager(m, opt, xs, loss_of, graph))
        assert m.uses_kernel
    (l_e, p_e), (l_g, p_g) = runs
    assert torch.equal(l_e, l_g), (l_e, l_g)
    assert all(torch.equal(a, b) for a, b in zip(p_e, p_g))
    assert float(l_e[-1]) < float(l_e[0])


@needs_entry_points
def test_eval_forward_and_score_in_cuda_graph(windows):
    """The module's evaluation forward and ssae.Model.score captured into
    CUDA graphs: each replay computes with the parameters' values at that
    moment (changed through .data between replays) and equals the eager
    call bit for bit."""
    torch.manual_seed(43)
    m = st.SpectralShapeAutoencoder().cuda()
    model = ssae.Model(backend="cuda")
    x = torch.from_numpy(windows).cuda()
    static_x = x.clone()
    with torch.no_grad():
        m(static_x)  # warm-up
        model.score(static_x)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = m(static_x)
            static_s = model.score(static_x)
        for step in range(3):
            static_x.copy_(x * (1 + 0.01 * step))
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_y, m(static_x))
            assert torch.equal(static_s, model.score(static_x))
            before = static_y.clone()
            m.slice_decoder[0].bias.data.add_(0.05)  # no version bump
            g.replay()
            assert not torch.equal(static_y, before)
            assert torch.equal(static_y, m(static_x))
    model.close()


@needs_entry_points
def test_first_call_inside_cuda_graph_capture(windows):
    """A net whose first CUDA call comes inside a capture makes its buffers
    there (relaxed capture mode: they are the net's, not the graph's); the
    replays equal the eager forward."""
    torch.manual_seed(44)
    m = st.SpectralShapeAutoencoder(**OTHER_DIMS).cuda()
    st._Net._cache.pop((m._dims(), torch.cuda.current_device()), None)
    win = OTHER_DIMS["frames"] * OTHER_DIMS["n_mels"]
    x = torch.from_numpy(np.tile(windows.reshape(-1), 4)[:300 * win].reshape(300, win)).cuda()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torch.no_grad():
            with torch.cuda.graph(g, stream=side):
                static_y = m(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_y, m(x))
    assert m.uses_kernel


@needs_entry_points
@pytest.mark.skipif(not st._custom_op_available(), reason="torch < 2.4: no torch.library.custom_op")
def test_compiled_reduce_overhead(windows):
    """torch.compile(mode="reduce-overhead") (Inductor's CUDA graphs around
    the ssae::autoencoder op): evaluation forwards give the eager module's
    outputs bit for bit and follow parameter changes; training steps'
    gradients are within 1e-6 of the eager ones (the loss's backward is
    Inductor's own kernel there)."""
    from torch._dynamo.utils import counters
    counters.clear()
    torch.manual_seed(45)
    m = st.SpectralShapeAutoencoder().cuda()
    f = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    x = torch.from_numpy(windows).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torch.no_grad():
            for _ in range(4):
                y = f(x).clone()
                assert torch.equal(y, m(x))
            m.slice_decoder[0].bias.data.add_(0.05)
            y2 = f(x).clone()
            assert not torch.equal(y2, y) and torch.equal(y2, m(x))
        for _ in range(4):
            m.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(f(x), x).backward()
            got = [p.grad.clone() for p in m.parameters()]
            m.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(m(x), x).backward()
            for a, p in zip(got, m.parameters()):  # Inductor's own loss backward: not bit for bit
                assert rel_l2(a, p.grad) <= 1e-6
    assert m.uses_kernel
    # Inductor put the graphs into CUDA graphs (it counts the ones it skips)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
