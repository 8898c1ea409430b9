"""Two GPUs (skipped with fewer; meson then reports skip): a model opened on
the second device scores that device's tensors in place, within SPEC
section 2 of the float64 module, and leaves the caller's current device as
it was; tensors of the other device are refused by name; the drop-in module
runs ssae's kernels on each device it is moved to (one net per device: the
evaluation forward on the inference kernels there, the fused loss, the
backward), the two devices' results the same bits; DataParallel over both
GPUs trains on the kernels with the single-device gradients."""
import warnings

import pytest
import torch

import ssae
import ssae._lib
import ssae.torch as st
from conftest import DEFAULT_MODEL, check_loss_grads, oracle, rel_l2

pytestmark = [
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than two CUDA devices"),
    pytest.mark.skipif(not (ssae._lib.available() and ssae._lib.load().ssae_has_cuda_tensors),
                       reason="this libssae has no device-pointer entry points"),
]


def scores_within_spec(s, x):
    ref = oracle(DEFAULT_MODEL)
    with torch.no_grad():
        x64 = x.double().cpu()
        s_ref = ((ref(x64) - x64) ** 2).mean(1)
    s = s.double().cpu()
    assert float(((s - s_ref).abs() / s_ref).max()) <= 1e-5


@pytest.mark.parametrize("device", [1, "cuda:1", torch.device("cuda", 1)])
def test_model_on_second_device(windows, device):
    torch.cuda.set_device(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = ssae.Model(backend="cuda", device=device)
        assert m.backend == "cuda"
        x = torch.from_numpy(windows).to("cuda:1")
        s = m.score(x)  # the current device stays 0: the model selects its own
        assert s.device == x.device and torch.cuda.current_device() == 0
        assert ssae._lib.load().ssae_api_last_device_input() == x.data_ptr()
        torch.cuda.synchronize(1)
        scores_within_spec(s, x)
        # host windows through the same model: the copies go to device 1
        s_host = m.score(windows)
        assert torch.cuda.current_device() == 0
    assert rel_l2(s_host, s.cpu()) <= 1e-6
    with torch.cuda.device(1):
        s_cur = m.score(x)  # the lean path (x on the current device)
    assert torch.equal(s_cur, s)
    with pytest.raises(ValueError, match="device 0.*device 1"):
        m.score(x.to("cuda:0"))
    m.close()


def step(m, x):
    """The fused loss and its gradients; then the evaluation forward three
    times."""
    m.zero_grad(set_to_none=True)
    loss = m.reconstruction_loss(x)
    loss.backward()
    grads = [p.grad.detach().cpu() for p in m.parameters()]
    with torch.no_grad():
        ys = [m(x) for _ in range(3)]
    torch.cuda.synchronize(x.device)
    return loss.detach().cpu(), grads, ys[-1].cpu()


def test_module_on_each_device(windows):
    torch.cuda.set_device(0)
    m0 = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL).cuda(0)
    m1 = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL).cuda(1)
    m0.train()
    m1.train()
    x0 = torch.from_numpy(windows).cuda(0)
    x1 = x0.to("cuda:1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        l0, g0, y0 = step(m0, x0)
        l1, g1, y1 = step(m1, x1)
        assert torch.cuda.current_device() == 0
    assert m0.uses_kernel and m1.uses_kernel
    dims = m0._dims()
    n0, n1 = st._Net.get(dims, 0), st._Net.get(dims, 1)
    assert n0 is not n1
    assert ssae._lib.load().ssae_api_last_device_input() == x1.data_ptr()
    # the same kernels on the same kind of device: the same bits
    assert torch.equal(l0, l1) and torch.equal(y0, y1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    ref = oracle(DEFAULT_MODEL)
    x64 = x1.cpu().double()
    check_loss_grads(m1, l1, ref, x64)


def test_data_parallel(windows):
    """DataParallel replicates the module onto both GPUs and runs the
    replicas on threads of their own: each on ssae's kernels of its
    device, the gradients summed into the module's as the plain
    single-device step's."""
    torch.cuda.set_device(0)
    m = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL).cuda(0).train()
    single = st.SpectralShapeAutoencoder.from_file(DEFAULT_MODEL).cuda(0).train()
    dp = torch.nn.DataParallel(m, device_ids=[0, 1])
    x = torch.from_numpy(windows[:1024]).cuda(0)
    st._Net._cache.pop((m._dims(), 1), None)  # made again by the replica on device 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mod in (dp, single):
            mod.zero_grad(set_to_none=True)
            y = mod(x)
            torch.nn.functional.mse_loss(y, x).backward()
    assert m.uses_kernel
    assert st._Net._cache.get((m._dims(), 1)) is not None  # the replica ran on device 1
    for (name, a), b in zip(m.named_parameters(), single.parameters()):
        assert rel_l2(a.grad.cpu(), b.grad.cpu()) <= 1e-5, name
