"""Runs pytest on the given test files for meson test: exit 77 (skip) when
pytest, numpy or torch is missing or when every test was skipped (no GPU),
else pytest's status."""
import os
import sys

# A sanitized libssae needs its runtime loaded before the interpreter starts
# (the interpreter is not instrumented): the package is tested in the plain
# builds, the library under the sanitizers by the C tests.
if os.environ.get("SSAE_SANITIZE", "none") not in ("", "none"):
    print("skip: libssae built with -Db_sanitize=%s" % os.environ["SSAE_SANITIZE"])
    sys.exit(77)

try:
    import numpy  # noqa: F401
    import pytest
    import torch  # noqa: F401
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)


class Outcomes:
    def __init__(self):
        self.ran = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped += 1
        elif report.when == "call":
            self.ran += 1


o = Outcomes()
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[o])
if rc == 0 and o.ran == 0 and o.skipped:
    sys.exit(77)
sys.exit(int(rc))
