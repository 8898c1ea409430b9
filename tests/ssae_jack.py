"""A JACK server of its own for the tests that run `ssae jack` or PortAudio
through JACK (tests/ is on their PYTHONPATH): jackd on the dummy driver,
with a fixed server name per test. A fixed name because JACK's registry
(8 server slots) frees the slot of a server that died without
unregistering (a test's server-gone case may end in SIGKILL) only when a
server of the same name starts; a name per run would leak a slot each
time. Skips the test (exit 77) when jackd does not start or answer; fails
at once, saying so, when a server of that name is already running (a run
killed before it could stop its own), where the test's clients would
otherwise meet the wrong server."""
import os
import signal
import subprocess
import time

from ssae_testlib import skip


class Jack:
    """jackd -n NAME -d dummy at rate Hz, 256-frame periods; env: the
    environment its clients need (server name, HOME in tmp)."""

    def __init__(self, tmp, name, rate=16000):
        self.env = dict(os.environ)
        self.env["JACK_DEFAULT_SERVER"] = name
        self.env["HOME"] = tmp
        self.env["JACK_NO_AUDIO_RESERVATION"] = "1"
        self.env["JACK_PROMISCUOUS_SERVER"] = ""
        probe = dict(self.env, JACK_NO_START_SERVER="1")
        if subprocess.run(["jack_lsp"], env=probe, capture_output=True).returncode == 0:
            raise AssertionError("a JACK server named %s is already running (left by a run that "
                                 "was killed?); stop it (pkill -f 'jackd -n %s') and run again"
                                 % (name, name))
        self.log = open(os.path.join(tmp, "jackd.log"), "w")
        self.proc = subprocess.Popen(
            ["jackd", "-n", name, "-d", "dummy", "-r", str(rate), "-p", "256"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                skip("jackd did not start (see jackd.log)")
            if subprocess.run(["jack_lsp"], env=self.env, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        skip("jackd did not answer within 10 s")

    def ports(self):
        r = subprocess.run(["jack_lsp"], env=self.env, capture_output=True, text=True)
        return r.stdout.split()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
