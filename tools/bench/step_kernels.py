#!/usr/bin/env python3
"""Benchmark (not a test): the GPU kernels of the drop-in module's fused
training step (zero_grad, model.reconstruction_backward(x) on CUDA tensors),
one by one, as Nsight Compute times them: each kernel's gpu__time_duration,
in launch order, the median over the profiled steps, for one or more build
trees side by side (each tree's library in its own process), and their sum.
A step's kernels run back to back on one stream, so the sum is the step's
GPU time but for the gaps between launches; bench_torch_step.py times the
whole step.

usage: step_kernels.py [--builds DIR,DIR...] [--size N] [--steps K]
                       [--cold] [--ncu PATH]
       step_kernels.py --parse FILE [FILE...]

--builds  build trees (DIR/python on PYTHONPATH; default: build); the column
          headers are their last path components
--size    windows a step (default 65536)
--steps   steps profiled after three unprofiled (default 2)
--cold    Nsight Compute's default: every cache flushed before each kernel
          (by default they are left as the step before left them, as they
          are when the step runs unprofiled)
--ncu     the ncu command (default: ncu on PATH, else
          /usr/local/cuda/bin/ncu)
--parse   read saved ncu outputs (of this script's runs, or any ncu run with
          --metrics gpu__time_duration.sum) instead of profiling; one column
          a file

Exit status 77 when there is no ncu or no CUDA device (nothing measured)."""
import argparse
import os
import re
import statistics
import sys

import ncu_step

PROFILED = re.compile(r'^==PROF== Profiling "([^"]+)"')
DURATION = re.compile(r"^\s+gpu__time_duration\.sum\s+(\S+)\s+([\d.,]+)\s*$")
SCALE_US = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6}



def parse(text):
    """[(kernel, microseconds)] in launch order, from ncu's output: the
    short names of its "==PROF== Profiling" lines, paired in order with the
    gpu__time_duration.sum rows of its report."""
    names = [m.group(1) for m in map(PROFILED.match, text.splitlines()) if m]
    times = []
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            unit = m.group(1)
            if unit not in SCALE_US:
                raise ValueError(f"gpu__time_duration in an unknown unit: {unit!r}")
            times.append(float(m.group(2).replace(",", "")) * SCALE_US[unit])
    if len(names) != len(times):
        raise ValueError(f"{len(names)} kernels profiled but {len(times)} durations reported "
                         "(was the run given --metrics gpu__time_duration.sum?)")
    return list(zip(names, times))


def per_step(kernels):
    """The launches split into steps (a step starts again at its first
    kernel's name), then each position's median over the steps:
    [(kernel, median us)]."""
    if not kernels:
        return []
    first = kernels[0][0]
    steps, cur = [], []
    for name, us in kernels:
        if name == first and cur:
            steps.append(cur)
            cur = []
        cur.append((name, us))
    steps.append(cur)
    shape = [k for k, _ in steps[0]]
    same = [s for s in steps if [k for k, _ in s] == shape]
    return [(k, statistics.median(s[i][1] for s in same)) for i, k in enumerate(shape)]


def table(columns):
    """The kernels of each column (label, [(kernel, us)]) side by side,
    aligned by name in order of appearance."""
    order, seen = [], {}
    for _, ks in columns:
        count = {}
        for k, _ in ks:
            count[k] = count.get(k, 0) + 1
            key = (k, count[k])
            if key not in seen:
                seen[key] = len(order)
                order.append(key)
    width = max([len("kernel")] + [len(k) + 4 for k, _ in order])
    cw = [max(14, len(label) + 2) for label, _ in columns]
    head = f"{'kernel':<{width}}" + "".join(f"{label:>{w}}" for (label, _), w in zip(columns, cw))
    lines = [head]
    vals = []
    for label, ks in columns:
        count, got = {}, {}
        for k, us in ks:
            count[k] = count.get(k, 0) + 1
            got[(k, count[k])] = us
        vals.append(got)
    for key in order:
        name = key[0] if key[1] == 1 else f"{key[0]} #{key[1]}"
        lines.append(f"{name:<{width}}" + "".join(
            f"{v[key]:>{w}.2f}" if key in v else f"{'-':>{w}}" for v, w in zip(vals, cw)))
    lines.append(f"{'sum (us)':<{width}}" + "".join(
        f"{sum(us for _, us in ks):>{w}.2f}" for (_, ks), w in zip(columns, cw)))
    return "\n".join(lines)


def profile(ncu, build, size, steps, cold):
    return ncu_step.run_step(ncu, build, ["--cache-control", "all" if cold else "none",
                                          "--clock-control", "none", "--profile-from-start",
                                          "off", "--metrics", "gpu__time_duration.sum"],
                             size, steps)


def main():
    ap = argparse.ArgumentParser(prog="step_kernels.py",
                                 usage=__doc__.split("usage: ", 1)[1].split("\n\n", 1)[0])
    ap.add_argument("--builds", default="build")
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--ncu")
    ap.add_argument("--parse", nargs="+", metavar="FILE")
    a = ap.parse_args()
    if a.size < 1 or a.steps < 1:
        ap.error("--size and --steps must be at least 1")
    columns = []
    if a.parse:
        for path in a.parse:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    columns.append((os.path.basename(path), per_step(parse(f.read()))))
            except (OSError, ValueError) as e:
                sys.exit(f"step_kernels.py: {path}: {e}")
    else:
        ncu = ncu_step.find_ncu(a.ncu)
        if ncu is None:
            return ncu_step.nothing_measured("step_kernels.py", "no ncu (Nsight Compute)")
        for build in a.builds.split(","):
            try:
                out = profile(ncu, build, a.size, a.steps, a.cold)
                if out is None:
                    return ncu_step.nothing_measured("step_kernels.py", "no CUDA device")
                columns.append((os.path.basename(os.path.normpath(build)), per_step(parse(out))))
            except (RuntimeError, ValueError) as e:
                sys.exit(f"step_kernels.py: {build}: {e}")
        print(f"# {a.size} windows a step, median of {a.steps} profiled steps, "
              f"caches {'flushed before each kernel' if a.cold else 'warm'}; us")
    print(table(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
