"""ssae train's command line: bad inputs get clear messages and the right
exit status; the unwritable output is refused before any work; Ctrl-C
stops after the current batch and still writes a valid model."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("skip: needs numpy")
    sys.exit(77)

from gen_audio import normal, write_wav

SSAE = os.environ["SSAE"]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(2)
good = os.path.join(tmp, "good")
os.makedirs(good)
for i in range(3):
    write_wav(os.path.join(good, "g%d.wav" % i), normal(rng, 1.0))
short = os.path.join(tmp, "short.wav")
write_wav(short, normal(rng, 0.05))
empty = os.path.join(tmp, "empty")
os.makedirs(empty)
with open(os.path.join(empty, "notes.txt"), "w") as f:
    f.write("not audio")
out = os.path.join(tmp, "m.safetensors")
fails = []


def train(*args, expect, says=(), timeout=120):
    r = subprocess.run([SSAE, "train"] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=timeout)
    msg = r.stderr.strip().splitlines()
    first = [l for l in msg if "ssae train" in l] or msg or [""]
    ok = r.returncode == expect and all(s in r.stderr for s in says)
    print("%-4s rc %d %-60s | %s" % ("ok" if ok else "FAIL", r.returncode, " ".join(map(str, args))[-60:],
                                     first[0][:150]))
    if not ok:
        fails.append("%s: rc %d, stderr %r" % (args, r.returncode, r.stderr[-400:]))
    return r


train("--help", expect=0)
train(good, expect=2, says=["-o MODEL"])
train("-o", out, expect=2, says=["no input"])
train("-o", out, "--epochs", "0", good, expect=2, says=["--epochs"])
train("-o", out, "--bogus", "1", good, expect=2, says=["unknown option --bogus"])
# --backend cuda: a usage error where CUDA is not built in (refused by the
# option parser, as every command's --backend cuda there); where it is, it
# trains on a GPU or says why it cannot (exit 1), never falls back silently
cfg = os.path.join(os.environ.get("SSAE_BUILD_ROOT", ""), "ssae_config.h")
have_cuda = os.path.exists(cfg) and "#define SSAE_HAVE_CUDA 1" in open(cfg).read()
if not have_cuda:
    train("-o", out, "--backend", "cuda", good, expect=2,
          says=["--backend cuda: this ssae was built without CUDA"])
else:
    r = subprocess.run([SSAE, "train", "-o", out, "--backend", "cuda", "--epochs", "1", good],
                       capture_output=True, text=True, timeout=120)
    ok = (r.returncode == 1 and "--backend cuda: CUDA" in r.stderr and
          "computing features" not in r.stderr) or \
         (r.returncode == 0 and "training on the GPU" in r.stderr)
    print("%-4s rc %d --backend cuda | %s" % ("ok" if ok else "FAIL", r.returncode,
                                              r.stderr.strip().splitlines()[-1][:150]))
    if not ok:
        fails.append("--backend cuda: rc %d, stderr %r" % (r.returncode, r.stderr[-400:]))
train("-o", out, "--pad-mode", "wrap", good, expect=2, says=["pad_mode"])
# no files
train("-o", out, empty, expect=1, says=["no audio files"])
train("-o", out, os.path.join(tmp, "missing.wav"), expect=1, says=["missing.wav"])
# too short for one window
train("-o", out, short, expect=1, says=["short.wav", "too short for one window", "no usable"])
# unwritable output: refused at once, before features are computed
t0 = time.time()
r = train("-o", os.path.join(tmp, "no", "such", "dir", "m.safetensors"), good, expect=1,
          says=["cannot write the model"])
if "computing features" in r.stderr:
    fails.append("the output path was checked only after the features")
train("-o", good, good, expect=1, says=["is a directory"])
ro = os.path.join(tmp, "ro")
os.makedirs(ro)
os.chmod(ro, 0o500)
if os.access(ro, os.W_OK):
    print("(running as root: the read-only directory case is skipped)")
else:
    train("-o", os.path.join(ro, "m.safetensors"), good, expect=1, says=["cannot write the model", "ermission"])
# a bad file among good ones: reported, the model is still written, exit 1
r = train("-o", out, "--epochs", "2", good, short, expect=1, says=["too short"])
if not os.path.exists(out):
    fails.append("no model written from the usable files")
os.remove(out) if os.path.exists(out) else None

# early stop: --patience ends the run once the validation loss stops falling
r = train("-o", out, "--epochs", "300", "--patience", "3", "--batch", "16", "--lr", "0.01",
          "--val", "0.34", good, expect=0, says=["early stop after epoch"])
if os.path.exists(out):
    # the kept epoch is in the metadata
    kept = re.search(r"keeping the weights of epoch (\d+)", r.stderr)
    info = subprocess.run([SSAE, "info", out], capture_output=True, text=True).stdout
    best = re.search(r"^\s*best_epoch\s+(\d+)$", info, re.M)
    if not kept or not best or kept.group(1) != best.group(1):
        fails.append("early stop: best_epoch %r, stderr says %r"
                     % (best and best.group(1), kept and kept.group(1)))
    os.remove(out)

# Ctrl-C: stops after the current batch, writes a valid model
big = os.path.join(tmp, "big")
os.makedirs(big)
for i in range(4):
    write_wav(os.path.join(big, "b%d.wav" % i), normal(rng, 4.0))
p = subprocess.Popen([SSAE, "train", "-o", out, "--epochs", "100000", "--batch", "8", "--threads", "1", big],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
# wait for the first finished epoch (plain log lines: stderr is not a terminal)
line = ""
deadline = time.time() + 60
while time.time() < deadline:
    line = p.stderr.readline()
    if line.startswith("epoch") or not line:
        break
p.send_signal(signal.SIGINT)
so, se = p.communicate(timeout=60)
print("Ctrl-C: rc %d, %s" % (p.returncode, (se.strip().splitlines() or [""])[-1][:120]))
if p.returncode != 0 or "interrupted" not in se or not os.path.exists(out):
    fails.append("Ctrl-C: rc %d stderr %r" % (p.returncode, se[-300:]))
else:
    try:
        import ssae_torch as st
        import torch
        model, meta = st.load_model(out)
        print("   model after Ctrl-C: threshold %s, stopped %s, epochs %s" %
              (meta.get("threshold"), meta.get("train_stopped"), meta.get("epochs")))
        if meta.get("train_stopped") != "interrupted" or not float(meta.get("threshold", "nan")) > 0:
            fails.append("Ctrl-C model metadata: %r" % meta)
        if not all(torch.isfinite(t).all() for t in model.state_dict().values()):
            fails.append("Ctrl-C model has non-finite weights")
    except ImportError:
        print("   (torch missing: the model file itself is not inspected)")

if fails:
    print("FAIL:\n  " + "\n  ".join(fails))
    sys.exit(1)
print("ok")
