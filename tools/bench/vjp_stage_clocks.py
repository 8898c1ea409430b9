#!/usr/bin/env python3
"""Benchmark (not a test): where the tensor-core training kernel k_vjp_tc
(gpu/ssae_cuda_vjp_tc.cuh) spends its time, stage by stage.

Builds a copy of the source tree in which thread 0 of block 0 adds up
clock64() between the barriers of the kernel's group loop and prints the
sums at the end (an instrumented copy: the tree itself is not changed), then
runs the drop-in module's fused loss (model.reconstruction_loss(x), the
kernel's trainer mode) once at each batch size. Prints, per stage, the line
of the barrier that ends it, its cycles summed over the block's groups and
its share; stages that did not run (another mode's) are left out.

    PYTHON=python3 tools/bench/vjp_stage_clocks.py [--sizes 65536,512]
        [--meson-opt -Dgpu_sm=90 ...] [--keep DIR]

Needs nvcc, meson, ninja, torch with CUDA and a GPU of sm_80 or newer; the
build takes a minute. The instrumentation changes the kernel's timing a
little (one thread's clock reads at each barrier): compare stages within one
run, or two trees each instrumented the same way."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL = os.path.join("gpu", "ssae_cuda_vjp_tc.cuh")


def instrument(path):
    """Adds the clock sums to the kernel at path; returns the barriers'
    line numbers (in the original file) in stage order."""
    src = open(path).read().split("\n")
    out, sites, in_loop = [], [], False
    for i, line in enumerate(src, 1):
        if line.strip() == "if (!grad) return;" and in_loop:
            in_loop = False
            n = len(sites)
            out += [
                "  if (tid == 0 && blockIdx.x == 0 && grad) {",
                "    long long tot = 0;",
                "    for (int q = 0; q < %d; q++) tot += tc_clk[q];" % n,
                "    const int tc_line[%d] = {%s};" % (n, ",".join(map(str, sites))),
                "    for (int q = 0; q < %d; q++)" % n,
                "      if (tc_clk[q]) printf(\"stage %2d  barrier at line %3d  %10lld cycles"
                "  %5.1f %%\\n\", q, tc_line[q], tc_clk[q], 100.0 * tc_clk[q] / tot);",
                "    printf(\"total %lld cycles, %d groups in block 0\\n\", tot,",
                "           (int)((ngroups + gridDim.x - 1) / gridDim.x));",
                "  }",
            ]
        out.append(line)
        if "const bool grad = mode != TC_FORWARD;" in line:
            out.append("  long long tc_clk[64];")
            out.append("  for (int q = 0; q < 64; q++) tc_clk[q] = 0;")
            out.append("  long long tc_last = clock64();")
        elif "for (size_t grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {" in line:
            in_loop = True
            out.append("    if (tid == 0 && blockIdx.x == 0) tc_last = clock64();")
        elif in_loop and line.strip() == "__syncthreads();":
            if len(sites) == 64:
                raise SystemExit("more than 64 barriers in the group loop")
            ind = line[:len(line) - len(line.lstrip())]
            out.append(ind + "if (tid == 0 && blockIdx.x == 0) { const long long t_ = clock64(); "
                       "tc_clk[%d] += t_ - tc_last; tc_last = t_; }" % len(sites))
            sites.append(i)
    if not sites or in_loop:
        raise SystemExit("%s: the kernel's group loop was not found (the script needs "
                         "updating with the kernel)" % path)
    open(path, "w").write("\n".join(out))
    return sites


RUN = r"""
import sys, torch
import ssae.torch as st
torch.manual_seed(0)
m = st.SpectralShapeAutoencoder().cuda()
for n in map(int, sys.argv[1:]):
    x = torch.randn(n, 320, device="cuda") * 12 - 40
    print("batch %d (the fused loss, one call):" % n, flush=True)
    m.reconstruction_loss(x).backward()
    torch.cuda.synchronize()
    if not m.uses_kernel:
        sys.exit("the module fell back to plain PyTorch")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="65536,512")
    ap.add_argument("--meson-opt", action="append", default=[],
                    help="an option for meson setup (repeatable), e.g. -Dgpu_sm=90")
    ap.add_argument("--keep", help="build in DIR and keep it (default: a temporary folder)")
    a = ap.parse_args()
    sizes = [str(int(v)) for v in a.sizes.split(",")]
    py = os.environ.get("PYTHON", sys.executable)
    work = a.keep or tempfile.mkdtemp(prefix="ssae-stage-clocks-")
    src, build = os.path.join(work, "src"), os.path.join(work, "build")
    try:
        if os.path.exists(src):
            shutil.rmtree(src)
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
            "build*", ".git", ".deps", ".gpuwork", "__pycache__", "*.pyc"))
        sites = instrument(os.path.join(src, KERNEL))
        print("instrumented %s: %d barriers in the group loop" % (KERNEL, len(sites)), flush=True)
        if not os.path.exists(os.path.join(build, "build.ninja")):
            subprocess.run(["meson", "setup", build, "-Dbuildtype=release", "-Dlv2=disabled",
                            "-Dwerror=false"] + a.meson_opt, cwd=src, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", build], check=True, stdout=subprocess.DEVNULL)
        env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
        probe = subprocess.run([py, "-c", "import torch, sys; "
                                "sys.exit(0 if torch.cuda.is_available() else 77)"], env=env)
        if probe.returncode:
            print("no CUDA device for torch (%s): built, not run" % py, file=sys.stderr)
            return 77
        return subprocess.run([py, "-c", RUN] + sizes, env=env).returncode
    except subprocess.CalledProcessError as e:
        print("failed: %s" % " ".join(e.cmd), file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
