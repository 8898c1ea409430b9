#!/usr/bin/env python3
"""Registers and spills of every CUDA kernel of a build, per architecture.

    python3 tools/cuda-spills.py BUILD [--source NAME] [--kernel REGEX] [--no-spill REGEX]

Compiles each CUDA source of BUILD again exactly as the build does (its
compile_commands.json), with `-Xptxas -v` and the object thrown away, and
prints a line per kernel and architecture: registers, stack frame, spill
stores and loads. The kernels that run at their register ceiling
(k_vjp_tc: 128 a thread, one block of 512 per SM) can start spilling after
a small edit, and a spill in a hot loop costs more than the edit saves
(doc/gpu-kernels.md): read this after changing one. --source compiles only
the sources of that file name (ssae_cuda_train.cu), --kernel keeps the
kernels whose name matches; --no-spill makes the exit status 1 when a
matching kernel spills (a check to run by hand: spills depend on the nvcc
version too, so no test fails on them). Needs nvcc; takes a minute."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.split("\n")
        return {n: d for n, d in zip(names, out)}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short(name):
    """The kernel's own name: `(anonymous namespace)::k_vjp_tc(args)` ->
    k_vjp_tc, `void ssae_warp_3xtf32_kernel<5>(args)` ->
    ssae_warp_3xtf32_kernel<5>."""
    base = name.replace("(anonymous namespace)::", "")
    if base.startswith("void "):
        base = base[5:]
    return base.split("(")[0].split("::")[-1]


def ptxas_report(entry, obj):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    if "-o" in args:
        args[args.index("-o") + 1] = obj
    args += ["-Xptxas", "-v"]
    r = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("cuda-spills: %s did not compile:\n%s" % (entry["file"], r.stderr[-2000:]))
    rows, cur = [], None
    for line in r.stderr.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = {"name": m.group(1), "arch": m.group(2), "src": os.path.basename(entry["file"])}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = FRAME.search(line)
        if m:
            cur["stack"], cur["stores"], cur["loads"] = map(int, m.groups())
        m = REGS.search(line)
        if m:
            cur["regs"] = int(m.group(1))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", help="a configured build folder (compile_commands.json)")
    ap.add_argument("--source", help="only the CUDA sources of this file name")
    ap.add_argument("--kernel", help="only kernels whose name matches this regex")
    ap.add_argument("--no-spill", help="exit 1 when a kernel matching this regex spills")
    a = ap.parse_args()
    path = os.path.join(a.build, "compile_commands.json")
    try:
        with open(path) as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        print("cuda-spills: %s: %s (configure the build first)" % (path, e), file=sys.stderr)
        return 2
    cu = [e for e in db if e["file"].endswith(".cu")]
    if not cu:
        print("cuda-spills: %s compiles no CUDA source (a build without nvcc?)" % a.build,
              file=sys.stderr)
        return 2
    if a.source:
        cu = [e for e in cu if os.path.basename(e["file"]) == a.source]
        if not cu:
            print("cuda-spills: %s compiles no CUDA source named %s" % (a.build, a.source),
                  file=sys.stderr)
            return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, e in enumerate(cu):
            print("\r[%d/%d] %s" % (i + 1, len(cu), os.path.basename(e["file"])), end="",
                  file=sys.stderr, flush=True)
            rows += ptxas_report(e, os.path.join(tmp, "o%d.o" % i))
    print(file=sys.stderr)
    names = demangle(sorted({r["name"] for r in rows}))
    for r in rows:
        r["kernel"] = short(names[r["name"]])
    if a.kernel:
        rows = [r for r in rows if re.search(a.kernel, r["kernel"])]
    seen, bad = set(), []
    print("%-7s %-40s %5s %6s %7s %6s  %s" % ("arch", "kernel", "regs", "stack", "spill-st",
                                               "spill-ld", "source"))
    for r in sorted(rows, key=lambda r: (r["kernel"], r["arch"], r["src"])):
        key = (r["kernel"], r["arch"], r.get("stores"), r.get("loads"))
        if key in seen:  # the same kernel compiled into another source
            continue
        seen.add(key)
        print("%-7s %-40.40s %5s %6s %7s %8s  %s" % (r["arch"], r["kernel"], r.get("regs", "?"),
                                                    r.get("stack", "?"), r.get("stores", "?"),
                                                    r.get("loads", "?"), r["src"]))
        if a.no_spill and re.search(a.no_spill, r["kernel"]) and (r.get("stores") or r.get("loads")):
            bad.append("%s on %s: %d bytes spill stores, %d loads" % (
                r["kernel"], r["arch"], r["stores"], r["loads"]))
    for b in bad:
        print("cuda-spills: %s" % b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
