"""Benchmark (not a test): training steps captured into CUDA graphs
(torch.cuda.graph, the mechanism of torch.compile's "reduce-overhead" mode)
against the same steps run eagerly, for the plain SPEC module
(tools/ssae_torch.py, float32) and the drop-in module, in one process, per
batch size. A step is the forward, the MSE loss and the backward (the
gradients written, not accumulated: zero_grad(set_to_none=True) before the
capture, as torch.cuda.graph's whole-network example); "fused" is the
drop-in module's reconstruction_loss(x).backward(). Each row: the median
over rounds of (N steps back to back, synchronised at the end) / N.

usage: PYTHONPATH=build/python:tools python3 tools/bench/bench_graph_step.py
       [--sizes 512,8192,65536] [--steps 200] [--rounds 5]"""
import argparse
import statistics
import time

import torch

import ssae.torch as st
import ssae_torch


def mse_step(mod, x):
    torch.nn.functional.mse_loss(mod(x), x).backward()


def fused_step(mod, x):
    mod.reconstruction_loss(x).backward()


def eager(mod, x, step, steps):
    """Milliseconds a step, eagerly (zero_grad included, as a loop does)."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        mod.zero_grad(set_to_none=True)
        step(mod, x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / steps


def capture(mod, x, step):
    """The step captured (after three warm-up steps on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            mod.zero_grad(set_to_none=True)
            step(mod, x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    mod.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        step(mod, x)
    return g


def replayed(g, steps):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="512,8192,65536")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder().cuda()
    plain = ssae_torch.SpectralShapeAutoencoder().cuda()
    plain.load_state_dict(m.state_dict())
    print("# torch %s, %s; ms a step, medians of %d rounds of %d steps"
          % (torch.__version__, torch.cuda.get_device_name(), a.rounds, a.steps))
    print("%6s %12s %12s %12s %12s %12s %12s %9s %9s"
          % ("batch", "torch eager", "torch graph", "ssae eager", "ssae graph", "fused eager",
             "fused graph", "x t.eager", "x t.graph"))
    for n in [int(v) for v in a.sizes.split(",")]:
        x = torch.randn(n, 320, device="cuda") * 20 - 50
        cases = [(plain, mse_step), (m, mse_step), (m, fused_step)]
        graphs = [capture(mod, x, step) for mod, step in cases]
        times = {k: [] for k in range(6)}
        for _ in range(a.rounds):
            for i, ((mod, step), g) in enumerate(zip(cases, graphs)):
                times[2 * i].append(eager(mod, x, step, a.steps))
                times[2 * i + 1].append(replayed(g, a.steps))
        med = [statistics.median(times[k]) for k in range(6)]
        print("%6d %12.4f %12.4f %12.4f %12.4f %12.4f %12.4f %9.2f %9.2f"
              % (n, *med, med[0] / med[5], med[1] / med[5]))
    assert m.uses_kernel, "the drop-in module fell back to PyTorch"


if __name__ == "__main__":
    main()
