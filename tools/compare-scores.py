#!/usr/bin/env python3
"""Compares two `ssae score` outputs (tsv) of the same files, e.g. the CPU
against the GPU, or fp32 against the opt-in tensor-core mode: how many
files, whether they rank the same (pairs in a different order, Spearman's
rho), the largest relative difference of a file score, verdicts that differ.

    tools/compare-scores.py A.tsv B.tsv

Exit status 0 when every file is in both and the order is the same, else 1.
No dependencies beyond the standard library."""
import sys


def read(path):
    scores = {}
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 4:
                continue
            try:
                scores[cols[0]] = (float(cols[1]), cols[3])
            except ValueError:
                continue
    return scores


def ranks(vals):
    order = sorted(range(len(vals)), key=lambda i: vals[i])
    r = [0.0] * len(vals)
    for pos, i in enumerate(order):
        r[i] = float(pos)
    return r


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b = read(sys.argv[1]), read(sys.argv[2])
    common = sorted(set(a) & set(b))
    only = len(set(a) ^ set(b))
    if not common:
        print("compare-scores: no file in both", file=sys.stderr)
        return 1
    sa = [a[p][0] for p in common]
    sb = [b[p][0] for p in common]
    flips = 0
    for i in range(len(common)):
        for j in range(i + 1, len(common)):
            if (sa[i] - sa[j]) * (sb[i] - sb[j]) < 0:
                flips += 1
    ra, rb = ranks(sa), ranks(sb)
    n = len(common)
    rho = 1.0 if n < 2 else 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))
    rel = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(sa, sb))
    verdicts = sum(1 for p in common if a[p][1] != b[p][1])
    print(f"files {n} (in one only: {only}); pairs in a different order {flips} of "
          f"{n * (n - 1) // 2}; spearman {rho:.6f}; max relative score difference {rel:.3e}; "
          f"verdicts differing {verdicts}")
    return 0 if flips == 0 and only == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
