"""A real mosquitto broker on a loopback port and a mosquitto_sub recorder,
for the service tests that check what the service publishes (test_mqtt.py,
test_monitor_service.py; tests/service is on their path as the script's
folder)."""
import contextlib
import os
import socket
import subprocess
import tempfile
import time

from ssae_testlib import check, clean_up, free_port


class Broker:
    """mosquitto with persistence in tmp, so that a stopped and restarted
    broker keeps its QoS 1 sessions."""

    def __init__(self, tmp, port):
        self.conf = os.path.join(tmp, "mosquitto.conf")
        self.log = open(os.path.join(tmp, "mosquitto.log"), "ab")
        with open(self.conf, "w") as f:
            f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                    f"persistence true\npersistence_location {tmp}/\n"
                    "autosave_interval 1\n")
            if os.geteuid() == 0:
                f.write("user root\n")
        self.port = port
        self.p = None

    def start(self):
        self.p = subprocess.Popen(["mosquitto", "-c", self.conf],
                                  stdout=self.log, stderr=self.log)
        t0 = time.time()
        while time.time() - t0 < 10:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start")

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            self.p.wait(10)


class Sub:
    """mosquitto_sub with a persistent QoS 1 session (client id ssae-NAME):
    lines() gives (topic, retained, payload). wait() on a timeout raises
    AssertionError when fatal, else counts a failed check and returns
    False."""

    def __init__(self, tmp, port, name, fatal):
        self.path = os.path.join(tmp, name + ".txt")
        self.port = port
        self.fatal = fatal
        self.f = open(self.path, "wb")
        self.p = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-q", "1",
             "-c", "-i", "ssae-" + name, "-v", "-F", "%t\t%r\t%p",
             "-t", "ssae/#", "-t", "homeassistant/#"],
            stdout=self.f, stderr=subprocess.STDOUT)

    def lines(self):
        with open(self.path, "rb") as f:
            out = []
            for raw in f.read().decode("utf-8", "replace").splitlines():
                parts = raw.split("\t", 2)
                if len(parts) == 3:
                    out.append((parts[0], parts[1] == "1", parts[2]))
            return out

    def wait(self, pred, timeout, what):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if pred(self.lines()):
                return True
            time.sleep(0.1)
        msg = f"timed out waiting for {what}; last lines:\n" + \
            "\n".join(map(str, self.lines()[-30:]))
        if self.fatal:
            raise AssertionError(msg)
        return check(False, msg)

    def wait_ready(self):
        """Returns once the subscription is in place: it has seen a probe
        (retained, so a subscriber that connects late still sees it)."""
        subprocess.run(["mosquitto_pub", "-p", str(self.port), "-t", "ssae/probe",
                        "-m", "x", "-r"], check=True)
        self.wait(lambda ls: any(t == "ssae/probe" for t, _, _ in ls), 10, "probe")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(5)


@contextlib.contextmanager
def broker_session(prefix):
    """A test folder (kept when a check failed), a broker on a free port and
    a recording subscriber (non-fatal waits) that is in place: yields
    (tmp, port, broker, sub); all stopped at the end."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    port = free_port()
    broker = Broker(tmp, port)
    broker.start()
    sub = Sub(tmp, port, "sub", fatal=False)
    try:
        sub.wait_ready()
        yield tmp, port, broker, sub
    finally:
        sub.stop()
        broker.stop()
        clean_up(tmp)
