"""`ssae eval` end to end on generated recordings: its AUC, pAUC,
precision, recall and F1 against evalref's first-principles computation on
the per-file scores it reports (--scores), those scores against `ssae score`,
sections, CSV input, a bad file skipped with exit 1, a folder that is not
there, usage errors, --plot."""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evalref import auc_pairs, pauc_mcclish, prf  # noqa: E402
from ssae_testlib import check, done  # noqa: E402

ssae, gen = os.environ["SSAE"], sys.argv[1]


def run(*args):
    return subprocess.run([ssae, *args], capture_output=True, text=True)


def close(a, b, tol=1e-6):
    return a is not None and b is not None and abs(a - b) <= tol


with tempfile.TemporaryDirectory() as d:
    subprocess.run([gen, "--set", d, "--train", "0", "--test", "6", "--seconds", "2",
                    "--seed", "5"], check=True)
    normal, anomaly = os.path.join(d, "test/normal"), os.path.join(d, "test/anomaly")
    scores_tsv = os.path.join(d, "scores.tsv")
    plot = os.path.join(d, "eval.png")
    config = open(os.path.join(os.environ["SSAE_BUILD_ROOT"], "ssae_config.h")).read()
    cairo = "SSAE_HAVE_CAIRO 1" in config
    if not cairo:
        p = run("eval", "--normal", normal, "--anomaly", anomaly, "--plot", plot)
        check(p.returncode == 2 and "without cairo" in p.stderr, "--plot without cairo")
    p = run("eval", "--normal", normal, "--anomaly", anomaly, "--format", "json",
            "--scores", scores_tsv, *(["--plot", plot] if cairo else []), "--backend", "cpu")
    check(p.returncode == 0, f"eval rc {p.returncode}: {p.stderr}")
    out = json.loads(p.stdout)
    check(len(out["sections"]) == 1, "one section")
    s = out["sections"][0]
    check(s["n_normal"] == 6 and s["n_anomaly"] == 6, f"counts {s}")
    rows = [line.split("\t") for line in open(scores_tsv).read().splitlines()[1:]]
    check(len(rows) == 12, f"{len(rows)} scores")
    sc = [float(r[3]) for r in rows]
    lab = [1 if r[2] == "anomaly" else 0 for r in rows]
    check(close(s["auc"], auc_pairs(sc, lab)), f"auc {s['auc']} vs {auc_pairs(sc, lab)}")
    check(close(s["pauc"], pauc_mcclish(sc, lab, 0.1)), f"pauc {s['pauc']}")
    thr = s["threshold"]
    if thr is not None:
        pr, rc, f1 = prf(sc, lab, thr)
        check(close(s["precision"], pr) and close(s["recall"], rc) and close(s["f1"], f1),
              f"p/r/f1 {s} vs {pr} {rc} {f1}")
    # A threshold of our own between the classes' medians, so that the
    # confusion counts are not trivially all-or-nothing.
    # (Halfway between two scores: one read back from the 9-digit TSV may sit
    # either side of its exact value.)
    srt = sorted(sc)
    mid = (srt[len(sc) // 2 - 1] + srt[len(sc) // 2]) / 2
    p = run("eval", "--normal", normal, "--anomaly", anomaly, "--format", "json",
            "--threshold", repr(mid), "--backend", "cpu")
    s2 = json.loads(p.stdout)["sections"][0]
    pr, rc, f1 = prf(sc, lab, mid)
    check(close(s2["precision"], pr) and close(s2["recall"], rc) and close(s2["f1"], f1)
          and s2["tp"] + s2["fp"] + s2["tn"] + s2["fn"] == 12, f"own threshold {s2}")

    # The same file scores as `ssae score` (when that command is built).
    if run("score", "--help").returncode == 0:
        p = run("score", "--backend", "cpu", normal, anomaly)
        got = {}
        for line in p.stdout.splitlines():
            f = line.split("\t")
            try:
                got[f[0]] = float(f[1])
            except (ValueError, IndexError):
                pass
        for r in rows:
            check(r[1] in got and math.isclose(got[r[1]], float(r[3]), rel_tol=1e-5),
                  f"ssae score differs for {r[1]}: {got.get(r[1])} vs {r[3]}")

    # TSV, and two sections plus the pooled one.
    p = run("eval", "--normal", normal, "--anomaly", anomaly, "--normal", normal,
            "--anomaly", anomaly, "--backend", "cpu")
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and lines[0].startswith("section\tnormal\tanomaly\tn_normal"),
          f"tsv header {lines[:1]}")
    check([l.split("\t")[0] for l in lines[1:]] == ["1", "2", "all"], f"sections {lines}")
    hdr = lines[0].split("\t")
    allrow = dict(zip(hdr, lines[-1].split("\t")))
    check(allrow["n_normal"] == "12" and close(float(allrow["auc"]), s["auc"], 1e-5),
          f"pooled {allrow}")

    # CSV input gives the same numbers.
    p = run("eval", "--csv", os.path.join(d, "test/labels.csv"), "--format", "json",
            "--backend", "cpu")
    c = json.loads(p.stdout)["sections"][0] if p.returncode == 0 else {}
    check(close(c.get("auc"), s["auc"]) and c.get("n_anomaly") == 6, f"csv {p.stderr} {c}")

    # A bad file is named, skipped, and makes the exit status 1.
    bad_dir = os.path.join(d, "with_bad")
    shutil.copytree(normal, bad_dir)
    open(os.path.join(bad_dir, "broken.wav"), "wb").write(b"RIFF\x10\x00\x00\x00WAVEjunk")
    p = run("eval", "--normal", bad_dir, "--anomaly", anomaly, "--format", "json",
            "--backend", "cpu")
    check(p.returncode == 1, f"bad file rc {p.returncode}")
    check("broken.wav" in p.stderr, f"bad file not named: {p.stderr}")
    s3 = json.loads(p.stdout)["sections"][0]
    check(s3["n_normal"] == 6 and close(s3["auc"], s["auc"]), f"rest not evaluated {s3}")

    # A folder that is not there is named with its option, not counted as a
    # file skipped; the other section is still evaluated.
    missing = os.path.join(d, "anomalous_typo")
    p = run("eval", "--normal", normal, "--anomaly", missing, "--normal", normal,
            "--anomaly", anomaly, "--format", "json", "--backend", "cpu")
    check(p.returncode == 1, f"missing folder rc {p.returncode}")
    check(f"--anomaly {missing}: No such file or directory" in p.stderr
          and "skipped" not in p.stderr, f"missing folder message: {p.stderr}")
    secs = json.loads(p.stdout)["sections"] if p.stdout.strip() else []
    check(len(secs) >= 2 and close(secs[1].get("auc"), s["auc"]),
          f"the good section after a missing folder: {secs}")

    # Usage errors.
    check(run("eval", "--normal", normal).returncode == 2, "unpaired --normal")
    check(run("eval", "--normal", normal, "--anomaly", anomaly, "--format", "xml").returncode == 2,
          "bad format")
    check(run("eval").returncode == 2, "nothing to evaluate")
    check(run("eval", "--help").returncode == 0, "--help")

    # The plot: a PNG of the documented size.
    head = open(plot, "rb").read(24) if os.path.exists(plot) else b""
    check(not cairo or (head[:8] == b"\x89PNG\r\n\x1a\n"
                        and struct.unpack(">II", head[16:24]) == (1200, 560)), "plot png")

done()
