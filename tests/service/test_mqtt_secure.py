#!/usr/bin/env python3
"""MQTT with a username and password (the password from an environment
variable named in the config, never on a command line) and over TLS (a CA
and a server certificate for 127.0.0.1 made here with openssl), against a
real mosquitto started here: the service's retained status "online" arrives;
a wrong password is refused by the broker and reported, and monitoring goes
on. Exit 77 without mosquitto or openssl."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssae_testlib import free_port, skip  # noqa: E402
from test_mqtt import Helper  # noqa: E402


def broker(tmp, name, lines):
    conf = os.path.join(tmp, name + ".conf")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
        if os.geteuid() == 0:
            f.write("user root\n")
    log = open(os.path.join(tmp, name + ".log"), "wb")
    p = subprocess.Popen(["mosquitto", "-c", conf], stdout=log, stderr=log)
    return p


def wait_port(port):
    t0 = time.time()
    while time.time() - t0 < 10:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not start")


def status(port, extra):
    r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port),
                        "-t", "ssae/secure/status", "-C", "1", "-W", "5"] + extra,
                       capture_output=True, text=True)
    return r.stdout.strip()


def run(cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def main():
    for prog in ("mosquitto", "mosquitto_sub", "mosquitto_passwd", "openssl"):
        if not shutil.which(prog):
            skip(f"{prog} not installed")
    tmp = tempfile.mkdtemp(prefix="ssae_mqtts_")
    procs = []
    helper = None
    try:
        # Username and password.
        pw = os.path.join(tmp, "passwd")
        run(["mosquitto_passwd", "-b", "-c", pw, "ssae", "right-horse"])
        os.chmod(pw, 0o600)
        port = free_port()
        procs.append(broker(tmp, "auth", [f"listener {port} 127.0.0.1",
                                          "allow_anonymous false",
                                          f"password_file {pw}"]))
        wait_port(port)
        cfg = os.path.join(tmp, "auth.yaml")
        with open(cfg, "w") as f:
            f.write("node: secure\nmachines:\n  - name: m1\noutputs:\n  mqtt:\n"
                    f"    url: mqtt://127.0.0.1:{port}\n    username: ssae\n"
                    "    password_env: SSAE_TEST_MQTT_PASSWORD\n"
                    "    reconnect_min: 0.2\n    reconnect_max: 0.5\n")
        os.environ["SSAE_TEST_MQTT_PASSWORD"] = "right-horse"
        helper = Helper(["--config", cfg])
        assert helper.cmd("flush", "flushed") == "flushed 0"
        got = status(port, ["-u", "ssae", "-P", "right-horse"])
        assert got == "online", got
        helper.cmd("quit", "bye")
        helper.p.wait(30)
        print("ok  username and password from the environment: online")

        os.environ["SSAE_TEST_MQTT_PASSWORD"] = "wrong"
        helper = Helper(["--config", cfg])
        time.sleep(1.5)
        st = helper.cmd("stats", "stats")
        assert "connected=0" in st and "connects=0" in st, st
        assert "not authorised" in st.lower() or "refused" in st.lower(), st
        assert "dropped=0 " in st and int(st.split("windows=")[1].split()[0]) > 0, st
        helper.cmd("quit", "bye")
        helper.p.wait(30)
        print("ok  wrong password refused and reported, monitoring went on:", st)

        # TLS with our own CA and a certificate for 127.0.0.1.
        ca_key, ca = os.path.join(tmp, "ca.key"), os.path.join(tmp, "ca.pem")
        key, csr, crt = (os.path.join(tmp, n) for n in ("srv.key", "srv.csr", "srv.pem"))
        ext = os.path.join(tmp, "ext.cnf")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=ssae test CA", "-keyout", ca_key, "-out", ca])
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", key, "-out", csr])
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", crt])
        tport = free_port()
        procs.append(broker(tmp, "tls", [f"listener {tport} 127.0.0.1",
                                         "allow_anonymous true", f"cafile {ca}",
                                         f"certfile {crt}", f"keyfile {key}"]))
        wait_port(tport)
        cfg = os.path.join(tmp, "tls.yaml")
        with open(cfg, "w") as f:
            f.write("node: secure\nmachines:\n  - name: m1\noutputs:\n  mqtt:\n"
                    f"    url: mqtts://127.0.0.1:{tport}\n"
                    f"    tls: {{ca_file: {ca}}}\n"
                    "    reconnect_min: 0.2\n    reconnect_max: 0.5\n")
        helper = Helper(["--config", cfg])
        assert helper.cmd("flush", "flushed") == "flushed 0"
        got = status(tport, ["--cafile", ca])
        assert got == "online", got
        helper.cmd("quit", "bye")
        helper.p.wait(30)
        assert status(tport, ["--cafile", ca]) == "offline"
        print("ok  TLS with the config's CA: online, then offline")
        helper = None
    finally:
        if helper and helper.p.poll() is None:
            helper.p.kill()
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    print("mqtt secure: all checks passed")


if __name__ == "__main__":
    main()
