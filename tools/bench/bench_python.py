#!/usr/bin/env python3
"""ssae from Python against plain PyTorch, side by side in one run.

For each device (the CPU, and CUDA when torch sees one):
  forward, batch 1          call overhead, microseconds per call end to end
                            (CUDA: each call synchronised)
  forward, 65,536 and 1,048,576 windows   windows per second
  train step, batch 512 and 65,536        one forward + MSE loss + backward,
                            milliseconds per step; and the same step with
                            the module's fused loss
                            (model.reconstruction_loss(x).backward()),
                            and that without autograd
                            (model.reconstruction_backward(x)); and a
                            training loop's whole step, that and
                            torch.optim.Adam's step (the parameters change
                            every step, as they do in training), against
                            the plain module's with autograd
ssae rows: ssae.Model.score (the library's backend: the CPU forward, or the
CUDA kernel table's kernel on the tensor in place; on CUDA also with
math="3xtf32", the tensor-core kernel) and the drop-in module
ssae.torch.SpectralShapeAutoencoder (its forward without gradient, and its
training step). torch rows: the SPEC module (tools/ssae_torch.py) in float32,
eager, and on CUDA also torch.compile'd (torch >= 2). ratio = torch time /
ssae time (> 1: ssae is faster).

    PYTHONPATH=build/python python3 tools/bench/bench_python.py [--device cpu|cuda|all]
        [--quick] [--sizes-forward 65536,1048576] [--sizes-train 512,65536]
        [--torch-threads N] [--no-compile]

--quick: small sizes and few repetitions (a shared 2-core machine). Times
are medians of the repetitions after a warm-up run.
"""
import argparse
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # tools/ssae_torch.py

import torch  # noqa: E402

import ssae  # noqa: E402
import ssae.torch as st  # noqa: E402
import ssae_torch  # noqa: E402


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, reps, warm=1):
    """Median seconds of fn() over reps runs (after warm runs)."""
    for _ in range(warm):
        fn()
    sync(dev)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def per_call(fn, dev, calls):
    """Mean seconds per call, each call synchronised (end to end)."""
    for _ in range(min(calls, 50)):
        fn()
        sync(dev)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
        sync(dev)
    return (time.perf_counter() - t0) / calls


def inputs(n, dev, seed=0):
    """Windows at log-mel scale (-100 ... +20 dB), with band structure."""
    g = torch.Generator().manual_seed(seed)
    band = torch.linspace(0, 1, 64).repeat(5)
    x = -20.0 - 60.0 * band + 30.0 * (torch.rand(n, 320, generator=g) - 0.5)
    return x.to(dev)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, dev, what, size, unit, ssae_v, torch_v, compiled_v=None, higher_better=False):
        def ratio(v):
            if v is None or ssae_v is None:
                return None
            return (ssae_v / v) if higher_better else (v / ssae_v)
        self.rows.append((dev, what, size, unit, ssae_v, torch_v, compiled_v, ratio(torch_v),
                          ratio(compiled_v)))
        self.print_row(self.rows[-1])

    @staticmethod
    def fmt(v):
        if v is None:
            return "-"
        if v >= 1e6:
            return "%.3g M" % (v / 1e6)
        if v >= 100:
            return "%.0f" % v
        return "%.3g" % v

    def header(self):
        print("%-5s %-22s %9s %-6s %11s %11s %11s %8s %8s" % (
            "dev", "test", "size", "unit", "ssae", "torch", "compiled", "x torch",
            "x compl"))

    def print_row(self, r):
        dev, what, size, unit, a, b, c, rb, rc = r
        print("%-5s %-22s %9s %-6s %11s %11s %11s %8s %8s" % (
            dev, what, size, unit, self.fmt(a), self.fmt(b), self.fmt(c),
            "-" if rb is None else "%.2f" % rb, "-" if rc is None else "%.2f" % rc),
            flush=True)


def bench_device(dev, args, table):
    torch.manual_seed(0)
    plain = ssae_torch.SpectralShapeAutoencoder().to(dev)
    drop = st.SpectralShapeAutoencoder().to(dev)
    drop.load_state_dict(plain.state_dict())
    model = ssae.Model(backend="cuda" if dev == "cuda" else "cpu")
    # CUDA: the tensor-core kernel too (math="3xtf32", fp32-level accuracy)
    model_tc = ssae.Model(backend="cuda", math="3xtf32") if dev == "cuda" else None
    compiled = None
    if dev == "cuda" and not args.no_compile and int(torch.__version__.split(".")[0]) >= 2:
        compiled = torch.compile(plain)

    # forward, batch 1: the call overhead
    x1 = inputs(1, dev)
    calls = args.calls
    with torch.no_grad():
        s_us = per_call(lambda: model.score(x1), dev, calls) * 1e6
        d_us = per_call(lambda: drop(x1), dev, calls) * 1e6
        p_us = per_call(lambda: plain(x1), dev, calls) * 1e6
        c_us = None
        if compiled is not None:
            compiled(x1)
            c_us = per_call(lambda: compiled(x1), dev, calls) * 1e6
    if dev == "cuda":
        # the floor of any one-kernel call from Python on this host: a
        # one-element torch op, synchronised (allocation, launch, sync)
        f_us = per_call(lambda: x1[:1, :1] + 1.0, dev, calls) * 1e6
        print("  floor: a one-element torch op from Python, synchronised: %.1f us" % f_us)
    table.add(dev, "forward Model.score", 1, "us", s_us, p_us, c_us)
    table.add(dev, "forward module", 1, "us", d_us, p_us, c_us)

    # forward throughput
    for n in args.sizes_forward:
        x = inputs(n, dev)
        reps = args.reps if n <= 65536 else max(1, args.reps // 2)
        with torch.no_grad():
            ts = timed(lambda: model.score(x), dev, reps)
            td = timed(lambda: drop(x), dev, reps)
            tp = timed(lambda: plain(x), dev, reps)
            tc = timed(lambda: compiled(x), dev, reps, warm=2) if compiled is not None else None
        wps = lambda t: None if t is None else n / t  # noqa: E731
        table.add(dev, "forward Model.score", n, "win/s", wps(ts), wps(tp), wps(tc), True)
        if model_tc is not None:
            with torch.no_grad():
                tt = timed(lambda: model_tc.score(x), dev, reps)
            table.add(dev, "forward score 3xtf32", n, "win/s", wps(tt), wps(tp), wps(tc), True)
        table.add(dev, "forward module", n, "win/s", wps(td), wps(tp), wps(tc), True)
        del x
        if dev == "cuda":
            torch.cuda.empty_cache()

    # one training step: forward, MSE loss, backward
    def step(mod, x):
        mod.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(mod(x), x).backward()

    def fused_step(mod, x):
        mod.zero_grad(set_to_none=True)
        mod.reconstruction_loss(x).backward()

    def direct_step(mod, x):
        mod.zero_grad(set_to_none=True)
        mod.reconstruction_backward(x)

    # a training loop's step: the parameters change every time (a learning
    # rate small enough that the repetitions do not move the loss)
    opt_d = torch.optim.Adam(drop.parameters(), lr=1e-7)
    opt_p = torch.optim.Adam(plain.parameters(), lr=1e-7)

    def adam_step(mod, opt, x):
        opt.zero_grad(set_to_none=True)
        if mod is drop:
            mod.reconstruction_backward(x)
        else:
            torch.nn.functional.mse_loss(mod(x), x).backward()
        opt.step()

    for n in args.sizes_train:
        x = inputs(n, dev, seed=1)
        reps = args.reps
        ts = timed(lambda: step(drop, x), dev, reps)
        tp = timed(lambda: step(plain, x), dev, reps)
        tf = timed(lambda: fused_step(drop, x), dev, reps)
        tg = timed(lambda: direct_step(drop, x), dev, reps)
        table.add(dev, "train step fwd+bwd", n, "ms", ts * 1e3, tp * 1e3)
        table.add(dev, "train step fused loss", n, "ms", tf * 1e3, tp * 1e3)
        table.add(dev, "train step no autograd", n, "ms", tg * 1e3, tp * 1e3)
        ta = timed(lambda: adam_step(drop, opt_d, x), dev, reps)
        tpa = timed(lambda: adam_step(plain, opt_p, x), dev, reps)
        table.add(dev, "train step + Adam", n, "ms", ta * 1e3, tpa * 1e3)
        del x
    if not drop.uses_kernel:
        print("  note: the drop-in module fell back to plain PyTorch on %s" % dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, few repetitions (a shared small machine)")
    ap.add_argument("--sizes-forward", default=None, help="comma-separated window counts")
    ap.add_argument("--sizes-train", default=None, help="comma-separated batch sizes")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--calls", type=int, default=None, help="calls for the batch-1 rows")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--torch-threads", type=int, default=os.cpu_count(),
                    help="torch's CPU threads (default: every core, as ssae uses)")
    args = ap.parse_args()
    torch.set_num_threads(args.torch_threads)
    q = args.quick
    args.sizes_forward = [int(v) for v in (args.sizes_forward or
                                           ("4096,65536" if q else "65536,1048576")).split(",")]
    args.sizes_train = [int(v) for v in (args.sizes_train or
                                         ("512,8192" if q else "512,65536")).split(",")]
    args.reps = args.reps or (3 if q else 7)
    args.calls = args.calls or (300 if q else 2000)
    devs = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devs and not torch.cuda.is_available():
        if args.device == "cuda":
            sys.exit("no CUDA device")
        devs.remove("cuda")
    warnings.simplefilter("always", RuntimeWarning)
    print("torch %s, %d CPU threads; ssae backends %s; %s" % (
        torch.__version__, torch.get_num_threads(), ssae.backends(),
        torch.cuda.get_device_name(0) if "cuda" in devs else "no GPU"))
    table = Table()
    table.header()
    for dev in devs:
        bench_device(dev, args, table)


if __name__ == "__main__":
    main()
