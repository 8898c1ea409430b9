"""The cluster examples in tools/cluster: the Kubernetes manifests parse and
agree with themselves (an Indexed Job whose completions equal the
SSAE_SHARD_COUNT it gives ssae, the merge job the same count), the
Slurm scripts are valid bash, and every option the examples give
`ssae score` and `ssae merge` is one their --help lists. (tests/cluster/slurm_test.sh submits to a
real Slurm.)"""
import os
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml missing")
    sys.exit(77)

root = os.path.join(os.environ["SSAE_SOURCE_ROOT"], "tools", "cluster")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def one_job(name):
    with open(os.path.join(root, name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    check(len(docs) == 1 and docs[0]["kind"] == "Job"
          and docs[0]["apiVersion"] == "batch/v1", f"{name}: one batch/v1 Job")
    return docs[0]


score = one_job("ssae-score-k8s.yaml")
spec = score["spec"]
check(spec.get("completionMode") == "Indexed", "score job: completionMode Indexed")
c = spec["template"]["spec"]["containers"][0]
count = env_of(c).get("SSAE_SHARD_COUNT")
check(count == str(spec["completions"]),
      f"score job: SSAE_SHARD_COUNT {count} is not completions {spec['completions']}")
args = " ".join(c["command"] + c["args"])
for want in ("--shard auto", "--resume", "--files-from", "$JOB_COMPLETION_INDEX"):
    check(want in args, f"score job: '{want}' not in its command")
vols = {v["name"] for v in spec["template"]["spec"]["volumes"]}
check(all(m["name"] in vols for m in c["volumeMounts"]), "score job: mounts name its volumes")

merge = one_job("ssae-merge-k8s.yaml")
m = merge["spec"]["template"]["spec"]["containers"][0]
check(env_of(m).get("SSAE_SHARD_COUNT") == count, "merge job: the score job's count")
check("ssae merge" in " ".join(m["args"]), "merge job runs ssae merge")

for script in ("ssae-score.sbatch", "ssae-submit.sh"):
    r = subprocess.run(["bash", "-n", os.path.join(root, script)], capture_output=True, text=True)
    check(r.returncode == 0, f"{script}: bash -n: {r.stderr}")
r = subprocess.run(["bash", os.path.join(root, "ssae-submit.sh"), "--help"],
                   capture_output=True, text=True)
check(r.returncode == 0 and "usage: ssae-submit.sh" in r.stdout, "ssae-submit.sh --help")
r = subprocess.run(["bash", os.path.join(root, "ssae-submit.sh"), "--bogus"],
                   capture_output=True, text=True)
check(r.returncode == 2 and "unknown option '--bogus'" in r.stderr
      and "usage: ssae-submit.sh" in r.stderr, "ssae-submit.sh --bogus")

# The options the examples pass are the commands' own: every --long
# option of ssae-score.sbatch's code (its options are all ssae score's),
# and the --long and -o words of the Kubernetes commands and of
# ssae-submit.sh's merge line.
import re  # noqa: E402

ssae = os.environ.get("SSAE")
if ssae:
    helps = {cmd: subprocess.run([ssae, cmd, "--help"], capture_output=True, text=True).stdout
             for cmd in ("score", "merge")}
    with open(os.path.join(root, "ssae-score.sbatch")) as f:
        sbatch = " ".join(ln for ln in f.read().split("\n") if not ln.lstrip().startswith("#"))
    with open(os.path.join(root, "ssae-submit.sh")) as f:
        submit = " ".join(ln for ln in f.read().split("\n")
                          if "merge --" in ln or ln.startswith("-o"))
    uses = [("ssae-score.sbatch", "score", re.findall(r"(?<!\S)--[a-z][a-z-]*", sbatch)),
            ("ssae-score-k8s.yaml", "score",
             re.findall(r"(?<!\S)(?:--[a-z][a-z-]*|-o)(?!\S)", " ".join(c["args"]))),
            ("ssae-merge-k8s.yaml", "merge",
             re.findall(r"(?<!\S)(?:--[a-z][a-z-]*|-o)(?!\S)", " ".join(m["args"]))),
            ("ssae-submit.sh", "merge",
             re.findall(r"(?<!\S)(?:--[a-z][a-z-]*|-o)(?!\S)", submit.split("merge", 1)[-1]))]
    for name, cmd, opts in uses:
        check(opts, f"{name}: no ssae {cmd} options found")
        for w in opts:
            check(re.search(r"(^|[\s,])%s\b" % re.escape(w), helps[cmd], re.M) is not None,
                  f"{name}: ssae {cmd} has no option {w}")

print("pass" if not failures else f"{len(failures)} failed")
sys.exit(1 if failures else 0)
