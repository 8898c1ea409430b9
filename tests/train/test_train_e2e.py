"""ssae train on generated machine sound against the same recipe trained in
PyTorch: held-out AUC(ssae) >= AUC(torch) - 0.02; the model file loads into
the PyTorch module and gives ssae's scores; the threshold is the gamma fit's
quantile; same seed gives the same weights whatever the thread count."""
import os
import subprocess
import sys
import tempfile

from ssae_ref import np, torch, nn, NAMES, probe, write, read, finish
from gen_audio import auc, make_set

try:
    import ssae_torch as st
    import torchaudio  # noqa: F401
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

SSAE = os.environ["SSAE"]
P = probe()
torch.set_num_threads(2)
STRENGTH = float(os.environ.get("SSAE_TEST_ANOMALY_STRENGTH", "0.3"))
tmp = tempfile.mkdtemp()
train_dir, test_norm, test_anom = make_set(tmp, STRENGTH)

EPOCHS, BATCH, SEED = 25, 64, 3
model_path = os.path.join(tmp, "m.safetensors")
cmd = [SSAE, "train", "-o", model_path, "--epochs", str(EPOCHS), "--batch", str(BATCH),
       "--seed", str(SEED), "--val", "0", "--threads", "2", train_dir]
r = subprocess.run(cmd, capture_output=True, text=True)
print(r.stdout, r.stderr[-600:])
if r.returncode:
    sys.exit(1)
fails = []

model64, meta = st.load_model(model_path, torch.float64)
feats = {}


def windows_of(path):
    if path not in feats:
        wave = st.load_audio(path).to(torch.float64)
        feats[path] = st.windows(st.logmel(wave, meta), int(meta.get("frames", 5))).to(torch.float32)
    return feats[path]


def file_scores(model, paths):
    return np.array([float(st.window_scores(model, windows_of(p)).mean()) for p in paths])


# 1. ssae's model in the PyTorch module gives ssae's window scores
flat = np.concatenate([model64.state_dict()[k].numpy().astype(np.float32).ravel() for k in NAMES])
write(os.path.join(tmp, "p"), flat)
x = torch.cat([windows_of(p) for p in test_norm[:2] + test_anom[:2]])
write(os.path.join(tmp, "x"), x.numpy())
r = subprocess.run([str(a) for a in (P, "scores", meta["n_mels"], meta["frames"], meta["latent_dim"],
                    meta["slice_latent_dim"], 2, os.path.join(tmp, "p"), os.path.join(tmp, "x"),
                    os.path.join(tmp, "s"))], capture_output=True, text=True)
ours = read(os.path.join(tmp, "s"))
ref = st.window_scores(model64, x).numpy()
e = np.max(np.abs(ours - ref) / ref)
print("window scores, ssae vs torch module with ssae's weights: max rel err %.2e" % e)
if r.returncode or not e <= 1e-5:
    fails.append("scores of the loaded model differ: %.3g" % e)

# ... and `ssae score` with the model gives the module's file scores (ssae's
# own features: 1e-3) and verdicts at the stored threshold
r = subprocess.run([SSAE, "score", "--model", model_path] + test_norm[:3] + test_anom[:3],
                   capture_output=True, text=True)
if r.returncode not in (0, 1):
    fails.append("ssae score failed: %s" % r.stderr[-300:])
else:
    thr_m = float(meta["threshold"])
    for line in r.stdout.strip().splitlines():
        path, score, nwin, verdict = line.split("\t")[:4]
        ref_s = float(st.window_scores(model64, windows_of(path)).mean())
        e = abs(float(score) - ref_s) / ref_s
        want = "anomaly" if float(score) > thr_m else "normal"
        if not (e <= 1e-3 and verdict == want):
            fails.append("ssae score %s: %s %s vs module %.6g (thr %.6g)" % (path, score, verdict, ref_s, thr_m))
    print("ssae score: %d files agree with the module (rel 1e-3) and the threshold" %
          len(r.stdout.strip().splitlines()))

# 2. AUC against the same recipe in PyTorch (same features, epochs, batch, lr)
s_norm, s_anom = file_scores(model64, test_norm), file_scores(model64, test_anom)
auc_ssae = auc(s_norm, s_anom)
torch.manual_seed(SEED)
tm = st.SpectralShapeAutoencoder(int(meta["n_mels"]), int(meta["frames"]),
                                 int(meta["latent_dim"]), int(meta["slice_latent_dim"]))
X = torch.cat([windows_of(os.path.join(train_dir, f)) for f in sorted(os.listdir(train_dir))])
opt = torch.optim.Adam(tm.parameters(), lr=1e-3)
lf = nn.MSELoss()
g = torch.Generator().manual_seed(SEED)
for ep in range(EPOCHS):
    perm = torch.randperm(len(X), generator=g)
    for i in range(0, len(X), BATCH):
        xb = X[perm[i:i + BATCH]]
        opt.zero_grad()
        loss = lf(tm(xb), xb)
        loss.backward()
        opt.step()
tm.eval()
auc_torch = auc(file_scores(tm, test_norm), file_scores(tm, test_anom))
print("AUC ssae %.4f, AUC torch %.4f (final torch loss %.4g)" % (auc_ssae, auc_torch, loss.item()))
if not auc_ssae >= auc_torch - 0.02:
    fails.append("AUC %.4f < torch %.4f - 0.02" % (auc_ssae, auc_torch))

# 3. threshold: the fitted gamma's quantile, fitted to the training files' scores
thr = float(meta["threshold"])
k, scale = float(meta["gamma_shape"]), float(meta["gamma_scale"])
pct = float(meta["threshold_percentile"])
back = torch.special.gammainc(torch.tensor(k, dtype=torch.float64),
                              torch.tensor(thr / scale, dtype=torch.float64)).item()
tr_scores = file_scores(model64, [os.path.join(train_dir, f) for f in sorted(os.listdir(train_dir))])
lhs = np.log(k) - torch.digamma(torch.tensor(k, dtype=torch.float64)).item()
rhs = np.log(tr_scores.mean()) - np.log(tr_scores).mean()
print("threshold %.6g: P(shape, thr/scale) = %.6f (percentile %g); MLE eq. %.5g vs %.5g; "
      "mean k*scale %.6g vs %.6g" % (thr, back, pct, lhs, rhs, k * scale, tr_scores.mean()))
if not (abs(back - pct) < 1e-6 and pct == 0.9 and meta["threshold_method"].startswith("gamma")):
    fails.append("threshold is not the gamma quantile")
if not (abs(lhs - rhs) <= 1e-3 * abs(rhs) + 1e-6 and abs(k * scale / tr_scores.mean() - 1) < 1e-3):
    fails.append("gamma parameters are not the fit of the training files' scores")
for key in ("train_files", "train_windows", "epochs", "seed", "final_loss", "ssae_version",
            "train_date", "gamma_loc"):
    if key not in meta:
        fails.append("metadata lacks %s" % key)
if meta.get("train_files") != "10" or meta.get("epochs") != str(EPOCHS) or meta.get("seed") != str(SEED):
    fails.append("provenance wrong: %r" % {k: meta.get(k) for k in ("train_files", "epochs", "seed")})

# 4. determinism: 1 thread gives the same weights bit for bit
m2 = os.path.join(tmp, "m2.safetensors")
r = subprocess.run(cmd[:3] + [m2] + cmd[4:-3] + ["--threads", "1", "-q", train_dir],
                   capture_output=True, text=True)
t1, _ = st.read_safetensors(model_path)
t2, _ = st.read_safetensors(m2)
same = r.returncode == 0 and all(torch.equal(t1[n], t2[n]) for n in NAMES)
print("threads 2 vs 1: %s" % ("identical" if same else "DIFFERENT"))
if not same:
    fails.append("same seed, other thread count: weights differ")

finish(fails)
