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


def run(scores, labels, thr, max_fpr):
    inp = "".join(f"{s!r} {l}\n" for s, l in zip(scores, labels))
    p = subprocess.run([tool, repr(thr), repr(max_fpr)], input=inp, capture_output=True,
                       text=True)
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    return p.returncode, out


failures = 0


def check(name, got, want, tol=1e-12):
    global failures
    if abs(got - want) > tol:
        print(f"FAIL {name}: got {got!r}, want {want!r}")
        failures += 1


# A case worked by hand: ROC (0,0) (0,.5) (.5,.5) (.5,1) (1,1); AUC 0.75; the
# area up to FPR 0.1 is 0.05, so pAUC = 0.5 (1 + (0.05 - 0.005) / 0.095).
rc, out = run([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.3, 0.1)
check("hand auc", float(out["auc"]), 0.75)
check("hand pauc", float(out["pauc"]), 0.5 * (1 + 0.045 / 0.095))
check("hand precision", float(out["precision"]), 2 / 3)

# All tied: the ROC is the diagonal, AUC 0.5 and the McClish pAUC 0.5.
rc, out = run([1.0] * 6, [0, 1, 0, 1, 0, 1], 2.0, 0.1)
check("tied auc", float(out["auc"]), 0.5)
check("tied pauc", float(out["pauc"]), 0.5)
check("tied f1 (nothing called anomalous)", float(out["f1"]), 0.0)

rng = random.Random(7)
for case in range(150):
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
    rc, out = run(scores, labels, thr, max_fpr)
    if rc:
        print("FAIL case", case, out)
        failures += 1
        continue
    check(f"case {case} auc", float(out["auc"]), auc_pairs(scores, labels))
    check(f"case {case} pauc", float(out["pauc"]), pauc_mcclish(scores, labels, max_fpr))
    p, r, f = prf(scores, labels, thr)
    check(f"case {case} precision", float(out["precision"]), p)
    check(f"case {case} recall", float(out["recall"]), r)
    check(f"case {case} f1", float(out["f1"]), f)

# One class only: an error, not a number.
rc, out = run([0.1, 0.2], [0, 0], 0.5, 0.1)
if rc == 0 or "error" not in out:
    print("FAIL: one class accepted", out)
    failures += 1

print("failures:", failures)
sys.exit(1 if failures else 0)
