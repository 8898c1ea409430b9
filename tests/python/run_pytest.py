"""Runs pytest on the given test files for meson test: exit 77 (skip) when
pytest, numpy or torch is missing or when every test was skipped (no GPU),
else pytest's status."""
import sys

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
