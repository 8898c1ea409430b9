#!/usr/bin/env python3
"""Benchmark (not a test): where one CUDA kernel's instructions and stalls
go, by SASS opcode and by source line, from Nsight Compute's source
counters. It profiles one kernel launch of the drop-in module's fused
training step (zero_grad, model.reconstruction_backward(x) on CUDA tensors;
by default k_vjp_tc), exports the per-instruction page (each SASS
instruction's executions and warp stall samples, under the source lines it
came from) and prints: every opcode's executions and share of the stall
samples; the register moves (MOV, IMAD.MOV) and the source lines they come
from; the source lines with the most samples; and, where the page has them,
what the samples were stalled on (ncu's stall reasons), overall, by opcode
and by line. This is how the moves that ptxas had put around k_vjp_tc's MMAs
were found (doc/gpu-kernels.md, "The backward kernel").

usage: kernel_sass.py [--build DIR] [--kernel NAME] [--size N] [--top K]
                      [--csv-out FILE] [--ncu PATH]
       kernel_sass.py --parse FILE [--top K]

--build    build tree (DIR/python on PYTHONPATH; default: build); build it
           with -Dcuda_args=-lineinfo for source lines
--kernel   the kernel's name, as ncu's -k regex:NAME (default k_vjp_tc)
--size     windows a step (default 65536)
--top      source lines listed (default 15)
--csv-out  keep the exported page (ncu --page source --csv
           --print-source cuda,sass) in FILE
--ncu      the ncu command (default: ncu on PATH, else
           /usr/local/cuda/bin/ncu)
--parse    read a saved export instead of profiling

Exit status 77 when there is no ncu or no CUDA device (nothing measured)."""
import argparse
import collections
import csv
import io
import os
import subprocess
import sys
import tempfile

import ncu_step


MOVES = ("MOV", "IMAD.MOV.U32", "IMAD.MOV")


def count(cell):
    """A count cell of the page ("1234", "1,234"; "-" or empty: 0)."""
    try:
        return int(cell.replace(",", ""))
    except ValueError:
        return 0


def reasons(stalls, n):
    """The n largest of a {reason: samples} as "math 43%, wait 27%"."""
    total = sum(stalls.values()) or 1
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in stalls.most_common(n))


def parse(text):
    """The SASS instructions of ncu's source page (--csv --print-source
    cuda,sass), once each: [{addr, sass, op, file, line, samples,
    executed, stalls: {reason: samples}}] in address order (the stall
    reasons: ncu's stall_* columns, all samples, where the page has them). Under each source line come the
    instructions it produced; one inlined in several lines is listed under
    each of them, and counted once here."""
    hdr, where, seen = None, (None, None), {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "File Path":
            where = (os.path.basename(row[1]) if len(row) > 1 else "?", None)
            continue
        if row[0] == "Line No":
            hdr = row
            continue
        if hdr is None or row[0] == "Function Name":
            continue
        if row[0]:
            where = (where[0], row[0])
            continue
        try:
            ai = hdr.index("Address")
            si = hdr.index("Warp Stall Sampling (All Samples)")
            ei = hdr.index("Instructions Executed")
        except ValueError:
            raise ValueError("not ncu's source page with SASS: its header lacks Address, "
                             "Warp Stall Sampling (All Samples) or Instructions Executed "
                             "(export with --page source --csv --print-source cuda,sass)")
        if len(row) <= max(ai + 1, si, ei) or not row[ai].startswith("0x"):
            continue
        addr = int(row[ai], 16)
        if addr in seen:
            continue
        sass = row[ai + 1].strip()
        words = sass.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (
            words[0] if words else "?")
        stalls = {h[len("stall_"):]: count(row[k]) for k, h in enumerate(hdr)
                  if h.startswith("stall_") and "Not Issued" not in h and k < len(row)}
        seen[addr] = {"addr": addr, "sass": sass, "op": op, "file": where[0],
                      "line": where[1], "samples": int(row[si] or 0),
                      "executed": int(row[ei] or 0),
                      "stalls": {k: v for k, v in stalls.items() if v}}
    if hdr is None:
        raise ValueError("no \"Line No\" header: not ncu's source page")
    if not seen:
        raise ValueError("no SASS instructions (export with --print-source cuda,sass)")
    return [seen[a] for a in sorted(seen)]


def report(ins, top):
    """The tables, as text."""
    ex = sum(i["executed"] for i in ins) or 1
    sa = sum(i["samples"] for i in ins) or 1
    by_op_ex, by_op_sa = collections.Counter(), collections.Counter()
    by_line_ex, by_line_sa = collections.Counter(), collections.Counter()
    moves = collections.Counter()
    why = collections.Counter()
    why_op = collections.defaultdict(collections.Counter)
    why_line = collections.defaultdict(collections.Counter)
    for i in ins:
        by_op_ex[i["op"]] += i["executed"]
        by_op_sa[i["op"]] += i["samples"]
        key = f"{i['file']}:{i['line']}"
        by_line_ex[key] += i["executed"]
        by_line_sa[key] += i["samples"]
        if i["op"] in MOVES:
            moves[key] += i["executed"]
        for r, v in i.get("stalls", {}).items():
            why[r] += v
            why_op[i["op"]][r] += v
            why_line[key][r] += v
    out = [f"# {len(ins)} instructions in the code, {ex:,} executed (warp level), "
           f"{sa:,} stall samples",
           f"{'opcode':<28}{'executed':>14}{'% executed':>12}{'% samples':>11}"]
    for op, v in by_op_ex.most_common():
        out.append(f"{op:<28}{v:>14,}{100 * v / ex:>11.1f}%{100 * by_op_sa[op] / sa:>10.1f}%")
    mv = sum(moves.values())
    out.append(f"# register moves (MOV, IMAD.MOV): {mv:,} executed, {100 * mv / ex:.1f} %")
    for key, v in moves.most_common(5):
        out.append(f"  {key:<40}{v:>14,}")
    if why:
        # what the samples were waiting for: "math" a busy pipe (the MMA's),
        # "wait" a fixed-latency result, "short_sb" shared memory, "barrier"
        out.append(f"# stall reasons of all samples: {reasons(why, 8)}")
        out.append("# and of the 8 opcodes with the most samples")
        for op, _ in by_op_sa.most_common(8):
            out.append(f"  {op:<26}{reasons(why_op[op], 4)}")
    out.append(f"# the {top} source lines with the most samples")
    out.append(f"{'file:line':<40}{'% samples':>11}{'% executed':>12}" +
               ("  stall reasons" if why else ""))
    for key, v in by_line_sa.most_common(top):
        out.append(f"{key:<40}{100 * v / sa:>10.1f}%{100 * by_line_ex[key] / ex:>11.1f}%" +
                   (f"  {reasons(why_line[key], 3)}" if why else ""))
    return "\n".join(out)


def profile(ncu, build, kernel, size):
    """The exported page's text, or None without a CUDA device."""
    with tempfile.TemporaryDirectory() as d:
        rep = os.path.join(d, "kernel")
        if ncu_step.run_step(ncu, build, ["--clock-control", "none", "--profile-from-start",
                                          "off", "-k", f"regex:{kernel}", "-c", "1", "--section",
                                          "SourceCounters", "--import-source", "yes", "-o", rep],
                             size, 1) is None:
            return None
        if not os.path.exists(rep + ".ncu-rep"):
            raise RuntimeError(f"ncu made no report: was {kernel} launched?")
        p = subprocess.run([ncu, "-i", rep + ".ncu-rep", "--page", "source", "--csv",
                            "--print-source", "cuda,sass"], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"ncu's export failed (status {p.returncode}):\n"
                               f"{(p.stdout + p.stderr)[-2000:]}")
        return p.stdout


def main():
    ap = argparse.ArgumentParser(prog="kernel_sass.py",
                                 usage=__doc__.split("usage: ", 1)[1].split("\n\n", 1)[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--kernel", default="k_vjp_tc")
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--csv-out", metavar="FILE")
    ap.add_argument("--ncu")
    ap.add_argument("--parse", metavar="FILE")
    a = ap.parse_args()
    if a.size < 1 or a.top < 1:
        ap.error("--size and --top must be at least 1")
    if a.parse:
        try:
            with open(a.parse, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            sys.exit(f"kernel_sass.py: {a.parse}: {e.strerror}")
        where = a.parse
    else:
        ncu = ncu_step.find_ncu(a.ncu)
        if ncu is None:
            return ncu_step.nothing_measured("kernel_sass.py", "no ncu (Nsight Compute)")
        try:
            text = profile(ncu, a.build, a.kernel, a.size)
        except RuntimeError as e:
            sys.exit(f"kernel_sass.py: {a.build}: {e}")
        if text is None:
            return ncu_step.nothing_measured("kernel_sass.py", "no CUDA device")
        where = a.build
        if a.csv_out:
            tmp = a.csv_out + ".tmp"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, a.csv_out)
            except OSError as e:
                sys.exit(f"kernel_sass.py: {a.csv_out}: {e.strerror}")
    try:
        ins = parse(text)
    except ValueError as e:
        sys.exit(f"kernel_sass.py: {where}: {e}")
    print(report(ins, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
