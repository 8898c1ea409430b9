"""tools/bench/step_kernels.py --parse on Nsight Compute output in the form
ncu 2025 prints it (its "==PROF== Profiling" lines and the metric rows of its
report; the kernels' long names as ncu writes them): the steps split at the
first kernel's name, each position's median over the steps, units converted
(ns, us, ms, thousands separators), two trees side by side aligned by name
(a kernel one tree lacks shown as "-"), the sums; and a report whose
durations do not match its kernels refused with a message. Standard library
only. Argument: the script's path."""
import os
import subprocess
import sys
import tempfile

from report_checks import check, finish

SCRIPT = sys.argv[1]


def report(kernels):
    """ncu's output for [(short name, long name, unit, value)]."""
    lines = ["==PROF== Connected to process 3377 (/usr/bin/python3.12)"]
    lines += [f'==PROF== Profiling "{k}" - {i}: 0%....50%....100% - 1 pass'
              for i, (k, _, _, _) in enumerate(kernels)]
    lines += ["==PROF== Disconnected from process 3377", "[3377] python3.12@127.0.0.1"]
    for _, long, unit, value in kernels:
        lines += [f"  {long} (132, 1, 1)x(512, 1, 1), Context 1, Stream 7, Device 0, CC 9.0",
                  "    Section: Command line profiler metrics",
                  "    ---------------------- ----------- ------------",
                  "    Metric Name            Metric Unit Metric Value",
                  "    ---------------------- ----------- ------------",
                  f"    gpu__time_duration.sum {unit:>11} {value:>12}",
                  "    ---------------------- ----------- ------------", ""]
    return "\n".join(lines) + "\n"


CAT = ("CatArrayBatchedCopy_vectorized", "void at::<unnamed>::CatArrayBatchedCopy_vectorized"
       "<at::<unnamed>::OpaqueType<4>, unsigned int, 1, 128, 1, 16, 4>(char *, int)")
UPD = ("k_update", "<unnamed>::k_update(<unnamed>::dims_t, <unnamed>::dev_w, const double *)")
TC = ("k_vjp_tc", "<unnamed>::k_vjp_tc(<unnamed>::dims_t, <unnamed>::dev_w, const float *)")
LOSS = ("k_loss_sum", "<unnamed>::k_loss_sum(const double *, int, double, float *)")

# three steps: cat, update, tc, update again; times in several units
a = report([(*CAT, "us", "3.00"), (*UPD, "ns", "4,000"), (*TC, "ms", "0.50"),
            (*UPD, "us", "5.00"),
            (*CAT, "us", "2.00"), (*UPD, "us", "6.00"), (*TC, "us", "510.00"),
            (*UPD, "us", "5.50"),
            (*CAT, "us", "4.00"), (*UPD, "us", "5.00"), (*TC, "us", "505.00"),
            (*UPD, "us", "6.00")])
# one step of a tree with a kernel more
b = report([(*CAT, "us", "3.00"), (*UPD, "us", "4.00"), (*TC, "us", "520.00"),
            (*UPD, "us", "5.00"), (*LOSS, "us", "6.00")])
bad = report([(*CAT, "us", "3.00"), (*UPD, "us", "4.00")]).replace(
    "    gpu__time_duration.sum          us         4.00\n", "")

with tempfile.TemporaryDirectory() as d:
    paths = {}
    for name, text in (("new", a), ("old", b), ("bad", bad)):
        paths[name] = os.path.join(d, name)
        with open(paths[name], "w") as f:
            f.write(text)
    p = subprocess.run([sys.executable, SCRIPT, "--parse", paths["new"], paths["old"]],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and not p.stderr, f"--parse rc {p.returncode} {p.stderr!r}")
    rows = {}
    for line in p.stdout.splitlines():
        cells = line.split()
        if cells and cells[0] != "kernel":
            name = " ".join(cells[:-2])
            rows[name] = cells[-2:]
    print(p.stdout)
    check(rows.get("CatArrayBatchedCopy_vectorized") == ["3.00", "3.00"],
          "the concatenation: the median of 3, 2, 4 us; the one step's")
    check(rows.get("k_update") == ["5.00", "4.00"], "k_update: median of 4,000 ns, 6, 5 us")
    check(rows.get("k_vjp_tc") == ["505.00", "520.00"], "k_vjp_tc: 0.5 ms read as 500 us")
    check(rows.get("k_update #2") == ["5.50", "5.00"], "the second k_update of a step apart")
    check(rows.get("k_loss_sum") == ["-", "6.00"], "a kernel one tree lacks")
    check(rows.get("sum (us)") == ["518.50", "538.00"], "the sums")
    lines = p.stdout.splitlines()
    check(len(lines) == 7 and lines[0].split() == ["kernel", "new", "old"],
          "the header and one row a kernel, in launch order")
    order = [" ".join(l.split()[:-2]) for l in lines[1:6]]
    check(order == ["CatArrayBatchedCopy_vectorized", "k_update", "k_vjp_tc", "k_update #2",
                    "k_loss_sum"], f"launch order {order}")
    p = subprocess.run([sys.executable, SCRIPT, "--parse", paths["bad"]],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "2 kernels profiled but 1 durations" in p.stderr and
          paths["bad"] in p.stderr, f"a short report refused: rc {p.returncode} {p.stderr!r}")
    p = subprocess.run([sys.executable, SCRIPT, "--parse", os.path.join(d, "absent")],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "absent" in p.stderr and "Traceback" not in p.stderr,
          f"a missing file named: rc {p.returncode} {p.stderr!r}")

finish()
