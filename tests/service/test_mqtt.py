#!/usr/bin/env python3
"""MQTT through a real mosquitto broker, started here on a free loopback port.

The service (service_helper: config flags, service, real CPU engine fed at
twice real time) publishes; mosquitto_sub (a persistent QoS 1 session, so
that the broker keeps its messages across a broker restart) records.
Checks: the retained status "online" (and "offline" after a clean exit and
as the last will after a kill), the Home Assistant discovery configs (a
binary_sensor of device_class problem and a score sensor per machine, sent
again when homeassistant/status says online), retained state messages, and
exactly one alarm_on/alarm_off pair with one id (machine name, wall-clock
time, duration and peak score, clip path). Then the broker is stopped
mid-run: monitoring goes on (no window dropped), the alarm raised while it
is away is queued and arrives after it is back (QoS 1)."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from mqtt_broker import Broker, Sub
from ssae_testlib import free_port, skip

HERE = os.path.dirname(os.path.abspath(__file__))


class Helper:
    def __init__(self, args):
        exe = os.path.join(os.environ.get("SSAE_BUILD_ROOT", "."), "tests",
                           "service", "service_helper")
        self.p = subprocess.Popen([exe] + args, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.expect("ready")

    def expect(self, prefix, timeout=60):
        line = self.p.stdout.readline()
        if not line.startswith(prefix):
            raise AssertionError(f"helper said {line!r}, expected {prefix}")
        return line.strip()

    def cmd(self, c, reply, timeout=60):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        return self.expect(reply, timeout)


def one_shot(port, topic):
    """The retained message of a topic (mosquitto_sub -C 1)."""
    r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port),
                        "-t", topic, "-C", "1", "-W", "5", "-F", "%r\t%p"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def events(lines, machine):
    return [json.loads(p) for t, r, p in lines
            if t == f"ssae/test-node/{machine}/event" and p]


def main():
    for prog in ("mosquitto", "mosquitto_sub", "mosquitto_pub"):
        if not shutil.which(prog):
            skip(f"{prog} not installed (apt-get install mosquitto mosquitto-clients)")
    tmp = tempfile.mkdtemp(prefix="ssae_mqtt_")
    port = free_port()
    broker = Broker(tmp, port)
    broker.start()
    sub = Sub(tmp, port, "test-sub", fatal=True)
    helper = None
    try:
        sub.wait_ready()

        cfg = os.path.join(tmp, "ssae.yaml")
        with open(cfg, "w") as f:
            f.write("node: test-node\nengine: {status_every: 0.5}\n"
                    "machines:\n  - name: press-1\n  - name: pump.2\n"
                    "outputs:\n  mqtt:\n"
                    f"    url: mqtt://127.0.0.1:{port}\n"
                    "    reconnect_min: 0.2\n    reconnect_max: 1\n")
        clips = os.path.join(tmp, "clips")
        helper = Helper(["--config", cfg, "--clips", clips,
                         "--events", os.path.join(tmp, "events.jsonl")])

        sub.wait(lambda ls: ("ssae/test-node/status", False, "online") in ls
                 or ("ssae/test-node/status", True, "online") in ls,
                 15, "status online")
        disc = lambda ls: [(t, json.loads(p)) for t, r, p in ls
                           if t.startswith("homeassistant/") and t.endswith("/config")
                           and p]
        sub.wait(lambda ls: len(disc(ls)) >= 4, 15, "4 discovery configs")
        configs = dict(disc(sub.lines()))
        bs = [c for t, c in configs.items() if t.startswith("homeassistant/binary_sensor/")]
        sn = [c for t, c in configs.items() if t.startswith("homeassistant/sensor/")]
        assert len(bs) == 2 and len(sn) == 2, configs.keys()
        assert all(c["device_class"] == "problem" for c in bs), bs
        assert {c["state_topic"] for c in bs} == {"ssae/test-node/press-1/state",
                                                  "ssae/test-node/pump.2/state"}
        assert all(c["availability_topic"] == "ssae/test-node/status" for c in bs + sn)
        print("ok  status online, discovery:", sorted(configs))

        states = lambda ls, m: [json.loads(p) for t, r, p in ls
                                if t == f"ssae/test-node/{m}/state" and p]
        sub.wait(lambda ls: len(states(ls, "pump.2")) >= 2, 15, "state messages")
        st = states(sub.lines(), "pump.2")[-1]
        for k in ("score", "alarm", "threshold", "windows", "dropped", "time"):
            assert k in st, st
        assert st["windows"] > 0 and st["alarm"] is False, st
        print("ok  state:", st)

        assert helper.cmd("on", "alarm on") == "alarm on"
        time.sleep(1.0)
        assert helper.cmd("off", "alarm off") == "alarm off"
        assert helper.cmd("flush", "flushed") == "flushed 0"
        sub.wait(lambda ls: len(events(ls, "press-1")) >= 2, 10, "alarm pair")
        ev = events(sub.lines(), "press-1")
        kinds = [e["event"] for e in ev]
        assert kinds == ["alarm_on", "alarm_off"], kinds
        on, off = ev
        assert on["id"] == off["id"] and len(on["id"]) == 36, (on, off)
        for e in ev:
            assert e["machine"] == "press-1" and e["channel"] == 0, e
            assert e["node"] == "test-node" and e["time"].endswith("Z"), e
            assert "t" in e and "score" in e and "threshold" in e, e
        # The engine's own alarm: raised and ended by its detector.
        assert off["duration_s"] > 0.5 and off["peak_score"] >= off["window_score"], off
        assert off["reason"] == "score" and "reason" not in on, (on, off)
        assert on["clip"] == off["clip"] and on["clip"].startswith(clips), (on, off)
        assert not any(r for t, r, p in sub.lines() if t.endswith("/event")), \
            "events must not be retained"
        print("ok  one alarm pair, id", on["id"], "duration", off["duration_s"])
        # The alarm turned the state's alarm on and off again.
        sub.wait(lambda ls: any(s["alarm"] for s in states(ls, "press-1")), 5,
                 "alarm in state")

        # Home Assistant restarts: the discovery is sent again.
        n_disc = len(disc(sub.lines()))
        subprocess.run(["mosquitto_pub", "-p", str(port), "-t",
                        "homeassistant/status", "-m", "online"], check=True)
        sub.wait(lambda ls: len(disc(ls)) >= n_disc + 4, 10, "discovery again")
        print("ok  discovery republished on homeassistant/status online")

        # The broker goes away mid-run; an alarm happens while it is away.
        n_ev = len(events(sub.lines(), "press-1"))
        broker.stop()
        time.sleep(0.5)
        assert helper.cmd("on", "alarm on") == "alarm on"
        time.sleep(0.5)
        assert helper.cmd("off", "alarm off") == "alarm off"
        stats = helper.cmd("stats", "stats")
        assert "connected=0" in stats, stats
        time.sleep(1.0)
        broker.start()
        assert helper.cmd("flush", "flushed") == "flushed 0"
        sub.wait(lambda ls: len(events(ls, "press-1")) >= n_ev + 2, 20,
                 "the alarm raised while the broker was away")
        ev2 = events(sub.lines(), "press-1")[n_ev:]
        kinds = [e["event"] for e in ev2 if e["event"].startswith("alarm")]
        assert kinds == ["alarm_on", "alarm_off"], kinds
        assert ev2[0]["id"] == ev2[1]["id"] != on["id"], ev2
        stats = helper.cmd("stats", "stats")
        assert "dropped=0 " in stats and "mqtt_dropped=0" in stats, stats
        print("ok  broker restart: queued QoS 1 alarm delivered;", stats)

        # SIGHUP's work: a machine renamed; then configs that are refused.
        cfg2 = os.path.join(tmp, "ssae2.yaml")
        with open(cfg) as f:
            text = f.read()
        with open(cfg2, "w") as f:
            f.write(text.replace("name: press-1", "name: press-1b"))
        assert helper.cmd(f"reload {cfg2}", "reload") == "reloaded"
        sub.wait(lambda ls: any("press-1b_alarm" in t for t, _ in disc(ls)), 10,
                 "discovery of the new name")
        sub.wait(lambda ls: any(t == "homeassistant/binary_sensor/ssae_test-node/"
                                "press-1_alarm/config" and p == "" for t, r, p in ls),
                 10, "the old name's discovery cleared")
        assert helper.cmd("on", "alarm on") == "alarm on"
        assert helper.cmd("off", "alarm off") == "alarm off"
        sub.wait(lambda ls: len(events(ls, "press-1b")) >= 2, 10, "events under the new name")
        assert {e["machine"] for e in events(sub.lines(), "press-1b")} == {"press-1b"}
        print("ok  reload: the machine's new name in topics, discovery and events")
        with open(cfg2, "w") as f:
            f.write(text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"))
        r = helper.cmd(f"reload {cfg2}", "reload")
        assert r.startswith("reload rejected") and "outputs.mqtt.url" in r, r
        with open(cfg2, "w") as f:
            f.write(text + "  bogus: 1\n")
        r = helper.cmd(f"reload {cfg2}", "reload")
        assert r.startswith("reload rejected") and "ssae2.yaml:" in r, r
        notes = lambda ls: [json.loads(p) for t, _, p in ls
                            if t == "ssae/test-node/event" and p]
        sub.wait(lambda ls: len([n for n in notes(ls)
                                 if n["event"] == "config_rejected"]) >= 2, 10,
                 "config_rejected notes")
        print("ok  reload refused (restart needed, bad file) and noted:",
              [n.get("message", "")[:60] for n in notes(sub.lines())])

        bye = helper.cmd("quit", "bye")
        helper.p.wait(30)
        assert helper.p.returncode == 0
        assert bye.endswith("dropped=0"), bye
        assert one_shot(port, "ssae/test-node/status") == "1\toffline"
        print("ok  clean exit: retained offline;", bye)
        # The clip files the events named exist (written at exit at the latest).
        for e in (on, ev2[0]):
            assert os.path.exists(e["clip"]), e["clip"]
        with open(os.path.join(tmp, "events.jsonl")) as f:
            lines = [json.loads(x) for x in f]
        ids = {e["id"] for e in lines if e["event"] == "alarm_on"}
        assert len(ids) == 3 and {on["id"], ev2[0]["id"]} <= ids, ids
        assert [e["event"] for e in lines if e["event"].startswith("config_")] == \
            ["config_reloaded", "config_rejected", "config_rejected"]
        assert any(e["event"] == "clip" for e in lines), "no clip event"
        # SPEC section 4's keys on every line, clip and config lines included
        keys = ("t", "channel", "event", "score", "threshold")
        assert all(all(k in e for k in keys) for e in lines), \
            [e for e in lines if not all(k in e for k in keys)][:3]
        print("ok  events file and clips")

        # The last will: a killed service is "offline" too.
        helper = Helper(["--config", cfg])
        time.sleep(1.0)
        assert one_shot(port, "ssae/test-node/status") == "1\tonline"
        helper.p.kill()
        helper.p.wait()
        # The broker notices the dead connection at once (socket closed).
        t0 = time.time()
        while time.time() - t0 < 10 and one_shot(port, "ssae/test-node/status") != "1\toffline":
            time.sleep(0.2)
        assert one_shot(port, "ssae/test-node/status") == "1\toffline"
        print("ok  last will: offline after a kill")
        helper = None
    finally:
        if helper and helper.p.poll() is None:
            helper.p.kill()
        sub.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("mqtt: all checks passed")


if __name__ == "__main__":
    main()
