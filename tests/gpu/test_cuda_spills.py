"""tools/cuda-spills.py on this build: it compiles ssae_cuda_train.cu as the
build does and reports k_vjp_tc once per architecture of -Dgpu_sm, with
numbers; an unknown source and a folder without a build are refused with
a message. Needs nvcc (the build's), no GPU.
    test_cuda_spills.py TOOL BUILD GPU_SM"""
import os
import re
import subprocess
import sys
import tempfile

tool, build, sms = sys.argv[1], sys.argv[2], sys.argv[3]
if not os.path.exists(os.path.join(build, "compile_commands.json")):
    print("skip: no compile_commands.json in %s" % build)
    sys.exit(77)
r = subprocess.run([sys.executable, tool, build, "--source", "ssae_cuda_train.cu",
                    "--kernel", "^k_vjp_tc$"], capture_output=True, text=True, timeout=280)
print(r.stdout)
assert r.returncode == 0, r.stderr
rows = [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
archs = sorted("sm_" + s.strip() for s in sms.split(";") if s.strip())
got = sorted(row[0] for row in rows)
assert got == archs, (got, archs)
for row in rows:
    assert row[1] == "k_vjp_tc" and all(re.fullmatch(r"\d+", v) for v in row[2:6]), row
    assert int(row[2]) <= 255, row
    assert row[6] == "ssae_cuda_train.cu", row
bad = subprocess.run([sys.executable, tool, build, "--source", "nothing.cu"],
                     capture_output=True, text=True)
assert bad.returncode == 2 and "no CUDA source named nothing.cu" in bad.stderr, bad.stderr
with tempfile.TemporaryDirectory() as empty:
    bad = subprocess.run([sys.executable, tool, empty], capture_output=True, text=True)
    assert bad.returncode == 2 and "configure the build first" in bad.stderr, bad.stderr
print("ok: k_vjp_tc on %s" % ", ".join(archs))
