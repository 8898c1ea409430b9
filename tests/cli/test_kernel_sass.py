"""tools/bench/kernel_sass.py --parse on Nsight Compute's source page in the
form ncu 2025 exports it (--page source --csv --print-source cuda,sass: per
source file a "File Path" row, the function, the column header, then each
source line followed by the SASS instructions it produced): every
instruction counted once though inlining lists it under several lines,
predicated instructions by their opcode, the register moves and the line
they come from, the source lines by samples; the stall reasons where the
page has ncu's stall_* columns (overall, by opcode, by line; the not-issued
columns left out), none where it has not; and a page without the SASS
columns refused with a message. Standard library only. Argument: the
script's path."""
import os
import subprocess
import sys
import tempfile

from report_checks import check, finish

SCRIPT = sys.argv[1]

HEADER = ('"Line No","Source","Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","# Samples","Instructions Executed",'
          '"Thread Instructions Executed"')


def sass(addr, text, samples, executed):
    return f'"","","0x{addr:x}","      {text}","{samples}","0","{samples}","{executed}","0"'


def src(line, text, samples, executed):
    return f'"{line}","{text}","-","-","{samples}","0","{samples}","{executed}","0"'


page = "\n".join([
    '"File Path","/src/gpu/mma.cuh"',
    '"Function Name","k(int)"',
    HEADER,
    src(49, "asm(mma)", 60, 300),
    sass(0x7f00000100, "HMMA.1688.F32.TF32 R12, R24, R82, R12", 40, 100),
    sass(0x7f00000110, "IMAD.MOV.U32 R27, RZ, RZ, R29", 10, 100),
    sass(0x7f00000120, "MOV R26, R31", 10, 100),
    src(40, "big = v & mask", 20, 100),
    sass(0x7f000000f0, "LOP3.LUT R25, R30, 0xffffe000, RZ, 0xc0, !PT", 20, 100),
    '"File Path","/src/gpu/kernel.cuh"',
    '"Function Name","k(int)"',
    HEADER,
    src(391, "if (x)", 5, 10),
    sass(0x7f00000200, "@P1   BRA 0x7f00000100", 5, 10),
    src(412, "if (y)", 5, 10),
    sass(0x7f00000200, "@P1   BRA 0x7f00000100", 5, 10),  # inlined twice: once
    src(500, "__syncthreads()", 15, 10),
    sass(0x7f00000210, "BAR.SYNC.DEFER_BLOCKING 0x0", 15, 10),
]) + "\n"

def parse_page(d, name, text):
    """The script's --parse --top 3 of text, saved as d/name: the finished
    process (its output printed)."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([sys.executable, SCRIPT, "--parse", path, "--top", "3"],
                       capture_output=True, text=True)
    print(p.stdout)
    return p


with tempfile.TemporaryDirectory() as d:
    p = parse_page(d, "page.csv", page)
    out = p.stdout
    check(p.returncode == 0 and not p.stderr, f"rc {p.returncode}, stderr {p.stderr[:200]!r}")
    check("# 6 instructions in the code, 420 executed (warp level), 100 stall samples" in out,
          "each instruction counted once (the branch inlined under two lines)")
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()
            if ln and not ln.startswith(("#", " ", "opcode", "file:line"))}
    check(rows.get("HMMA.1688.F32.TF32") == ["100", "23.8%", "40.0%"], "HMMA's row")
    check(rows.get("BRA") == ["10", "2.4%", "5.0%"], "a predicated branch by its opcode")
    check("MOV" in rows and "IMAD.MOV.U32" in rows and "@P1" not in rows, "the opcodes")
    check("# register moves (MOV, IMAD.MOV): 200 executed, 47.6 %" in out, "the moves' total")
    moves = out.partition("# register moves")[2].partition("# the 3")[0]
    check("  mma.cuh:49" in moves and "kernel.cuh" not in moves, "the moves' line")
    lines = out.partition("# the 3 source lines with the most samples\n")[2].splitlines()[1:]
    check([ln.split()[0] for ln in lines] == ["mma.cuh:49", "mma.cuh:40", "kernel.cuh:500"],
          "the source lines by samples, the top three")

    check("stall reasons" not in out, "no stall reasons where the page has none")

    # the same instructions with ncu's stall reason columns (all samples,
    # and the not-issued ones, which are not counted)
    why = {0x7f00000100: (30, 10, 0), 0x7f00000200: (0, 1, 4), 0x7f00000210: (0, 0, 15)}
    rows = []
    for row in page.splitlines():
        if row == HEADER:
            row += ',"stall_math","stall_wait","stall_barrier","stall_math (Not Issued)"'
        elif row.startswith('"","","0x'):
            m, w, b = why.get(int(row.split(",")[2].strip('"'), 16), (0, 0, 0))
            row += f',"{m}","{w}","{b}","99"'
        elif row.startswith('"') and not row.startswith(('"File', '"Function')):
            row += ',"-","-","-","-"'
        rows.append(row)
    p = parse_page(d, "stalls.csv", "\n".join(rows) + "\n")
    out = p.stdout
    check(p.returncode == 0 and not p.stderr, f"stalls: rc {p.returncode}, {p.stderr[:200]!r}")
    check("# stall reasons of all samples: math 50%, barrier 32%, wait 18%" in out,
          "the stall reasons of all samples (not-issued columns left out)")
    check("  HMMA.1688.F32.TF32        math 75%, wait 25%" in out, "HMMA's stall reasons")
    check("  BRA                       barrier 80%, wait 20%" in out,
          "a branch inlined twice, its reasons once")
    top = out.partition("source lines with the most samples\n")[2].splitlines()
    check(top and top[0].endswith("stall reasons") and
          top[1].split()[0] == "mma.cuh:49" and top[1].endswith("math 75%, wait 25%"),
          "the source lines' reasons")

    bad = os.path.join(d, "no_sass.csv")
    with open(bad, "w") as f:
        f.write('"File Path","/src/a.cu"\n"Line No","Source","# Samples"\n"1","x","3"\n')
    p = subprocess.run([sys.executable, SCRIPT, "--parse", bad], capture_output=True, text=True)
    check(p.returncode == 1 and not p.stdout and "no_sass.csv" in p.stderr and
          "--print-source cuda,sass" in p.stderr,
          f"a page without SASS refused: rc {p.returncode}, {p.stderr.strip()!r}")
    empty = os.path.join(d, "empty.csv")
    with open(empty, "w") as f:
        f.write("")
    p = subprocess.run([sys.executable, SCRIPT, "--parse", empty], capture_output=True, text=True)
    check(p.returncode == 1 and "not ncu's source page" in p.stderr,
          f"an empty file refused: rc {p.returncode}, {p.stderr.strip()!r}")

finish()
