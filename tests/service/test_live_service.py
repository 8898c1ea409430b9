#!/usr/bin/env python3
"""The plant service on the live inputs, with a real JACK server (jackd,
dummy driver, 16 kHz) and a real mosquitto broker, both started here.

`ssae jack --config FILE` (input.jack.ports connects the client; MQTT,
metrics and clips from the file): a recording with a fault played into it
(sndfile-jackplay) gives one alarm_on/alarm_off pair with one id on MQTT and
a clip (the adapters' audio hook feeds the clips' pre-roll) of pre-roll +
alarm + post-roll; /healthz is 200 while JACK runs; SIGHUP with a new
threshold reaches the state messages; SIGINT: "offline".

`ssae monitor --config FILE` with input.portaudio (PortAudio's JACK host
API sees the server as a device): MQTT online, /healthz 200 while the
device delivers audio, the summary says nothing dropped."""
import os
import shutil
import signal
import subprocess
import sys
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mqtt_broker import broker_session  # noqa: E402
from ssae_jack import Jack  # noqa: E402
from ssae_testlib import check, done, free_port, skip  # noqa: E402
from test_monitor_service import gen, http, one_shot  # noqa: E402
import test_monitor_service as tms  # noqa: E402

SSAE = os.environ["SSAE"]
GEN = sys.argv[1]
BUILD = os.environ.get("SSAE_BUILD_ROOT", ".")


def jack_client(jack, tmp, port, sub):
    wav = os.path.join(tmp, "fault.wav")
    gen(wav, 7, "clicks", 3.0, 2.0)
    clips = os.path.join(tmp, "clips")
    cfg = os.path.join(tmp, "jack.yaml")
    body = ("node: live\nengine: {status_every: 0.5}\n"
            "machines:\n  - name: press\n    threshold: %s\n"
            "input:\n  jack:\n    ports: [system:capture_1]\n"
            f"outputs:\n  mqtt: {{url: 'mqtt://127.0.0.1:{port}'}}\n"
            f"  clips: {{dir: {clips}, format: wav, pre_roll: 1, post_roll: 1}}\n")
    with open(cfg, "w") as f:
        f.write(body % "7.5")
    mport = free_port()
    err_path = os.path.join(tmp, "jack.err")
    p = subprocess.Popen([SSAE, "jack", "--config", cfg, "--backend", "cpu", "--name", "svc",
                          "--metrics", f"127.0.0.1:{mport}"], env=jack.env,
                         stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    try:
        t0 = time.time()
        while time.time() - t0 < 15 and "running" not in open(err_path).read():
            time.sleep(0.05)
        lsp = subprocess.run(["jack_lsp", "-c", "svc:in_1"], env=jack.env, capture_output=True,
                             text=True).stdout
        check("system:capture_1" in lsp, f"input.jack.ports not connected: {lsp}")
        sub.wait(lambda ls: ("ssae/live/status", False, "online") in ls or
                 ("ssae/live/status", True, "online") in ls, 10, "live online")
        check(http(f"http://127.0.0.1:{mport}/healthz")[0] == 200, "healthz under JACK")
        r = subprocess.run(["sndfile-jackplay", "--autoconnect=svc:in_1", wav], env=jack.env,
                           capture_output=True, text=True, timeout=40)
        check(r.returncode == 0, r.stdout + r.stderr)
        sub.wait(lambda ls: len([e for e in tms.events(ls, "press", "live")
                                 if e["event"] == "clip"]) >= 1, 15, "alarm pair and clip")
        ev = tms.events(sub.lines(), "press", "live")
        al = [e for e in ev if e["event"].startswith("alarm")]
        check([e["event"] for e in al] == ["alarm_on", "alarm_off"] and al[0]["id"] == al[1]["id"],
              f"JACK alarms: {al}")
        if len(al) == 2:
            dur = al[1]["t"] - al[0]["t"]
            check(1.5 < dur < 3.0, f"alarm of {dur:.2f} s for a 2 s fault")
            clip = al[0].get("clip", "")
            check(os.path.exists(clip), f"clip {clip}")
            if os.path.exists(clip):
                with wave.open(clip) as w:
                    secs = w.getnframes() / w.getframerate()
                check(abs(secs - (dur + 2.0)) < 0.01,
                      f"clip {secs:.3f} s, alarm {dur:.3f} s + 1 s + 1 s")
                print(f"ok  ssae jack: one alarm pair ({dur:.2f} s), clip {secs:.2f} s")
        with open(cfg, "w") as f:
            f.write(body % "33")
        p.send_signal(signal.SIGHUP)
        sub.wait(lambda ls: any(s["threshold"] == 33 for s in tms.states(ls, "press", "live")),
                 10, "threshold 33 after SIGHUP")
        p.send_signal(signal.SIGINT)
        p.wait(30)
        check(p.returncode == 0, f"ssae jack rc {p.returncode}: {open(err_path).read()}")
        check(one_shot(port, "ssae/live/status") == "1\toffline", "offline after ssae jack")
        print("ok  ssae jack: SIGHUP threshold in the state, offline at the end")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def portaudio_monitor(jack, tmp, port, sub):
    r = subprocess.run([SSAE, "monitor", "--list-devices"], env=jack.env, capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0 or "JACK" not in r.stdout:
        print("PortAudio has no JACK device here: the PortAudio part is skipped")
        return
    cfg = os.path.join(tmp, "pa.yaml")
    with open(cfg, "w") as f:
        f.write("node: pa\nmachines:\n  - name: mic\n"
                "input:\n  portaudio:\n    device: system\n    channels: [0]\n"
                f"outputs:\n  mqtt: {{url: 'mqtt://127.0.0.1:{port}'}}\n")
    mport = free_port()
    err_path = os.path.join(tmp, "pa.err")
    p = subprocess.Popen([SSAE, "monitor", "--config", cfg, "--backend", "cpu", "--no-meter",
                          "--duration", "4", "--metrics", f"127.0.0.1:{mport}"], env=jack.env,
                         stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    sub.wait(lambda ls: any(t == "ssae/pa/status" and pl == "online" for t, _, pl in ls), 10,
             "pa online")
    time.sleep(1.5)
    check(http(f"http://127.0.0.1:{mport}/healthz")[0] == 200, "healthz under PortAudio")
    p.wait(30)
    err = open(err_path).read()
    check(p.returncode == 0 and " 0 dropped" in err, f"monitor via PortAudio: {err}")
    check(one_shot(port, "ssae/pa/status") == "1\toffline", "offline after the monitor")
    print("ok  ssae monitor --config with input.portaudio: online, healthz 200, offline")


def main():
    for prog in ("jackd", "jack_lsp", "sndfile-jackplay", "mosquitto", "mosquitto_sub", "curl"):
        if not shutil.which(prog):
            skip(prog + " not found")
    cfg = os.path.join(BUILD, "ssae_config.h")
    if not os.path.exists(cfg) or "SSAE_HAVE_JACK 1" not in open(cfg).read():
        skip("ssae was built without JACK")
    tms.GEN = GEN
    with broker_session("ssae_live_") as (tmp, port, _, sub):
        jack = Jack(tmp, "ssae_test_live_service")
        try:
            jack_client(jack, tmp, port, sub)
            portaudio_monitor(jack, tmp, port, sub)
        finally:
            jack.stop()
    done()


if __name__ == "__main__":
    main()
