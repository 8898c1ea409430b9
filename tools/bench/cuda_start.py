#!/usr/bin/env python3
"""A CUDA process's start and exit under the driver's settings that change
them: runs cuda_start (built beside ssae: BUILD/tools/bench/cuda_start) in
fresh processes, the variants alternating, and prints per variant the
medians of milliseconds since the fork at which cuInit returned, the
context was made, and the process had exited (its parent's wait), with the
range of the last.

    python3 tools/bench/cuda_start.py BUILD/tools/bench/cuda_start [ROUNDS]
"""
import os
import statistics
import subprocess
import sys
import time

VARIANTS = [
    ("default (8 queues)", {}, []),
    ("CUDA_DEVICE_MAX_CONNECTIONS=1", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, []),
    ("CUDA_DEVICE_MAX_CONNECTIONS=2", {"CUDA_DEVICE_MAX_CONNECTIONS": "2"}, []),
    ("CUDA_DEVICE_MAX_CONNECTIONS=4", {"CUDA_DEVICE_MAX_CONNECTIONS": "4"}, []),
    ("CUDA_DEVICE_MAX_CONNECTIONS=32", {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, []),
    ("CUDA_SCALE_LAUNCH_QUEUES=0.25x", {"CUDA_SCALE_LAUNCH_QUEUES": "0.25x"}, []),
    ("cuInit only, no context", {}, ["init"]),
]


def main():
    exe = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    got = {name: [] for name, _, _ in VARIANTS}
    for _ in range(rounds):
        for name, extra, args in VARIANTS:
            env = dict(os.environ)
            env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
            env.update(extra)
            t0 = time.monotonic_ns()
            p = subprocess.run([exe] + args, env=env, capture_output=True, text=True)
            t_exit = time.monotonic_ns()
            if p.returncode:
                sys.exit("%s: %s" % (name, p.stderr.strip()))
            f = p.stdout.split()
            at = {f[i]: int(f[i + 1]) for i in range(0, len(f) - 1, 2)}
            ms = lambda k: (at[k] - t0) / 1e6 if k in at else float("nan")
            got[name].append((ms("init"), ms("ctx"), (t_exit - t0) / 1e6))
    print("%-34s %11s %14s %8s (range)   ms since the fork, medians of %d"
          % ("variant", "cuInit done", "context done", "exited", rounds))
    for name, rows in got.items():
        init, ctx, ex = zip(*rows)
        print("%-34s %11.1f %14.1f %8.1f (%.0f-%.0f)" % (
            name, statistics.median(init), statistics.median(ctx), statistics.median(ex),
            min(ex), max(ex)))


if __name__ == "__main__":
    main()
