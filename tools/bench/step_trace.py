#!/usr/bin/env python3
"""Benchmark (not a test): the drop-in module's fused training step (zero_grad,
model.reconstruction_backward(x) on CUDA tensors) on the GPU's own clock, as
CUPTI traces it (torch.profiler): for each build tree, in its own process and
in turn over the rounds, each traced step's span (its first kernel's start to
the next step's first kernel's start: the GPU time a step costs in a loop,
launch gaps included), the time between its kernels, and each kernel's
duration. Unlike a timed loop on the host (bench_torch_step.py) it sees only
the GPU, step by step, so that builds a few microseconds apart can be told
apart; unlike Nsight Compute (step_kernels.py) it does not serialise the
kernels or replay them.

usage: step_trace.py [--builds DIR,DIR...] [--size N] [--steps K]
                     [--rounds R]

--builds  build trees (DIR/python on PYTHONPATH; default: build); labelled
          by their last path components
--size    windows a step (default 65536)
--steps   steps traced in each process, after five untraced (default 12)
--rounds  processes per build, alternating (default 3)

Exit status 77 when there is no torch or no CUDA device (nothing measured)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

import ncu_step
import step_kernels

CHILD = ncu_step.STEP_SETUP + r"""
import json
from torch.profiler import ProfilerActivity, profile
def trace(k):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(k):
            step()
        torch.cuda.synchronize()
    return sorted([e.time_range.start, e.time_range.end, e.name] for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
for _ in range(5):
    step()
one = trace(1)
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "per_step": len(one), "uses_kernel": m.uses_kernel, "events": trace(steps)}))
"""


def short_name(name):
    """A kernel's name without its namespaces, template arguments and
    parameters: "void at::native::(anonymous namespace)::CatArray...<...>(...)"
    is "CatArray..."."""
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    if name.startswith("void "):
        name = name[5:]
    for stop in "<(":
        name = name.split(stop)[0]
    return name.split("::")[-1].strip() or "?"


def steps_of(events, per_step):
    """events ([start, end, name], microseconds, in start order) cut into
    steps of per_step kernels; ValueError when they do not divide."""
    if not per_step or len(events) % per_step:
        raise ValueError(f"{len(events)} kernels traced, not a multiple of the "
                         f"{per_step} of one step")
    return [events[i:i + per_step] for i in range(0, len(events), per_step)]


def step_stats(steps):
    """{"span": [us a step, start to the next step's start; the last step's
    to its own end], "gaps": [us a step the GPU ran none of its kernels],
    "kernels": [(short name, median us)] in launch order}. Overlapping
    kernels leave no gap."""
    spans, gaps = [], []
    for i, st in enumerate(steps):
        nxt = steps[i + 1][0][0] if i + 1 < len(steps) else max(e for _, e, _ in st)
        spans.append(nxt - st[0][0])
        idle, reach = 0.0, st[0][1]
        for s, e, _ in st[1:] + ([[nxt, nxt, ""]] if i + 1 < len(steps) else []):
            idle += max(0.0, s - reach)
            reach = max(reach, e)
        gaps.append(idle)
    kernels = [(short_name(n), statistics.median(st[k][1] - st[k][0] for st in steps))
               for k, (_, _, n) in enumerate(steps[0])]
    return {"span": spans, "gaps": gaps, "kernels": kernels}


def run_child(build, size, steps):
    """The child's JSON for BUILD, or None without a CUDA device; RuntimeError
    when it failed."""
    p = subprocess.run([sys.executable, "-c", CHILD, str(size), str(steps)],
                       env=ncu_step.build_env(build), capture_output=True, text=True)
    if p.returncode == 77:
        return None
    if p.returncode != 0:
        raise RuntimeError(f"the traced step failed on {build} (status {p.returncode}):\n"
                           f"{(p.stdout + p.stderr)[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(prog="step_trace.py", description=__doc__.split("\n")[0])
    ap.add_argument("--builds", default="build")
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.size < 1 or a.steps < 2 or a.rounds < 1:
        ap.error("--size must be at least 1, --steps at least 2, --rounds at least 1")
    builds = [os.path.abspath(b) for b in a.builds.split(",")]
    for b in builds:
        if not os.path.isdir(os.path.join(b, "python", "ssae")):
            ap.error(f"--builds: {b} has no python/ssae (not a built tree)")
    try:
        import torch
    except ImportError:
        print("step_trace.py: no torch: nothing measured", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("step_trace.py: no CUDA device: nothing measured", file=sys.stderr)
        return 77
    labels = [os.path.basename(b) for b in builds]
    width = max(10, *(len(v) + 2 for v in labels))
    kernels = {b: [] for b in builds}
    header = False
    for r in range(a.rounds):
        for b, label in zip(builds, labels):
            try:
                got = run_child(b, a.size, a.steps)
                st = step_stats(steps_of(got["events"], got["per_step"])) if got else None
            except (RuntimeError, ValueError) as e:
                print(f"step_trace.py: {e}", file=sys.stderr)
                return 1
            if got is None:
                print("step_trace.py: no CUDA device: nothing measured", file=sys.stderr)
                return 77
            if not header:
                print(f"# {got['device']}, torch {got['torch']}, {a.size} windows a step, "
                      f"{a.steps} steps traced a process; us")
                print(f"{'build':<{width}}round  span median    min    max   gaps median  "
                      "kernels")
                header = True
            if not got["uses_kernel"]:
                print(f"note: {label} fell back to plain PyTorch", file=sys.stderr)
            sp = st["span"][:-1] or st["span"]
            print(f"{label:<{width}}{r + 1:>5}  {statistics.median(sp):>11.1f} "
                  f"{min(sp):>6.1f} {max(sp):>6.1f} {statistics.median(st['gaps']):>12.2f}  "
                  f"{got['per_step']}", flush=True)
            kernels[b].append(st["kernels"])
    print("# each kernel's median over the rounds' step medians (us)")
    cols = []
    for b, label in zip(builds, labels):
        rounds = kernels[b]
        cols.append((label, [(k, statistics.median(r[i][1] for r in rounds))
                             for i, (k, _) in enumerate(rounds[0])]))
    print(step_kernels.table(cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
