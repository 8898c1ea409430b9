"""What the Python tests share (tests/ is on their PYTHONPATH): a failure
count with check() and fail() (a test reports every failed check) and
done() (then exits 1 if any failed), run_expect() for a command's exit
status and message, start_paused() for a command held at a test pause,
skip() (exit 77: something the test needs is absent) and a free loopback
port."""
import os
import shutil
import socket
import subprocess
import sys

failures = 0


def check(cond, msg):
    """Counts and prints a failed check; returns cond."""
    global failures
    if not cond:
        print("FAIL", msg)
        failures += 1
    return cond


def fail(msg):
    check(False, msg)


def run_expect(cmd, status, *words, timeout=300):
    """Runs cmd; checks its exit status and that its stderr has every one of
    words (the file named, the reason). Returns the finished process."""
    p = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=timeout)
    shown = f"{' '.join(str(a) for a in cmd[1:])} -> {p.returncode}"
    if p.returncode == status and all(w in p.stderr for w in words):
        print("ok", shown, p.stderr.strip())
    else:
        fail(f"{shown} (want {status}), stderr {p.stderr!r} should have {words}")
    return p


def start_paused(cmd, phase, env=None):
    """Starts cmd with SSAE_TEST_PAUSE_AT=phase (over env, default the
    test's environment) and reads its stderr up to the line that says it
    is held there (ssae_cli_test_pause): (the process, whether it paused).
    Its stdout and the rest of its stderr are left for communicate()."""
    env = dict(os.environ if env is None else env, SSAE_TEST_PAUSE_AT=phase)
    p = subprocess.Popen([str(a) for a in cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr:
        if f"test pause at {phase}" in line:
            return p, True
    return p, False


def done():
    """The end of a test: the failure count, exit status 1 if any."""
    print("failures:", failures)
    sys.exit(1 if failures else 0)


def clean_up(tmp):
    """Removes the test's folder tmp when every check passed; keeps it (and
    says so) for a look otherwise."""
    if not failures:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("files kept in", tmp)


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
