#!/usr/bin/env python3
"""The SSAE in PyTorch, timed the way `ssae bench` times the CUDA backend.

    bench_torch.py MODEL.safetensors [--batches 1,32,...] [--seconds S]
                   [--modes eager,compile,graph] [--roundtrip N]

Loads the same model file, runs the module of SPEC section 2 in float32 on
the GPU and prints, per mode and batch size, the device time per forward
pass + window scores (CUDA events, median and p99, input resident on the
device) and windows/s; then the one-window round trip (pinned host window
in, host score out) p50/p99 for the CUDA-graph mode. Modes: eager,
torch.compile (default settings), CUDA-graph replay of the eager pass.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ssae_torch import SpectralShapeAutoencoder  # noqa: E402  (the SPEC module, one copy)

class Scorer(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return ((self.net(x) - x) ** 2).mean(dim=1)


def load(path):
    from safetensors.torch import load_file
    from safetensors import safe_open
    sd = load_file(path)
    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
    L, C = sd["global_basis"].shape
    S, M = sd["slice_encoder.1.weight"].shape
    net = SpectralShapeAutoencoder(M, C // S, L, S)
    net.load_state_dict({k: v for k, v in sd.items() if k in net.state_dict()})
    return net, meta


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(-(-p * len(v) // 1)) - 1))]


def time_device(fn, x, seconds, max_reps):
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, t_end = [], time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < t_end and len(times) < max_reps):
        e0.record()
        fn(x)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0)
    return pct(times, 0.5), pct(times, 0.99)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,32,256,4096,65536,1048576")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--modes", default="eager,compile,graph")
    ap.add_argument("--roundtrip", type=int, default=2000)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_torch: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    net, _ = load(a.model)
    scorer = Scorer(net).cuda().eval()
    M, Fr = net.n_mels, net.frames
    batches = [int(b) for b in a.batches.split(",")]
    modes = a.modes.split(",")
    print(f"# bench_torch: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, fp32 (tf32 off)")
    print(f"{'mode':<8} {'batch':>9} {'p50_us':>11} {'p99_us':>11} {'windows/s':>14}")
    compiled = torch.compile(scorer) if "compile" in modes else None
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for mode in modes:
            for n in batches:
                x = (torch.rand(n, 1, device="cuda", generator=g) * 70 - 90
                     + torch.rand(n, Fr * M, device="cuda", generator=g) * 40 - 20)
                if mode == "eager":
                    fn = scorer
                elif mode == "compile":
                    fn = compiled
                else:
                    static_x = x.clone()
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(3):
                            scorer(static_x)
                    torch.cuda.current_stream().wait_stream(s)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_out = scorer(static_x)

                    def fn(_x, graph=graph):
                        graph.replay()
                p50, p99 = time_device(fn, x, a.seconds, 2000 if n < 65536 else 50)
                print(f"{mode:<8} {n:>9} {p50:>11.1f} {p99:>11.1f} {n / p50 * 1e6:>14.0f}", flush=True)
                del x
        if a.roundtrip and "graph" in modes:
            # One window: pinned host buffer in, device forward (graph), host score out.
            hx = torch.empty(1, Fr * M, pin_memory=True)
            hx.copy_(torch.rand(1, Fr * M) * 40 - 60)
            hs = torch.empty(1, pin_memory=True)
            dx = torch.empty(1, Fr * M, device="cuda")
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(3):
                    scorer(dx)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                dx.copy_(hx, non_blocking=True)
                out = scorer(dx)
                hs.copy_(out, non_blocking=True)
            lat = []
            for i in range(a.roundtrip + 50):
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.current_stream().synchronize()
                t1 = time.perf_counter()
                if i >= 50:
                    lat.append((t1 - t0) * 1e6)
            print(f"roundtrip-graph  1 window: p50 {pct(lat, 0.5):.1f} us  p99 {pct(lat, 0.99):.1f} us")
            lat = []
            for i in range(a.roundtrip + 50):
                t0 = time.perf_counter()
                y = scorer(hx.cuda(non_blocking=True)).cpu()
                t1 = time.perf_counter()
                if i >= 50:
                    lat.append((t1 - t0) * 1e6)
            print(f"roundtrip-eager  1 window: p50 {pct(lat, 0.5):.1f} us  p99 {pct(lat, 0.99):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
