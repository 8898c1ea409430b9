"""What the Python tests share (tests/ is on their PYTHONPATH): a failure
count with check() (a test reports every failed check) and done() (then
exits 1 if any failed), skip() (exit 77: something the test needs is
absent) and a free loopback port."""
import socket
import sys

failures = 0


def check(cond, msg):
    """Counts and prints a failed check; returns cond."""
    global failures
    if not cond:
        print("FAIL", msg)
        failures += 1
    return cond


def done():
    """The end of a test: the failure count, exit status 1 if any."""
    print("failures:", failures)
    sys.exit(1 if failures else 0)


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (just now)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
