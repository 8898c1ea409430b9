"""JACK xruns are counted and reported (issue 18): `ssae jack` on a dummy
server (16 kHz, 256 frames) is stopped (SIGSTOP) for 0.3 s, so that the
server misses its deadlines and reports xruns. ssae must count them: a
warning while running, the summary's "xrun(s)", and the status events'
"xruns" key, all above 0. Skips (77) without jackd or a
JACK-enabled ssae."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from ssae_jack import Jack
from ssae_testlib import skip

SSAE = os.environ["SSAE"]


def main():
    for prog in ("jackd", "jack_lsp"):
        if not shutil.which(prog):
            skip(f"{prog} not installed")
    with tempfile.TemporaryDirectory() as tmp:
        jack = Jack(tmp, "ssae_test_jack_xrun")
        env = jack.env
        try:
            results = {}
            for stop in (False, True):
                ev = os.path.join(tmp, f"ev{int(stop)}.jsonl")
                p = subprocess.Popen([SSAE, "jack", "--backend", "cpu", "--status", "0.5",
                                      "--events", ev, "--duration", "3"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
                first = p.stderr.readline()
                if "without JACK" in first:
                    skip("ssae built without JACK")
                assert "running" in first, first + p.stderr.read()
                time.sleep(0.8)
                if stop:
                    p.send_signal(signal.SIGSTOP)
                    time.sleep(0.3)
                    p.send_signal(signal.SIGCONT)
                _, e = p.communicate(timeout=30)
                with open(ev) as f:
                    status = [json.loads(x) for x in f if '"status"' in x]
                assert p.returncode == 0 and status, (p.returncode, e)
                results[stop] = (status[-1]["xruns"], e)
            n0, e0 = results[False]
            n1, e1 = results[True]
            print(f"xruns without a stop: {n0}; with a 0.3 s stop: {n1}")
            assert n1 > 0 and f"{n1} xrun(s)" in e1 and "JACK xrun(s) so far" in e1, e1
            # A run without a stop (on a loaded machine it may have xruns of
            # its own): the summary says what the events say.
            assert f"{n0} xrun(s)" in e0, e0
        finally:
            jack.stop()
    print("ok")


main()
