"""ssae_metrics (AUC with ties, McClish pAUC as scikit-learn computes it,
precision/recall/F1 at a threshold) against a computation from first
principles: Mann-Whitney pair counting for the AUC, and for the pAUC the
area under the ROC polyline clipped segment by segment at max_fpr."""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evalref import auc_pairs, pauc_mcclish, prf  # noqa: E402

tool = sys.argv[1]


KEYS = ["auc", "pauc", "tp", "fp", "tn", "fn", "precision", "recall", "f1"]
cases = []  # (name, scores, labels, thr, max_fpr)


def run_all():
    inp = "".join(f"{thr!r} {mf!r} {len(sc)}\n" + "".join(f"{v!r} {l}\n" for v, l in zip(sc, lab))
                  for _, sc, lab, thr, mf in cases)
    p = subprocess.run([tool], input=inp, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    if p.returncode or len(lines) != len(cases):
        print("FAIL: metrics_tool", p.returncode, p.stderr)
        sys.exit(1)
    return [{"error": l} if l.startswith("error") else dict(zip(KEYS, l.split())) for l in lines]


failures = 0


def check(name, got, want, tol=1e-12):
    global failures
    if abs(got - want) > tol:
        print(f"FAIL {name}: got {got!r}, want {want!r}")
        failures += 1


cases.append(("hand", [0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.3, 0.1))
cases.append(("tied", [1.0] * 6, [0, 1, 0, 1, 0, 1], 2.0, 0.1))
cases.append(("one class", [0.1, 0.2], [0, 0], 0.5, 0.1))
cases.append(("nan score", [0.1, float("nan"), 0.3], [0, 1, 1], 0.5, 0.1))
rng = random.Random(7)
for case in range(300):
    n_neg, n_pos = rng.randint(1, 40), rng.randint(1, 40)
    levels = rng.choice([3, 5, 10, 1000])  # few levels: many ties
    labels = [0] * n_neg + [1] * n_pos
    scores = [rng.randint(0, levels) / levels + (0.3 * rng.randint(0, levels) / levels if l else 0)
              for l in labels]
    pairs = list(zip(scores, labels))
    rng.shuffle(pairs)
    scores, labels = [p[0] for p in pairs], [p[1] for p in pairs]
    thr = rng.choice(scores) if rng.random() < 0.7 else rng.random()
    max_fpr = rng.choice([0.1, 0.1, 0.05, 0.3, 1.0])
    cases.append((f"case {case}", scores, labels, thr, max_fpr))

results = run_all()
for (name, scores, labels, thr, max_fpr), out in zip(cases, results):
    if name in ("one class", "nan score"):
        check(name + " refused", 1 if "error" in out else 0, 1)
        continue
    if "error" in out:
        print("FAIL", name, out)
        failures += 1
        continue
    if name == "hand":
        # ROC (0,0) (0,.5) (.5,.5) (.5,1) (1,1): AUC 0.75; the area up to
        # FPR 0.1 is 0.05, so pAUC = 0.5 (1 + (0.05 - 0.005) / 0.095).
        check("hand auc", float(out["auc"]), 0.75)
        check("hand pauc", float(out["pauc"]), 0.5 * (1 + 0.045 / 0.095))
        check("hand precision", float(out["precision"]), 2 / 3)
    if name == "tied":
        # All tied: the ROC is the diagonal, AUC 0.5, McClish pAUC 0.5.
        check("tied auc", float(out["auc"]), 0.5)
        check("tied pauc", float(out["pauc"]), 0.5)
    check(f"{name} auc", float(out["auc"]), auc_pairs(scores, labels))
    check(f"{name} pauc", float(out["pauc"]), pauc_mcclish(scores, labels, max_fpr))
    p, r, f = prf(scores, labels, thr)
    check(f"{name} precision", float(out["precision"]), p)
    check(f"{name} recall", float(out["recall"]), r)
    check(f"{name} f1", float(out["f1"]), f)
    tp = sum(1 for s, l in zip(scores, labels) if s > thr and l)
    check(f"{name} tp", int(out["tp"]), tp)

print("cases:", len(cases), "failures:", failures)
sys.exit(1 if failures else 0)
