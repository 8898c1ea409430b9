"""The drop-in module under torch.distributed: two real processes joined by
gloo on a loopback port (what torchrun starts), each with its own batch.
- DistributedDataParallel(ReconstructionLoss(model)) (the fused loss) and
  DistributedDataParallel(model) with mse_loss average the gradients: every
  process ends with the same gradients, and they are the mean of the two
  batches' float64 SPEC gradients within 1e-4;
- reconstruction_backward, which skips autograd and so DDP's averaging,
  says so once (RuntimeWarning) in such a group, and nothing outside one.
On CPU tensors, and where there is a GPU on CUDA tensors (both processes on
device 0; gloo reduces CUDA tensors too).
This file is also the worker: `python3 test_distributed.py RANK PORT OUT DEVICE`."""
import subprocess
import sys
import time
import warnings

import pytest
import torch

WORLD = 2


def batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return (torch.randn(37 + 5 * rank, 320, generator=g) * 6 - 55).float()


def worker(rank, port, out, device):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ssae.torch as st

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=WORLD)
    try:
        torch.manual_seed(0)
        model = st.SpectralShapeAutoencoder().to(device)
        x = batch(rank).to(device)
        res = {}
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            fused = DDP(loss_module_checked(model))
            loss = fused(x)
            assert type(loss.grad_fn).__name__ == "_ReconLossBackward", loss.grad_fn
            loss.backward()
            res["fused"] = {n: p.grad.cpu() for n, p in model.named_parameters()}
            model.zero_grad(set_to_none=True)
            plain = DDP(model)
            torch.nn.functional.mse_loss(plain(x), x).backward()
            res["module"] = {n: p.grad.cpu() for n, p in model.named_parameters()}
            model.zero_grad(set_to_none=True)
            model.reconstruction_backward(x)
            model.reconstruction_backward(x)
        res["warnings"] = [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]
        res["kernel"] = model.uses_kernel
        torch.save(res, out)
    finally:
        dist.destroy_process_group()


def loss_module_checked(model):
    import ssae.torch as st
    m = st.ReconstructionLoss(model)
    assert [n for n, _ in m.named_parameters()] == ["model." + n for n, _ in
                                                    model.named_parameters()]
    return m


def run_group(tmp_path, device):
    """Each process's results; a new port when the one picked was taken
    before rank 0 bound it (another program on the host)."""
    for _ in range(3):
        res = run_group_once(tmp_path, device)
        if res is not None:
            return res
    raise AssertionError("no free loopback port for the group after 3 tries")


def run_group_once(tmp_path, device):
    """Starts the group; a process that fails stops the others (one that
    waits for a peer that is gone would wait for minutes)."""
    from ssae_testlib import free_port  # tests/, on the path from conftest
    port = free_port()
    outs = [str(tmp_path / ("rank%d.pt" % r)) for r in range(WORLD)]
    logs = [str(tmp_path / ("rank%d.log" % r)) for r in range(WORLD)]
    procs = []
    for r in range(WORLD):
        with open(logs[r], "w") as log:
            procs.append(subprocess.Popen([sys.executable, __file__, str(r), str(port), outs[r],
                                           device], stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 180
    try:
        while any(p.poll() is None for p in procs):
            if any(p.returncode for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = []
    for path in logs:
        with open(path, errors="replace") as f:
            text.append(f.read())
    if any(p.returncode for p in procs) and any("address already in use" in t.lower()
                                                 for t in text):
        return None
    for r, p in enumerate(procs):
        assert p.returncode == 0, "rank %d (exit %s): %s" % (r, p.returncode, text[r][-3000:])
    return [torch.load(o) for o in outs]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ddp_averages_the_fused_loss_and_the_module(tmp_path, device):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without torch.distributed's gloo backend")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import ssae
    import ssae_torch
    if not ssae.backends()[device]:
        pytest.skip("libssae without its %s backend (a build with -Dcuda=disabled)" % device)

    res = run_group(tmp_path, device)
    # on the kernels, not on the plain PyTorch fallback
    assert all(r["kernel"] for r in res) and ssae.backends()[device]
    # the oracle: each batch's float64 SPEC gradients, averaged
    torch.manual_seed(0)
    import ssae.torch as st
    weights = st.SpectralShapeAutoencoder().state_dict()
    want = {}
    for r in range(WORLD):
        ref = ssae_torch.SpectralShapeAutoencoder()
        ref.load_state_dict(weights)
        ref = ref.double()
        x = batch(r).double()
        torch.nn.functional.mse_loss(ref(x), x).backward()
        for n, p in ref.named_parameters():
            want[n] = want.get(n, 0) + p.grad / WORLD
    for kind in ("fused", "module"):
        for n, g in want.items():
            a, b = res[0][kind][n], res[1][kind][n]
            assert torch.allclose(a, b, rtol=0, atol=1e-7 * float(b.abs().max())), (kind, n)
            err = float((a.double() - g).norm() / g.norm())
            assert err <= 1e-4, (kind, n, err)
    for r in range(WORLD):
        w = res[r]["warnings"]
        assert len(w) == 1 and "DistributedDataParallel" in w[0] and "2 processes" in w[0], w


def test_no_warning_outside_a_group():
    import ssae.torch as st
    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.reconstruction_backward(batch(0))


def test_reconstruction_loss_module_takes_the_drop_in_module_only():
    import ssae.torch as st
    import ssae_torch
    with pytest.raises(TypeError, match="SpectralShapeAutoencoder"):
        st.ReconstructionLoss(ssae_torch.SpectralShapeAutoencoder())


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
