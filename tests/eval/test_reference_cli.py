"""The spectrum-only reference end to end: `ssae train` stores it in the
model (two extra tensors, equal to a Gaussian fitted here on the same
training windows from `ssae features`), `ssae eval` reports its AUC and
pAUC next to the network's (equal to evalref's on reference scores computed
here), says plainly when the network does not beat it (anomalies that only
change the level, built so that the reference wins), and says when a model
has no reference (the built-in one)."""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import wave
import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evalref import auc_pairs, pauc_mcclish  # noqa: E402
import ssae_testlib  # noqa: E402
from ssae_testlib import check  # noqa: E402

ssae, gen = os.environ["SSAE"], sys.argv[1]


def run(*args):
    return subprocess.run([ssae, *args], capture_output=True, text=True)


def tensors(path):
    """{name: (shape, [floats])} of a safetensors file."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    head = json.loads(blob[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        raw = blob[8 + n + b:8 + n + e]
        out[name] = (t["shape"], t["dtype"], list(struct.unpack("<%df" % (len(raw) // 4), raw)))
    return out


def frames_of(path, d):
    """The file's log-mel frames (rows of 64) through `ssae features`."""
    npy = os.path.join(d, "f.npy")
    r = run("features", path, "-o", npy)
    assert r.returncode == 0, r.stderr
    blob = open(npy, "rb").read()
    (hl,) = struct.unpack("<H", blob[8:10])
    head = blob[10:10 + hl].decode()
    rows, cols = [int(x) for x in head.split("(")[1].split(")")[0].split(",") if x.strip()]
    vals = struct.unpack("<%df" % (rows * cols), blob[10 + hl:10 + hl + 4 * rows * cols])
    return [vals[i * cols:(i + 1) * cols] for i in range(rows)]


def window_means(frames, F=5):
    M = len(frames[0])
    return [[sum(frames[w + f][m] for f in range(F)) / F for m in range(M)]
            for w in range(len(frames) - F + 1)]


def ref_file_score(frames, mean, var):
    ws = window_means(frames)
    M = len(mean)
    return sum(sum((x[m] - mean[m]) ** 2 / var[m] for m in range(M)) / M for x in ws) / len(ws)


def table(out):
    lines = out.strip().split("\n")
    head = lines[0].split("\t")
    return [dict(zip(head, ln.split("\t"))) for ln in lines[1:]]


def scale_wav(src, dst, factor):
    w = wave.open(src)
    params = w.getparams()
    a = array.array("h", w.readframes(w.getnframes()))
    w.close()
    o = wave.open(dst, "wb")
    o.setparams(params)
    o.writeframes(array.array("h", (int(x * factor) for x in a)).tobytes())
    o.close()


with tempfile.TemporaryDirectory() as d:
    subprocess.run([gen, "--set", d, "--train", "10", "--test", "6", "--seconds", "3",
                    "--seed", "3"], check=True, capture_output=True)
    model = os.path.join(d, "m.safetensors")
    r = run("train", "-q", "-o", model, "--epochs", "40", "--threads", "2", "--val", "0",
            os.path.join(d, "train"))
    check(r.returncode == 0, "train: %s" % r.stderr)

    # The reference in the model: the Gaussian of the training windows'
    # mean spectra (--val 0: every training file's windows).
    t = tensors(model)
    check("reference.mean" in t and "reference.var" in t, "reference tensors: %s" % list(t))
    mean, var = t["reference.mean"][2], t["reference.var"][2]
    check(t["reference.mean"][0] == [64] and t["reference.mean"][1] == "F32", "mean shape")
    ws = []
    for p in sorted(glob.glob(os.path.join(d, "train", "*.wav"))):
        ws += window_means(frames_of(p, d))
    n = len(ws)
    for m in range(64):
        mu = sum(x[m] for x in ws) / n
        v = max(sum((x[m] - mu) ** 2 for x in ws) / (n - 1), 1e-2)
        if abs(mean[m] - mu) > 1e-3 * max(1, abs(mu)) or abs(var[m] - v) > 1e-3 * v:
            check(False, "band %d: mean %g var %g, want %g %g" % (m, mean[m], var[m], mu, v))
            break

    # eval: the reference's AUC and pAUC next to the network's.
    normal, anomaly = os.path.join(d, "test/normal"), os.path.join(d, "test/anomaly")
    r = run("eval", "--model", model, "--normal", normal, "--anomaly", anomaly,
            "--backend", "cpu")
    check(r.returncode == 0, "eval: %s" % r.stderr)
    row = table(r.stdout)[0]
    scores, labels = [], []
    for lab, folder in ((0, normal), (1, anomaly)):
        for p in sorted(glob.glob(os.path.join(folder, "*.wav"))):
            scores.append(ref_file_score(frames_of(p, d), mean, var))
            labels.append(lab)
    want_auc, want_pauc = auc_pairs(scores, labels), pauc_mcclish(scores, labels, 0.1)
    check(abs(float(row["ref_auc"]) - want_auc) < 1e-6,
          "ref_auc %s, evalref %g" % (row["ref_auc"], want_auc))
    check(abs(float(row["ref_pauc"]) - want_pauc) < 1e-6,
          "ref_pauc %s, evalref %g" % (row["ref_pauc"], want_pauc))
    check(abs(float(row["auc_minus_ref"]) - (float(row["auc"]) - want_auc)) < 2e-6,
          "auc_minus_ref %s" % row["auc_minus_ref"])
    said = "beats" if float(row["auc"]) > want_auc else "does not beat"
    check("the network %s the spectrum-only reference on these files (AUC" % said in r.stderr,
          "eval's verdict: %s" % r.stderr)

    # Anomalies that only change the level (-0.9 dB): the reference finds
    # them all, the network (which looks at spectral shape) hardly; eval
    # says so, in the table, in JSON and in words.
    quiet = os.path.join(d, "quiet")
    os.mkdir(quiet)
    for i in range(6):
        src = os.path.join(d, "n%d.wav" % i)
        subprocess.run([gen, "--seed", str(900 + i), "--seconds", "3", "-o", src], check=True)
        scale_wav(src, os.path.join(quiet, "q%d.wav" % i), 0.9)
    r = run("eval", "--model", model, "--normal", normal, "--anomaly", quiet, "--backend", "cpu")
    row = table(r.stdout)[0]
    auc, ref_auc = float(row["auc"]), float(row["ref_auc"])
    check(ref_auc > auc, "the level-only case: reference AUC %g, network %g" % (ref_auc, auc))
    check("the network does not beat the spectrum-only reference on these files (AUC %.2f vs "
          "%.2f" % (auc, ref_auc) in r.stderr, "no plain statement: %s" % r.stderr)
    r = run("eval", "--model", model, "--normal", normal, "--anomaly", quiet, "--backend", "cpu",
            "--format", "json")
    js = json.loads(r.stdout)
    sec = js["sections"][0]
    check(js["reference"] and sec["beats_reference"] is False and
          abs(sec["reference_auc"] - ref_auc) < 1e-6 and
          abs(sec["auc_minus_reference"] - (auc - ref_auc)) < 2e-6, "json: %s" % sec)

    # A model without a reference (the built-in one): said, and nan/null.
    r = run("eval", "--normal", normal, "--anomaly", anomaly, "--backend", "cpu")
    check(r.returncode == 0 and "no reference in this model" in r.stderr, "old model: %s" % r.stderr)
    check(table(r.stdout)[0]["ref_auc"] == "nan", "old model: ref_auc %s" % table(r.stdout)[0])
    r = run("eval", "--normal", normal, "--anomaly", anomaly, "--backend", "cpu", "--format",
            "json")
    js = json.loads(r.stdout)
    check(js["reference"] is None and js["sections"][0]["reference_auc"] is None and
          js["sections"][0]["beats_reference"] is None, "old model json: %s" % js)

    # ssae report --reference: the reference's file score as a second line,
    # the one computed here; the built-in model has none.
    clip = sorted(glob.glob(os.path.join(anomaly, "*.wav")))[0]
    png = os.path.join(d, "r.png")
    r = run("report", "--model", model, "--reference", "--backend", "cpu", "-o", png, clip)
    if "without cairo" not in r.stderr:
        lines = r.stdout.split("\n")
        check(r.returncode == 0 and lines[1].startswith("  reference (spectrum only): file score "),
              "report --reference: %s %s" % (r.stdout, r.stderr))
        got = float(lines[1].split("file score ")[1].split(",")[0])
        want = ref_file_score(frames_of(clip, d), mean, var)
        check(abs(got - want) <= 1e-4 * want, "report's reference score %g, want %g" % (got, want))
        r = run("report", "--reference", "--backend", "cpu", "-o", png, clip)
        check("  reference: none in this model" in r.stdout, "report, old model: %s" % r.stdout)

    # A model saved again (ssae info reads it; the tensors survive a load).
    r = run("info", model)
    check(r.returncode == 0, "info: %s" % r.stderr)

failures = ssae_testlib.failures
print("reference: %s" % ("pass" if not failures else "%d failures" % failures))
sys.exit(1 if failures else 0)
