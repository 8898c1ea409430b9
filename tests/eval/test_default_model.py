"""The default model detects the generated anomalies: AUC >= 0.95 on a test
set from tools/ssae-gen (seeds the default model never saw in training)."""
import json
import os
import subprocess
import sys
import tempfile

ssae, gen = os.environ["SSAE"], sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    subprocess.run([gen, "--set", d, "--train", "0", "--test", "12", "--seconds", "4",
                    "--seed", "2026"], check=True)
    scores = os.path.join(d, "scores.tsv")
    p = subprocess.run([ssae, "eval", "--normal", os.path.join(d, "test/normal"),
                        "--anomaly", os.path.join(d, "test/anomaly"), "--format", "json",
                        "--scores", scores, "--backend", "cpu"], capture_output=True, text=True)
    if p.returncode:
        print(p.stderr)
        sys.exit(1)
    s = json.loads(p.stdout)["sections"][0]
    print(json.dumps(s))
    for line in open(scores).read().splitlines()[1:]:
        print(line)
    ok = s["auc"] >= 0.95
    print("AUC", s["auc"], "pAUC", s["pauc"], "ok" if ok else "FAIL: below 0.95")
    sys.exit(0 if ok else 1)
