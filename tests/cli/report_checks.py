"""What the bench tools' report tests share (test_step_kernels.py,
test_kernel_sass.py): named checks printed ok or FAIL as they run, and the
exit status once all have run."""
import sys

failures = []


def check(ok, what):
    print(f"{'ok' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def finish():
    if failures:
        print("\n".join(["FAILED:"] + failures))
        sys.exit(1)
