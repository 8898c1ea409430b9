"""`ssae bench` on the CPU backend: the table's rows and the exit statuses
(a functional check; timings are never tested), and a batch slower than the
time asked (fewer calls, still a row)."""
import os
import subprocess
import sys

ssae = os.environ.get("SSAE")
if not ssae:
    print("SSAE not set: skipped")
    sys.exit(77)


def run(*args):
    return subprocess.run([ssae, "bench", *args], capture_output=True, text=True)


fails = 0
p = run("--backend", "cpu", "--batches", "1,3,17", "--seconds", "0.01")
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("cpu ")]
if p.returncode != 0 or [r[1] for r in rows] != ["1", "3", "17"]:
    print(f"FAIL: cpu rows: rc={p.returncode}\n{p.stdout}{p.stderr}")
    fails += 1
for r in rows:
    calls, wps, p50, p99 = int(r[2]), float(r[3]), float(r[4]), float(r[5])
    if not (calls >= 3 and wps > 0 and 0 < p50 <= p99):
        print(f"FAIL: row {r}")
        fails += 1
# A batch whose one call takes longer than ten times the time asked (a large
# batch on a small machine): a row of fewer calls, not an error.
p = run("--backend", "cpu", "--batches", "100000", "--seconds", "0.001")
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("cpu ")]
if p.returncode != 0 or len(rows) != 1 or not 1 <= int(rows[0][2]) <= 3:
    print(f"FAIL: slow batch: rc={p.returncode}\n{p.stdout}{p.stderr}")
    fails += 1
else:
    # windows/s over the timed calls, not the warm-up (the columns agree:
    # counting the warm-up in made it about half of n / p50 at one call)
    n, wps, p50 = int(rows[0][1]), float(rows[0][3]), float(rows[0][4])
    if not 0.6 <= wps * p50 * 1e-6 / n <= 1.6:
        print(f"FAIL: slow batch: windows/s {wps} against n / p50 {n / p50 * 1e6:.0f}")
        fails += 1
for bad in (["--batches", "0"], ["--batches", "1,x"], ["--seconds", "-1"],
            ["--backend", "tpu"], ["--frobnicate", "1"], ["--model"]):
    p = run(*bad)
    if p.returncode != 2 or "ssae bench:" not in p.stderr:
        print(f"FAIL: {bad}: rc={p.returncode} {p.stderr}")
        fails += 1
# --backend cuda in a build without CUDA: a usage error before any work (no
# table), as every other command's --backend cuda there; with CUDA it runs or
# says the device is missing, never that the build lacks it.
cfg = os.path.join(os.environ.get("SSAE_BUILD_ROOT", ""), "ssae_config.h")
have_cuda = os.path.exists(cfg) and "#define SSAE_HAVE_CUDA 1" in open(cfg).read()
p = run("--backend", "cuda", "--batches", "1", "--seconds", "0.01")
if have_cuda:
    ok = p.returncode in (0, 1) and "built without" not in p.stderr
else:
    ok = (p.returncode == 2 and not p.stdout and
          "--backend cuda: this ssae was built without CUDA (all or cpu here" in p.stderr)
if not ok:
    print(f"FAIL: --backend cuda (CUDA built in: {have_cuda}): rc={p.returncode}\n"
          f"{p.stdout}{p.stderr}")
    fails += 1
p = run("--model", "/nonexistent/model.safetensors", "--backend", "cpu")
if p.returncode != 1 or "nonexistent" not in p.stderr:
    print(f"FAIL: missing model: rc={p.returncode} {p.stderr}")
    fails += 1
p = run("--help")
if p.returncode != 0 or "usage: ssae bench" not in p.stdout:
    print("FAIL: --help")
    fails += 1
print("all passed" if not fails else f"{fails} failures")
sys.exit(1 if fails else 0)
