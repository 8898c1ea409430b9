"""tools/bench/step_trace.py's reading of a CUPTI trace (the events torch's
profiler gives: [start, end, name] in microseconds): kernel names shortened
past namespaces, templates and parameters; the events cut into steps of one
step's kernel count, and a trace that does not divide refused; each step's
span from its first kernel to the next step's, the time between kernels with
overlapping kernels leaving none, each kernel's median duration by launch
position. Standard library only. Argument: the script's path."""
import importlib.util
import os
import sys

from report_checks import check, finish

SCRIPT = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(SCRIPT)))
spec = importlib.util.spec_from_file_location("step_trace", SCRIPT)
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)

CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized"
       "<at::native::(anonymous namespace)::OpaqueType<4>, unsigned int, 1, 128, 1, 16, 4>"
       "(char *, at::native::(anonymous namespace)::CatArrInputTensorMetadata<...>, int)")
TC = ("(anonymous namespace)::k_vjp_tc((anonymous namespace)::dims_t, "
      "(anonymous namespace)::dev_w, const float *, unsigned long)")
SUM = "<unnamed>::k_part_sum(int, const float *, int, double *)"
check(st.short_name(CAT) == "CatArrayBatchedCopy_vectorized", "a templated torch kernel")
check(st.short_name(TC) == "k_vjp_tc", "a kernel in an anonymous namespace")
check(st.short_name(SUM) == "k_part_sum", "ncu's <unnamed> spelling")
check(st.short_name("void plain_kernel(int)") == "plain_kernel", "a plain kernel")

# three steps of three kernels: cat, tc, sum; 1 us gaps but the last
# kernel of step 2, which overlaps the one before it (a programmatic launch)
events = [[0, 2, CAT], [3, 503, TC], [504, 509, SUM],
          [510, 512, CAT], [513, 1013, TC], [1010, 1016, SUM],
          [1020, 1023, CAT], [1024, 1526, TC], [1527, 1531, SUM]]
steps = st.steps_of(events, 3)
check(len(steps) == 3 and steps[1][0] == events[3], "cut into steps of three")
try:
    st.steps_of(events[:-1], 3)
    check(False, "a trace of 8 kernels in steps of 3 refused")
except ValueError as e:
    check("8 kernels" in str(e) and "3" in str(e), f"a trace that does not divide: {e}")
s = st.step_stats(steps)
check(s["span"] == [510, 510, 511], f"spans start to start, the last to its end: {s['span']}")
check(s["gaps"][0] == 3 and s["gaps"][1] == 5 and s["gaps"][2] == 2,
      f"gaps, an overlap none and the step boundary counted: {s['gaps']}")
check([k for k, _ in s["kernels"]] == ["CatArrayBatchedCopy_vectorized", "k_vjp_tc",
                                        "k_part_sum"], "kernels by launch position")
check(s["kernels"][1][1] == 500 and s["kernels"][2][1] == 5,
      f"each position's median: {s['kernels']}")
finish()
