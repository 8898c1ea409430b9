"""Benchmark (not a test): per-epoch training time of `ssae train` on the
CPU against the same recipe in PyTorch on the CPU, same data, same epochs,
same batch, same thread count, run side by side.

usage: /usr/bin/python3 tests/train/bench_train.py [--ssae build/ssae]
       [--epochs 5] [--threads 2] [--repeat 3] [DIR]
Without DIR it generates 40 clips of 10 s of machine-like sound.
Per-epoch time of ssae = (time of E+1 epochs - time of 1 epoch) / E, so
feature extraction, start-up and calibration are left out; the torch loop
is timed around its epochs only (features computed beforehand)."""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import ssae_torch as st  # noqa: E402
from gen_audio import normal, write_wav  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("dir", nargs="?")
ap.add_argument("--ssae", default="build/ssae")
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--batch", type=int, default=512)
a = ap.parse_args()
torch.set_num_threads(a.threads)

data = a.dir
if not data:
    data = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    for i in range(40):
        write_wav(os.path.join(data, "n%02d.wav" % i), normal(rng, 10.0))
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(data) for f in fs if f.endswith(".wav"))
X = torch.cat([st.windows(st.logmel(st.load_audio(p).double()).float(), 5) for p in files])
print("data: %d files, %d windows; epochs %d, batch %d, threads %d" %
      (len(files), len(X), a.epochs, a.batch, a.threads))
out = os.path.join(tempfile.mkdtemp(), "m.safetensors")


def ssae_run(epochs, threads):
    """(wall s, CPU s) of one `ssae train` run."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([a.ssae, "train", "-q", "-o", out, "--val", "0", "--epochs", str(epochs),
                    "--batch", str(a.batch), "--threads", str(threads), data],
                   check=True, capture_output=True)
    w = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return w, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def ssae_epoch(threads):
    w1, c1 = ssae_run(1, threads)
    wn, cn = ssae_run(a.epochs + 1, threads)
    return (wn - w1) / a.epochs, (cn - c1) / a.epochs


def torch_epoch(threads):
    """(wall s, CPU s) per epoch of the same recipe in PyTorch."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    lf = nn.MSELoss()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(a.epochs):
        perm = torch.randperm(len(X))
        for i in range(0, len(X), a.batch):
            xb = X[perm[i:i + a.batch]]
            opt.zero_grad()
            loss = lf(m(xb), xb)
            loss.backward()
            opt.step()
    return (time.perf_counter() - t) / a.epochs, (time.process_time() - c) / a.epochs


# Wall time per epoch with the same thread count, and CPU time per epoch
# with one thread each (robust on a shared machine, where wall time of
# threaded code depends on what else runs).
res = {k: [] for k in ("sw", "tw", "sc1", "tc1")}
for rep in range(a.repeat):
    sw, _ = ssae_epoch(a.threads)
    tw, _ = torch_epoch(a.threads)
    _, sc1 = ssae_epoch(1)
    _, tc1 = torch_epoch(1)
    for k, v in zip(("sw", "tw", "sc1", "tc1"), (sw, tw, sc1, tc1)):
        res[k].append(v)
    print("run %d: %d threads wall: ssae %.3f s/epoch, torch %.3f s/epoch (%.1fx); "
          "1 thread CPU: ssae %.3f s/epoch, torch %.3f s/epoch (%.1fx)" %
          (rep + 1, a.threads, sw, tw, tw / sw, sc1, tc1, tc1 / sc1))
md = {k: float(np.median(v)) for k, v in res.items()}
print("median: %d threads wall: ssae %.3f s/epoch (%.0f windows/s), torch %.3f s/epoch "
      "(%.0f windows/s), %.1fx; 1 thread CPU: ssae %.3f s/epoch (%.0f windows/CPU s), torch %.3f "
      "s/epoch (%.0f windows/CPU s), %.1fx" %
      (a.threads, md["sw"], len(X) / md["sw"], md["tw"], len(X) / md["tw"], md["tw"] / md["sw"],
       md["sc1"], len(X) / md["sc1"], md["tc1"], len(X) / md["tc1"], md["tc1"] / md["sc1"]))
