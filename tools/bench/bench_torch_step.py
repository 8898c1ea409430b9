"""Benchmark (not a test): the drop-in module's training step on CUDA
tensors, split into the forward and the loss + backward (CUDA events), then
the whole step (forward, MSE loss, backward, synchronised) against the plain
SPEC module (tools/ssae_torch.py) in float32, per batch size; and the step
with the module's fused loss (zero_grad, model.reconstruction_loss(x),
backward: the forward, the loss and the backward in one library call on
CUDA), and the same without autograd (zero_grad,
model.reconstruction_backward(x): the fused pass's gradients put in .grad
directly).

usage: PYTHONPATH=build/python:tools python3 tools/bench/bench_torch_step.py
       [--sizes 512,8192,65536] [--rounds 2] [--breakdown]
Each round runs every size twice in separate processes: once on the
trainer's kernels (SSAE_CUDA_VJP=simt) and once on the default ones (for the
default dimensions: the inference kernel's forward, the tensor-core
backward), so the two alternate in one invocation.

--builds DIR,DIR...: instead of the two kernel sets, the default kernels of
each build tree (DIR/python on PYTHONPATH; the first column names it), each
in its own process, alternating: two trees compared in one invocation.

--breakdown: instead, for each size, how much of the drop-in module's step
is spent inside its autograd Function (ssae's Python and library calls, the
forward and the backward) and how much around it in torch (zero_grad,
Function.apply, the loss and its backward, the autograd engine, the
gradients' accumulation): the share no kernel of ssae's can take away."""
import argparse
import os
import subprocess
import sys
import time


def models():
    """(the drop-in module, the plain SPEC module with the same weights), on CUDA."""
    import torch
    import ssae.torch as st
    import ssae_torch

    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder().cuda()
    plain = ssae_torch.SpectralShapeAutoencoder().cuda()
    plain.load_state_dict(m.state_dict())
    return m, plain


def stepper(x):
    """One training step on x (forward, MSE loss, backward) of a module."""
    import torch

    def step(mod):
        mod.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(mod(x), x).backward()
    return step


def fused_stepper(x):
    """One training step on x with the drop-in module's fused loss."""
    def step(mod):
        mod.zero_grad(set_to_none=True)
        mod.reconstruction_loss(x).backward()
    return step


def direct_stepper(x):
    """The fused step without autograd (reconstruction_backward)."""
    def step(mod):
        mod.zero_grad(set_to_none=True)
        mod.reconstruction_backward(x)
    return step


def run_sizes(sizes):
    import torch

    m, plain = models()
    kernels = os.environ.get("SSAE_BENCH_LABEL") or (
        "trainer's" if os.environ.get("SSAE_CUDA_VJP") == "simt" else "default")
    for n in sizes:
        g = torch.Generator().manual_seed(1)
        x = (torch.randn(n, 320, generator=g) * 12 - 40).cuda()
        step = stepper(x)
        for _ in range(5):
            step(m)
            step(plain)
        torch.cuda.synchronize()
        reps = 50 if n <= 8192 else 20
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        f = b = 0.0
        for _ in range(reps):
            m.zero_grad(set_to_none=True)
            ev[0].record()
            y = m(x)
            ev[1].record()
            torch.nn.functional.mse_loss(y, x).backward()
            ev[2].record()
            torch.cuda.synchronize()
            f += ev[0].elapsed_time(ev[1])
            b += ev[1].elapsed_time(ev[2])
        t = {}
        for name, mod, run in (("ssae", m, step), ("torch", plain, step),
                               ("fused", m, fused_stepper(x)),
                               ("direct", m, direct_stepper(x))):
            run(mod)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                run(mod)
            torch.cuda.synchronize()
            t[name] = (time.perf_counter() - t0) / reps * 1e3
        if not m.uses_kernel:
            print("note: the drop-in module fell back to plain PyTorch", file=sys.stderr)
        print("%-9.9s %6d %9.3f %15.3f %12.3f %7.3f %9.2f %12.3f %9.2f %12.3f %9.2f" % (
            kernels, n, f / reps, b / reps, t["ssae"], t["torch"], t["torch"] / t["ssae"],
            t["fused"], t["torch"] / t["fused"], t["direct"], t["torch"] / t["direct"]),
            flush=True)


def breakdown(sizes, rounds):
    import torch
    import ssae.torch as st

    m, plain = models()
    fn = st._Autoencoder
    fwd, bwd = fn.forward, fn.backward
    acc = {"f": 0.0, "b": 0.0}

    def timed(f, key):
        def run(ctx, *a):
            t = time.perf_counter()
            r = f(ctx, *a)
            acc[key] += time.perf_counter() - t
            return r
        return staticmethod(run)

    print("batch  torch step (us)  ssae step (us)  x torch  inside ssae: fwd    bwd   around it (torch)")
    for n in sizes:
        x = (torch.randn(n, 320, generator=torch.Generator().manual_seed(1)) * 12 - 40).cuda()
        step = stepper(x)
        for _ in range(10):
            step(m)
            step(plain)
        reps = 300 if n <= 8192 else 30
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                step(plain)
            torch.cuda.synchronize()
            tp = (time.perf_counter() - t0) / reps * 1e6
            fn.forward, fn.backward = timed(fwd, "f"), timed(bwd, "b")
            acc["f"] = acc["b"] = 0.0
            try:
                t0 = time.perf_counter()
                for _ in range(reps):
                    step(m)
                torch.cuda.synchronize()
            finally:
                fn.forward, fn.backward = staticmethod(fwd), staticmethod(bwd)
            ts = (time.perf_counter() - t0) / reps * 1e6
            f, b = acc["f"] / reps * 1e6, acc["b"] / reps * 1e6
            print("%5d %16.1f %15.1f %8.2f %17.1f %6.1f %12.1f"
                  % (n, tp, ts, tp / ts, f, b, ts - f - b), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="512,8192,65536")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--breakdown", action="store_true",
                    help="the step inside ssae's autograd Function and around it")
    ap.add_argument("--builds", default=None,
                    help="comma-separated build trees to compare (default kernels each)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(v) for v in a.sizes.split(",")]
    if a.child:
        run_sizes(sizes)
        return 0
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    print("# %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    if a.breakdown:
        breakdown(sizes, a.rounds)
        return 0
    print("kernels    batch  fwd (ms)  loss+bwd (ms)  step: ssae   torch   x torch   fused loss"
          "   x torch  no autograd   x torch")
    tools = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = []  # (environment changes) of one round, in order
    if a.builds:
        for b in a.builds.split(","):
            py = os.path.join(os.path.abspath(b), "python")
            if not os.path.isdir(os.path.join(py, "ssae")):
                print("--builds: %s has no python/ssae (not a built tree)" % b, file=sys.stderr)
                return 2
            runs.append({"PYTHONPATH": py + os.pathsep + tools,
                         "SSAE_BENCH_LABEL": os.path.basename(os.path.abspath(b))})
    else:
        runs = [{"SSAE_CUDA_VJP": "simt"}, {}]
    for _ in range(a.rounds):
        for change in runs:
            env = dict(os.environ)
            env.pop("SSAE_CUDA_VJP", None)
            env.update(change)
            rc = subprocess.call([sys.executable, __file__, "--child", "--sizes", a.sizes],
                                 env=env)
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
