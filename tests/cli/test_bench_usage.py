"""The bench tools' usage (tools/bench: engine_bench, copy_bench,
host_jitter, loss_bench, step_kernels.py, kernel_sass.py, step_trace.py), as
the commands': --help prints it on stdout with status 0, an unknown option
is named on stderr with status 2, with the usage where --help's text is one
("usage: ..."; engine_bench's is a synopsis); nothing is measured either
way (copy_bench took --help for a run, host_jitter for a bad thread count).
meson's should_fail would take any failure, a crash included. Arguments:
the tools' paths. Standard library only."""
import os
import subprocess
import sys

failures = []


def run(tool, *args):
    """rc, stdout, stderr; a tool that measures instead runs past 10 s."""
    try:
        p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=10)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "(still running after 10 s: measuring?)"


def check(ok, what, out, err):
    print(f"{'ok' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(f"{what}: stdout {out[:300]!r} stderr {err[:300]!r}")


for tool in sys.argv[1:]:
    name = os.path.basename(tool)
    rc, out, err = run(tool, "--help")
    first = (out.splitlines() or [""])[0]
    check(rc == 0 and not err and (first.startswith(f"usage: {name} ") or
                                   first.startswith(f"{name} [")),
          f"{name} --help: rc {rc}", out, err)
    usage = first if first.startswith("usage:") else ""
    rc, out, err = run(tool, "--no-such-option", "1")
    check(rc == 2 and not out and "--no-such-option" in err and usage in err,
          f"{name} --no-such-option 1: rc {rc}", out, err)
if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
