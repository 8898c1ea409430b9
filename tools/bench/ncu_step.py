"""What step_kernels.py, kernel_sass.py and step_trace.py share: the drop-in module's fused
training step (zero_grad, model.reconstruction_backward(x) on CUDA tensors)
as a script for Nsight Compute to run, three steps unprofiled and then the
profiled ones between torch.cuda.profiler.start and stop; and ncu itself,
found and run on a build tree's Python package (BUILD/python)."""
import os
import shutil
import subprocess
import sys

# The step's setup, shared with step_trace.py's script: the module and a
# batch on the GPU (exit 77 without one), argv: windows, steps; step().
STEP_SETUP = r"""
import sys, torch
if not torch.cuda.is_available():
    sys.exit(77)
import ssae.torch as st
n, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
m = st.SpectralShapeAutoencoder().cuda()
x = (torch.randn(n, m.frames * m.n_mels) * 12 - 40).cuda()
def step():
    m.zero_grad(set_to_none=True)
    m.reconstruction_backward(x)
"""

STEP = STEP_SETUP + r"""
for _ in range(3):
    step()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for _ in range(steps):
    step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def find_ncu(given):
    """The ncu command: GIVEN where it runs, else ncu on PATH, else CUDA's;
    None without one."""
    if given:
        return given if shutil.which(given) else None
    return shutil.which("ncu") or shutil.which("/usr/local/cuda/bin/ncu")


def build_env(build):
    """The environment with BUILD's Python package (BUILD/python) first on
    PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(build, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_step(ncu, build, ncu_args, size, steps):
    """ncu NCU_ARGS over STEP on BUILD's package, SIZE windows, STEPS
    profiled steps: ncu's standard output, or None when the step found no
    CUDA device (its exit status 77); RuntimeError with the end of ncu's
    output when it failed."""
    p = subprocess.run([ncu, *ncu_args, sys.executable, "-c", STEP, str(size), str(steps)],
                       env=build_env(build), capture_output=True, text=True)
    if p.returncode == 77 or "exit code 77" in p.stdout + p.stderr:
        return None
    if p.returncode != 0:
        raise RuntimeError(f"ncu failed (status {p.returncode}):\n"
                           f"{(p.stdout + p.stderr)[-2000:]}")
    return p.stdout


def nothing_measured(prog, why):
    """The tools' exit without ncu or a GPU: WHY on stderr, status 77."""
    print(f"{prog}: {why}: nothing measured", file=sys.stderr)
    return 77
