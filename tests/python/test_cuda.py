"""CUDA tensors (skipped without a GPU; meson then reports skip): results
come back on the input's device and equal the CPU's; the drop-in module on
CUDA; with the device-pointer entry points, the kernel reads the tensor in
place on the caller's stream."""
import warnings

import numpy as np
import pytest
import torch

import ssae
import ssae._lib
import ssae.torch as st
import ssae_torch
from conftest import rel_l2

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_model_on_cuda_tensors(windows):
    m = ssae.Model()
    x = torch.from_numpy(windows).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = m.score(x)
        y = m.reconstruct(x)
        f = m.score_frames(x[:, :64].contiguous())
    assert s.device == x.device and y.device == x.device and f.device == x.device
    cpu = ssae.Model(backend="cpu")
    sc = cpu.score(windows)
    assert float(np.max(np.abs(s.cpu().numpy() - sc) / sc)) <= 1e-5
    assert rel_l2(y.cpu(), cpu.reconstruct(windows)) <= 1e-6


def test_module_on_cuda(windows):
    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder()
    ref = ssae_torch.SpectralShapeAutoencoder()
    ref.load_state_dict(m.state_dict())
    m = m.cuda()
    x = torch.from_numpy(windows).cuda().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = m(x)
        torch.nn.functional.mse_loss(y, x.detach()).backward()
    assert y.device == x.device
    with torch.no_grad():
        assert rel_l2(y.detach().cpu(), ref.double()(x.detach().cpu().double())) <= 1e-5
    with pytest.raises(ValueError, match="cuda"):
        m(torch.from_numpy(windows))


@pytest.mark.skipif(not (ssae._lib.available() and ssae._lib.load().ssae_has_cuda_tensors),
                    reason="this libssae has no device-pointer entry points")
def test_in_place_on_callers_stream(windows):
    lib = ssae._lib.load()
    m = ssae.Model(backend="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.from_numpy(windows).cuda(non_blocking=True) * 1.0  # producer on s
        torch.cuda._sleep(10_000_000)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no host-copy warning
            out = m.score(x)
    s.synchronize()
    assert lib.ssae_api_last_device_input() == x.data_ptr()
    sc = ssae.Model(backend="cpu").score(windows)
    assert float(np.max(np.abs(out.cpu().numpy() - sc) / sc)) <= 1e-5
