"""Benchmark (not a test): per-epoch training time of `ssae train` against
the same recipe in PyTorch (SPEC module, nn.MSELoss, Adam lr 1e-3, a new
randperm each epoch), same data, same epochs, same batch, run side by side.

usage: python3 tests/train/bench_train.py [--ssae build/ssae]
       [--device cpu|cuda] [--epochs 5] [--threads 2] [--repeat 3]
       [--clips 40] [DIR]
Without DIR it generates CLIPS clips of 10 s of machine-like sound.
Per-epoch time of ssae = (time of E+1 epochs - time of 1 epoch) / E, so
feature extraction, start-up, the upload to the GPU and calibration are
left out; the torch loop is timed around its epochs only (features computed
beforehand; on the GPU after one warm-up epoch, between
torch.cuda.synchronize() calls).

--device cpu: `ssae train --backend cpu` against torch on the CPU, wall time
with --threads threads each and CPU time with one thread each.
--device cuda: `ssae train --backend cuda` against torch on the GPU (model
and windows on the device, randperm on the device), wall time. An ssae
epoch there takes milliseconds, less than the spread of a process's start
(CUDA context, features), so its time per epoch is the training loop's own:
E+1 epochs over their elapsed time as its last log line reports it (from
the first step, after the upload, the first epoch included); the wall
difference of the two runs is printed beside it."""
import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "train"))  # gen_audio
sys.path.insert(0, os.path.join(HERE, ".."))  # ssae_torch
import ssae_torch as st  # noqa: E402
from gen_audio import normal, write_wav  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("dir", nargs="?")
ap.add_argument("--ssae", default="build/ssae")
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--batch", type=int, default=512)
ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
ap.add_argument("--clips", type=int, default=40)
a = ap.parse_args()
torch.set_num_threads(a.threads)

data = a.dir
if not data:
    data = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    for i in range(a.clips):
        write_wav(os.path.join(data, "n%02d.wav" % i), normal(rng, 10.0))
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(data) for f in fs if f.endswith(".wav"))


def features(path):
    """Log-mel frames: torchaudio's on the CPU run (as before); on the GPU
    host (torchaudio 2.11 loads audio only through torchcodec, absent there)
    ssae's own, `ssae features`, which agree with torchaudio to ~1e-3 dB."""
    if a.device == "cpu":
        return st.logmel(st.load_audio(path).double()).float()
    npy = os.path.join(tempfile.gettempdir(), "bench_train_%d.npy" % os.getpid())
    subprocess.run([a.ssae, "features", path, "-o", npy], check=True, capture_output=True)
    return torch.from_numpy(np.load(npy))


X = torch.cat([st.windows(features(p), 5) for p in files])
print("data: %d files, %d windows; epochs %d, batch %d, threads %d, device %s; torch %s" %
      (len(files), len(X), a.epochs, a.batch, a.threads, a.device, torch.__version__))
out = os.path.join(tempfile.mkdtemp(), "m.safetensors")


last_log = [""]


def ssae_run(epochs, threads, backend="cpu"):
    """(wall s, CPU s) of one `ssae train` run; its log in last_log (the GPU
    runs log, for the in-loop rate)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([a.ssae, "train", "-o", out, "--val", "0", "--epochs", str(epochs),
                        "--batch", str(a.batch), "--threads", str(threads), "--backend", backend,
                        data] + (["-q"] if backend == "cpu" else []),
                       check=True, capture_output=True, text=True)
    last_log[0] = r.stderr
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


def ssae_epoch_cuda():
    """Wall s per epoch (difference of two runs), and the training loop's own
    rate from its last log line (windows/s since the loop started: the
    upload and start-up left out, its first epoch in)."""
    w1, _ = ssae_run(1, a.threads, "cuda")
    wn, _ = ssae_run(a.epochs + 1, a.threads, "cuda")
    if "training on the GPU" not in last_log[0]:
        sys.exit("ssae did not train on the GPU: " + last_log[0][-300:])
    rate = float(re.findall(r"(\d+) windows/s", last_log[0])[-1])
    return (wn - w1) / a.epochs, len(X) / rate


def torch_epoch_cuda(Xd):
    """Wall s per epoch of the recipe on the GPU, after a warm-up epoch."""
    torch.manual_seed(0)
    m = st.SpectralShapeAutoencoder().cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    lf = nn.MSELoss()

    def epoch():
        perm = torch.randperm(len(Xd), device="cuda")
        for i in range(0, len(Xd), a.batch):
            xb = Xd[perm[i:i + a.batch]]
            opt.zero_grad()
            loss = lf(m(xb), xb)
            loss.backward()
            opt.step()
    epoch()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(a.epochs):
        epoch()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / a.epochs


if a.device == "cuda":
    Xd = X.cuda()
    print("GPU: %s; torch.backends.cuda.matmul.allow_tf32 = %s" %
          (torch.cuda.get_device_name(), torch.backends.cuda.matmul.allow_tf32))
    sw_l, si_l, tw_l = [], [], []
    for rep in range(a.repeat):
        (sw, si), tw = ssae_epoch_cuda(), torch_epoch_cuda(Xd)
        sw_l.append(sw)
        si_l.append(si)
        tw_l.append(tw)
        print("run %d: GPU: ssae %.4f s/epoch in its loop (wall difference %.4f), torch %.4f "
              "s/epoch: %.1fx" % (rep + 1, si, sw, tw, tw / si))
    sw, si, tw = (float(np.median(v)) for v in (sw_l, si_l, tw_l))
    # An epoch on the GPU takes milliseconds, less than the run-to-run
    # spread of a process's start (CUDA context, features): the wall
    # difference is printed, the ratio uses the loop's own rate.
    print("median: GPU: ssae %.4f s/epoch (%.0f windows/s; wall difference %.4f s/epoch), torch "
          "%.4f s/epoch (%.0f windows/s): %.1fx" % (si, len(X) / si, sw, tw, len(X) / tw, tw / si))
    sys.exit(0)

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
