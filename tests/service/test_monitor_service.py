#!/usr/bin/env python3
"""`ssae monitor --input FILE --realtime` as a plant service, end to end,
against a real mosquitto broker (started here on a free loopback port),
mosquitto_sub, curl and promtool.

Run 1: a recording with an injected fault (ssae-gen clicks) played with
--mqtt --node --names --metrics --clips --keep-running: the retained status
"online", the Home Assistant discovery configs, state messages, exactly one
alarm_on/alarm_off pair with one id at the audio times `ssae report` gives
for the same file, /metrics accepted by `promtool check metrics` during the
run, /healthz 200 while the audio runs and 503 once the file has ended (the
process still up), "offline" after SIGTERM; the alarm's clip holds the input
from pre-roll before alarm_on to post-roll after alarm_off, sample for
sample, and its log-mel (`ssae features`) is the input span's; its `ssae report`
picture (clips.picture) lies beside it, announced by a clip_picture event.

Run 2: the broker is stopped while a fault plays and started again: no
window dropped, the alarm raised while it was away arrives afterwards
(QoS 1). Then SIGHUP with a config naming a new model and threshold: the
window scores (--windows) are model A's up to one window and model B's
from the next, every window scored (none lost), the state messages carry
the new threshold; SIGHUP with a broken config: the old one keeps running
and the error is logged and noted on MQTT.

Run 3: two machines on one engine, each with its own model file and
threshold: every window of machine m1 carries model A's score (`ssae score
--model A` of the same audio), every window of m2 model B's, and only the
machine whose threshold the scores pass raises an alarm."""
import json
import re
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import wave

from mqtt_broker import broker_session
from ssae_testlib import check, done, free_port, skip

SSAE = os.environ["SSAE"]
GEN = sys.argv[1]
SRC = os.environ.get("SSAE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
RATE = 16000


def one_shot(port, topic):
    r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port),
                        "-t", topic, "-C", "1", "-W", "5", "-F", "%r\t%p"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def http(url):
    """(status, body) from curl; status 0 when nothing answered."""
    r = subprocess.run(["curl", "-s", "-m", "5", "-w", "\n%{http_code}", url],
                       capture_output=True, text=True)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


def events(lines, machine, node="n1"):
    return [json.loads(p) for t, r, p in lines if t == f"ssae/{node}/{machine}/event" and p]


def states(lines, machine, node="n1"):
    return [json.loads(p) for t, r, p in lines if t == f"ssae/{node}/{machine}/state" and p]


def gen(path, seconds, anomaly, at, length, seed=5):
    subprocess.run([GEN, "--seed", str(seed), "--seconds", str(seconds), "--rate", str(RATE),
                    "--anomaly", anomaly, "--at", str(at), "--length", str(length),
                    "-o", path], check=True)


def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return w.getframerate(), w.readframes(w.getnframes())


def report_spans(path, tmp):
    p = subprocess.run([SSAE, "report", path, "-o", os.path.join(tmp, "r.png"),
                        "--backend", "cpu"], capture_output=True, text=True)
    if p.returncode != 0 and "without cairo" in p.stderr:
        return None
    check(p.returncode == 0, f"report: {p.stderr}")
    spans = []
    for line in p.stdout.splitlines():
        m = re.match(r"^  alarm ([\d.]+) s \.\. ([\d.]+) s ", line)
        if m:
            spans.append((float(m.group(1)), float(m.group(2))))
    return spans


class Monitor:
    def __init__(self, args, tmp, name):
        self.err_path = os.path.join(tmp, name + ".err")
        self.out = open(os.path.join(tmp, name + ".out"), "wb")
        self.err = open(self.err_path, "wb")
        self.p = subprocess.Popen([SSAE, "monitor", "--backend", "cpu", "--no-meter"] + args,
                                  stdout=self.out, stderr=self.err)
        self.t0 = time.time()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def wait_log(self, text, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if text in self.stderr():
                return True
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        return check(False, f"no '{text}' in the log:\n{self.stderr()}")

    def at(self, s):
        """Sleeps until s seconds after the start."""
        d = self.t0 + s - time.time()
        if d > 0:
            time.sleep(d)


def make_model_b(a_path, b_path):
    """Model A with its decoder bias scaled: the same features, other scores."""
    b = bytearray(open(a_path, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    s, e = h["slice_decoder.0.bias"]["data_offsets"]
    base = 8 + n
    vals = struct.unpack(f"<{(e - s) // 4}f", b[base + s:base + e])
    b[base + s:base + e] = struct.pack(f"<{len(vals)}f", *[v * 1.5 + 0.05 for v in vals])
    open(b_path, "wb").write(bytes(b))


def run1(tmp, port, sub):
    """MQTT, discovery, state, one alarm pair at the report's times, metrics,
    healthz, offline, the clip."""
    wav = os.path.join(tmp, "fault.wav")
    gen(wav, 9, "clicks", 3.5, 2.5)
    spans = report_spans(wav, tmp)
    cfg = os.path.join(tmp, "run1.yaml")
    clips = os.path.join(tmp, "clips")
    # Pre- and post-roll whole hops: the clip's frames line up with the
    # input's.
    with open(cfg, "w") as f:
        f.write("engine: {status_every: 0.5}\n"
                "outputs:\n  clips:\n    dir: /nonexistent/overridden-by-the-flag\n"
                "    format: wav\n    pre_roll: 2.048\n"
                "    post_roll: 1.024\n    picture: true\n")
    mport = free_port()
    evf = os.path.join(tmp, "run1.jsonl")
    m = Monitor(["--config", cfg, "--input", wav, "--realtime", "--keep-running",
                 "--mqtt", f"mqtt://127.0.0.1:{port}", "--node", "n1", "--names", "pump",
                 "--metrics", f"127.0.0.1:{mport}", "--clips", clips, "--events", evf],
                tmp, "run1")
    sub.wait(lambda ls: ("ssae/n1/status", True, "online") in ls or
             ("ssae/n1/status", False, "online") in ls, 10, "status online")
    check(one_shot(port, "ssae/n1/status") == "1\tonline", "status online is not retained")
    m.at(2.0)
    code, text = http(f"http://127.0.0.1:{mport}/metrics")
    check(code == 200, f"/metrics {code}")
    mf = os.path.join(tmp, "metrics.txt")
    with open(mf, "w") as f:
        f.write(text)
    pc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                        text=True)
    check(pc.returncode == 0, f"promtool check metrics: {pc.stdout}{pc.stderr}")
    check('machine="pump"' in text, "no machine label in /metrics")
    check(http(f"http://127.0.0.1:{mport}/healthz")[0] == 200, "healthz not 200 while running")
    print("ok  /metrics passes promtool (%d lines), /healthz 200" % len(text.splitlines()))
    m.wait_log("the input ended", 20)
    t_end = time.time()
    code = 200
    while time.time() - t_end < 15 and code == 200:
        code = http(f"http://127.0.0.1:{mport}/healthz")[0]
        time.sleep(0.25)
    check(code == 503 and m.p.poll() is None,
          f"/healthz {code} after the input stopped (process alive: {m.p.poll() is None})")
    print(f"ok  /healthz 503 {time.time() - t_end:.1f} s after the input ended")
    m.p.send_signal(signal.SIGTERM)
    m.p.wait(30)
    check(m.p.returncode == 0, f"monitor rc {m.p.returncode}: {m.stderr()}")
    check("sample(s) lost" not in m.stderr(), f"clip samples lost at real time: {m.stderr()}")
    check(one_shot(port, "ssae/n1/status") == "1\toffline", "no retained offline after exit")
    ls = sub.lines()
    disc = {t: json.loads(p) for t, r, p in ls if t.startswith("homeassistant/") and p}
    bs = [c for t, c in disc.items() if t.startswith("homeassistant/binary_sensor/")]
    sn = [c for t, c in disc.items() if t.startswith("homeassistant/sensor/")]
    check(len(bs) == 1 and len(sn) == 1 and bs[0]["device_class"] == "problem" and
          bs[0]["state_topic"] == "ssae/n1/pump/state", f"discovery: {disc}")
    st = states(ls, "pump")
    check(len(st) >= 5 and all("threshold" in s and "windows" in s for s in st),
          f"state messages: {st[:3]}")
    check(any(s["alarm"] for s in st) and not st[-1]["alarm"], "state: alarm not on then off")
    ev = [e for e in events(ls, "pump") if e["event"].startswith("alarm")]
    check([e["event"] for e in ev] == ["alarm_on", "alarm_off"], f"alarm events {ev}")
    if len(ev) == 2:
        on, off = ev
        check(on["id"] == off["id"] and len(on["id"]) == 36, "one id per alarm")
        check(on["machine"] == "pump" and on["node"] == "n1", on)
        if spans is not None:
            check(spans == [(round(on["t"], 6), round(off["t"], 6))],
                  f"MQTT alarm {on['t']}..{off['t']} != report spans {spans}")
        print(f"ok  one alarm pair, id {on['id']}, {on['t']} .. {off['t']} s "
              f"(report: {spans})")
        check_clip(tmp, wav, on, off, 2.048, 1.024)
        check_picture(on, evf)
    check_spec_keys(evf)
    # stdout (not a terminal here) names the machine as MQTT and the file do
    with open(os.path.join(tmp, "run1.out")) as f:
        out = [json.loads(l) for l in f if l.startswith("{")]
    names = {e.get("machine") for e in out if e["event"].startswith("alarm")}
    check(names == {"pump"}, f"stdout's alarm lines name {names}, not the machine pump")
    # ... and carry the alarm's clip as the events file's lines do
    with open(evf) as f:
        clips = {e["id"]: e.get("clip") for e in map(json.loads, f) if e["event"] == "alarm_on"}
    out_alarms = [e for e in out if e["event"].startswith("alarm")]
    check(out_alarms and all(e.get("clip") and e.get("clip") == clips.get(e["id"])
                             for e in out_alarms),
          f"stdout's alarm lines' clips {[e.get('clip') for e in out_alarms]}, the file's {clips}")
    print(f"ok  status online/offline, {len(disc)} discovery configs, {len(st)} states")


def check_picture(on, evf):
    """clips.picture: a PNG beside the clip, announced with the alarm's id."""
    clip = on.get("clip", "")
    png = os.path.splitext(clip)[0] + ".png"
    evs = [json.loads(l) for l in open(evf) if '"clip_picture' in l]
    check(len(evs) == 1 and evs[0]["event"] == "clip_picture" and evs[0]["id"] == on["id"]
          and evs[0]["picture"] == png and evs[0]["clip"] == clip, f"picture events {evs}")
    check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
          f"no PNG picture at {png}")
    print(f"ok  the clip's picture {os.path.basename(png)} "
          f"({os.path.getsize(png) if os.path.exists(png) else 0} bytes)")


def check_spec_keys(path):
    """SPEC section 4: every event line has at least t, channel, event, score
    and threshold (null where it has none), clip and config lines included."""
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    keys = ("t", "channel", "event", "score", "threshold")
    missing = [e for e in lines if not all(k in e for k in keys)]
    check(lines and not missing, f"{path}: lines without SPEC section 4's keys: {missing[:3]}")
    print(f"ok  {len(lines)} event lines ({', '.join(sorted({e['event'] for e in lines}))}): "
          f"each has {', '.join(keys)}")


def check_clip(tmp, wav, on, off, pre, post):
    clip = on.get("clip", "")
    check(clip == off.get("clip") and os.path.exists(clip), f"clip {clip}")
    if not os.path.exists(clip):
        return
    rate, x = read_wav(wav)
    crate, y = read_wav(clip)
    a = round((on["t"] - pre) * rate)
    b = round((off["t"] + post) * rate)
    check(crate == rate and len(y) // 2 == b - a,
          f"clip {len(y) // 2} samples, expected {b - a} ({pre} s before {on['t']} .. "
          f"{post} s after {off['t']})")
    check(y == x[2 * a:2 * b], "the clip's samples are not the input's span")
    span = os.path.join(tmp, "span.wav")
    with wave.open(span, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x[2 * a:2 * b])
    import numpy as np
    fc, fs = os.path.join(tmp, "clip.npy"), os.path.join(tmp, "span.npy")
    for src, dst in ((clip, fc), (span, fs)):
        subprocess.run([SSAE, "features", src, "-o", dst], check=True, capture_output=True)
    mc, ms = np.load(fc), np.load(fs)
    check(mc.shape == ms.shape and np.allclose(mc, ms, atol=1e-4),
          f"clip log-mel {mc.shape} differs from the input span's {ms.shape}")
    # The fault is in the clip: its loudest frames are the alarm's.
    print(f"ok  clip {os.path.basename(clip)}: {(b - a) / rate:.3f} s = {pre} s pre-roll + "
          f"alarm + {post} s post-roll, samples and log-mel ({mc.shape[0]} frames) match")


def run2(tmp, broker, port, sub):
    """Broker restart mid-run; SIGHUP with a new model and threshold; SIGHUP
    with a broken config."""
    wav = os.path.join(tmp, "fault2.wav")
    gen(wav, 11, "clicks", 2.0, 1.5, seed=9)
    model_a = os.path.join(tmp, "a.safetensors")
    model_b = os.path.join(tmp, "b.safetensors")
    shutil.copy(os.path.join(SRC, "src", "model", "default.safetensors"), model_a)
    make_model_b(model_a, model_b)
    cfg = os.path.join(tmp, "run2.yaml")
    body = ("node: n2\nengine: {status_every: 0.25}\nmachines:\n  - name: fan\n"
            "    model: %s\n    threshold: %s\n"
            f"outputs:\n  mqtt:\n    url: mqtt://127.0.0.1:{port}\n"
            "    reconnect_min: 0.1\n    reconnect_max: 0.5\n")
    with open(cfg, "w") as f:
        f.write(body % (model_a, "7.5"))
    win = os.path.join(tmp, "run2.tsv")
    m = Monitor(["--config", cfg, "--input", wav, "--realtime", "--windows", win], tmp, "run2")
    sub.wait(lambda ls: any(t == "ssae/n2/status" and p == "online" for t, r, p in ls), 10,
             "n2 online")
    m.at(1.0)
    broker.stop()
    m.at(4.5)  # the fault (2.0 .. 3.5 s) came and went while the broker was away
    check(not any(e for e in events(sub.lines(), "fan", "n2")), "events while the broker was down?")
    broker.start()
    sub.wait(lambda ls: len([e for e in events(ls, "fan", "n2")
                             if e["event"].startswith("alarm")]) >= 2, 10,
             "the alarm raised while the broker was away")
    ev = [e for e in events(sub.lines(), "fan", "n2") if e["event"].startswith("alarm")]
    check([e["event"] for e in ev] == ["alarm_on", "alarm_off"] and ev[0]["id"] == ev[1]["id"]
          and 2.0 < ev[0]["t"] < 3.6, f"queued alarm: {ev}")
    print("ok  broker restart: the alarm raised while it was away arrived:",
          [(e["event"], e["t"]) for e in ev])
    # SIGHUP: model B and threshold 42.
    with open(cfg, "w") as f:
        f.write(body % (model_b, "42"))
    m.at(6.0)
    m.p.send_signal(signal.SIGHUP)
    m.wait_log("reload: config applied, model swapped", 5)
    sub.wait(lambda ls: any(s["threshold"] == 42 for s in states(ls, "fan", "n2")), 5,
             "threshold 42 in the state")
    # A broken config: refused, the running one stays.
    with open(cfg, "w") as f:
        f.write(body % (model_b, "42") + "  bogus_key: 1\n")
    m.at(8.0)
    m.p.send_signal(signal.SIGHUP)
    m.wait_log("the running one stays", 5)
    sub.wait(lambda ls: any(t == "ssae/n2/event" and p and
                            json.loads(p)["event"] == "config_rejected" for t, r, p in ls),
             5, "config_rejected on MQTT")
    m.p.wait(30)
    err = m.stderr()
    check(m.p.returncode == 0, f"run2 rc {m.p.returncode}: {err}")
    summ = [l for l in err.splitlines() if " windows, " in l]
    check(summ and " 0 dropped" in summ[-1], f"summary: {summ}")
    rejected = [l for l in err.splitlines() if "config is refused" in l]
    check(rejected and "run2.yaml:" in rejected[0] and "bogus_key" in rejected[0],
          f"rejection log: {rejected}")
    sts = states(sub.lines(), "fan", "n2")
    check(sts and sts[-1]["threshold"] == 42, f"last state {sts[-1:]}")
    # Every window scored, model A's scores up to the swap, B's after it.
    live = [l.split("\t") for l in open(win).read().splitlines()[1:]]
    idx = [int(r[1]) for r in live]
    check(idx == list(range(len(idx))), "windows missing from --windows")
    ref = {}
    for name, mp in (("a", model_a), ("b", model_b)):
        out = os.path.join(tmp, f"ref_{name}.tsv")
        subprocess.run([SSAE, "score", wav, "--model", mp, "--backend", "cpu",
                        "--windows", out], check=True, capture_output=True)
        ref[name] = [l.split("\t")[3] for l in open(out).read().splitlines()[1:]]
    check(len(ref["a"]) == len(live), f"{len(live)} live windows, {len(ref['a'])} offline")
    src = ["a" if r[3] == ref["a"][i] else "b" if r[3] == ref["b"][i] else "?"
           for i, r in enumerate(live) if i < len(ref["a"])]
    k = src.index("b") if "b" in src else -1
    check(k > 0 and src == ["a"] * k + ["b"] * (len(src) - k),
          f"scores not A then B: {''.join(src)}")
    print(f"ok  SIGHUP: model swapped between windows {k - 1} and {k} of {len(src)} "
          f"(t {float(live[k][2]):.3f} s), none lost; threshold 42 in the state; a broken "
          "config refused:", rejected[0][:100])


def run3(tmp):
    cfg = os.path.join(tmp, "two.yaml")
    a = os.path.join(tmp, "a.safetensors")
    b = os.path.join(tmp, "b.safetensors")
    with open(cfg, "w") as f:
        f.write(f"machines:\n  - name: m1\n    model: {a}\n    threshold: 1e6\n"
                f"  - name: m2\n    model: {b}\n    threshold: 1e-6\n")
    rate, x = read_wav(os.path.join(tmp, "fault.wav"))
    wav = os.path.join(tmp, "stereo.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(x[i:i + 2] * 2 for i in range(0, len(x), 2)))
    win, evf = os.path.join(tmp, "two.tsv"), os.path.join(tmp, "two.jsonl")
    p = subprocess.run([SSAE, "monitor", "--config", cfg, "--input", wav, "--no-meter",
                        "--backend", "cpu", "--windows", win, "--events", evf],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"two models: rc {p.returncode} {p.stderr}")
    rows = [l.split("\t") for l in open(win).read().splitlines()]
    check(rows[0] == ["path", "window", "time", "score", "channel"], f"header {rows[0]}")
    ref = {}
    for name, mp in (("0", a), ("1", b)):
        out = os.path.join(tmp, f"two_ref_{name}.tsv")
        subprocess.run([SSAE, "score", os.path.join(tmp, "fault.wav"), "--model", mp,
                        "--backend", "cpu", "--windows", out], check=True, capture_output=True)
        ref[name] = {int(l.split("\t")[1]): l.split("\t")[3]
                     for l in open(out).read().splitlines()[1:]}
    per = {"0": 0, "1": 0}
    for r in rows[1:]:
        check(ref[r[4]].get(int(r[1])) == r[3],
              f"channel {r[4]} window {r[1]}: {r[3]}, its model's {ref[r[4]].get(int(r[1]))}")
        per[r[4]] += 1
    check(per["0"] == per["1"] == len(ref["0"]) > 0, f"windows per channel {per}")
    alarms = [json.loads(l) for l in open(evf) if '"alarm_on"' in l]
    check(alarms and all(e["machine"] == "m2" for e in alarms), f"alarms {alarms}")
    print(f"ok  two machines, two models on one engine: {per['0']} windows each, every one "
          "its own model's score; only m2 (threshold 1e-6) alarms")
    # A missing model file is named where the config says, machine 0's too
    for i in (0, 1):
        bad = os.path.join(tmp, f"bad{i}.yaml")
        models = [a, b]
        models[i] = os.path.join(tmp, "nope.safetensors")
        with open(bad, "w") as f:
            f.write(f"machines:\n  - name: m1\n    model: {models[0]}\n"
                    f"  - name: m2\n    model: {models[1]}\n")
        p = subprocess.run([SSAE, "monitor", "--config", bad, "--input", wav, "--no-meter",
                            "--backend", "cpu"], capture_output=True, text=True)
        want = f"{bad}:{3 + 2 * i}: machines[{i}].model: model file '{models[i]}'"
        check(p.returncode != 0 and want in p.stderr,
              f"machines[{i}] missing model: rc {p.returncode}, {p.stderr!r}, want {want!r}")
    print("ok  a missing model file named FILE:LINE: machines[i].model, i = 0 and 1")
    # A file played as fast as it scores waits for the clip writer: no clip
    # sample is lost (the metrics' counter and stderr say 0), and the clip
    # holds the input's span exactly, as at real time.
    mport = free_port()
    fast_cfg = os.path.join(tmp, "fastclips.yaml")
    with open(fast_cfg, "w") as f:
        f.write("outputs:\n  clips:\n    dir: " + os.path.join(tmp, "fastclips") +
                "\n    format: wav\n    pre_roll: 2.048\n    post_roll: 1.024\n")
    fast_ev = os.path.join(tmp, "fastclips.jsonl")
    # A minute, the fault near its end: read at hundreds of times real time,
    # the rings (pre-roll + 3 s) turn over many times before the writer,
    # woken by the alarm, would take its pre-roll.
    late = os.path.join(tmp, "late_fault.wav")
    gen(late, 60, "clicks", 50.0, 2.5)
    t0 = time.time()
    m = Monitor(["--config", fast_cfg, "--input", late, "--names",
                 "pump", "--node", "n1", "--keep-running", "--events", fast_ev,
                 "--metrics", f"127.0.0.1:{mport}"], tmp, "fastclips")
    m.wait_log("the input ended", 30)
    wall = time.time() - t0
    lost = None
    for _ in range(100):
        code, body = http(f"http://127.0.0.1:{mport}/metrics")
        found = re.search(r"^ssae_clips_lost_samples_total\{[^}]*\} (\S+)$", body, re.M)
        if code == 200 and found:
            lost = int(float(found.group(1)))
            break
        time.sleep(0.05)
    m.p.send_signal(signal.SIGTERM)
    m.p.wait(30)
    check(lost == 0 and "sample(s) lost" not in m.stderr(),
          f"clip samples lost: metrics {lost}, stderr {m.stderr()[-300:]!r}")
    with open(fast_ev) as f:
        ev = [json.loads(l) for l in f if '"alarm_o' in l]
    check([e["event"] for e in ev] == ["alarm_on", "alarm_off"], f"fast alarm events {ev}")
    if len(ev) == 2:
        check_clip(tmp, late, ev[0], ev[1], 2.048, 1.024)
    print(f"ok  a file played fast ({wall:.2f} s wall): no clip sample lost, the clip is "
          f"the input's span")
    # A clip the disk cannot take (here a file-size limit of 100 kB, as a
    # full disk fails a write): clip_failed names why, stderr says it, the
    # exit status is 1 and no temporary file is left; the rest goes on.
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    full_dir = os.path.join(tmp, "fullclips")
    full_ev = os.path.join(tmp, "fullclips.jsonl")
    p = subprocess.run([SSAE, "monitor", "--backend", "cpu", "--no-meter", "--config", fast_cfg,
                        "--clips", full_dir, "--input", late, "--names", "pump",
                        "--events", full_ev], capture_output=True, text=True, timeout=120,
                       preexec_fn=small_files)
    with open(full_ev) as f:
        lines = [json.loads(l) for l in f]
    failed = [e for e in lines if e["event"] == "clip_failed"]
    check(p.returncode == 1 and len(failed) == 1 and "writing the clip failed" in
          failed[0].get("message", "") and "alarm clips: 1 of 1 not written" in p.stderr and
          not os.listdir(full_dir) and
          [e["event"] for e in lines if e["event"].startswith("alarm")] ==
          ["alarm_on", "alarm_off"],
          f"a clip the disk cannot take: rc {p.returncode}, {failed}, {os.listdir(full_dir)}, "
          f"stderr {p.stderr[-400:]!r}")
    check_spec_keys(full_ev)
    print(f"ok  a clip the disk cannot take: clip_failed ({failed[0]['message'] if failed else ''})"
          f", said on stderr, exit status 1")
    # A broker that never answers is said while running and at the end
    dead = free_port()
    p = subprocess.run([SSAE, "monitor", "--input", os.path.join(tmp, "fault.wav"), "--realtime",
                        "--duration", "2.5", "--no-meter", "--backend", "cpu", "--names", "pump",
                        "--node", "n1", "--mqtt", f"mqtt://127.0.0.1:{dead}"],
                       capture_output=True, text=True, timeout=60)
    # (2.5 s without an alarm: nothing to deliver, exit status 0; the silent
    # peer below has an alarm event undelivered: 1)
    check(p.returncode == 0 and f"MQTT: cannot reach mqtt://127.0.0.1:{dead}" in p.stderr
          and f"MQTT: never connected to mqtt://127.0.0.1:{dead}" in p.stderr
          and "nothing was delivered" in p.stderr,
          f"unreachable broker: rc {p.returncode}, {p.stderr[-500:]!r}")
    print("ok  an unreachable broker said while running and at the end")
    # A peer that takes the connection and never answers (mqtts:// to a port
    # without TLS hangs in the handshake so): said while running too.
    import socket
    import threading
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(4)
    held = []
    threading.Thread(target=lambda: [held.append(hole.accept()) for _ in range(4)],
                     daemon=True).start()
    url = f"mqtts://127.0.0.1:{hole.getsockname()[1]}"
    p = subprocess.run([SSAE, "monitor", "--input", os.path.join(tmp, "fault.wav"), "--realtime",
                        "--duration", "6.5", "--no-meter", "--backend", "cpu", "--names", "pump",
                        "--node", "n1", "--mqtt", url], capture_output=True, text=True, timeout=60)
    hole.close()
    check(p.returncode == 1 and f"MQTT: no answer from {url} after 5 s (a port without TLS"
          in p.stderr, f"a silent peer: rc {p.returncode}, {p.stderr[-500:]!r}")
    print("ok  a peer that never answers said while running")
    # Under systemd stdout and stderr are the journal (JOURNAL_STREAM names
    # it): one line per event with its syslog priority, no JSON flood, no
    # terminal sequences.
    log = os.path.join(tmp, "journal.txt")
    with open(log, "wb") as f:
        st = os.fstat(f.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        p = subprocess.run([SSAE, "monitor", "--input", os.path.join(tmp, "fault.wav"),
                            "--backend", "cpu", "--names", "pump", "--node", "n1"],
                           stdout=f, stderr=f, env=env)
    text = open(log).read()
    lines = text.splitlines()
    check(p.returncode == 0 and "\033" not in text and not any(l.startswith("{") for l in lines)
          and any(l.startswith("<4>ssae monitor: alarm on: machine pump") for l in lines)
          and any(l.startswith("<5>ssae monitor: alarm off: machine pump") for l in lines)
          and lines[0].startswith("<6>ssae monitor: service: node n1"),
          f"journal lines: {lines}")
    print("ok  journald: one line per event with its priority:", lines[1])


def main():
    for prog in ("mosquitto", "mosquitto_sub", "promtool", "curl"):
        if not shutil.which(prog):
            skip(f"{prog} not installed (apt-get install mosquitto mosquitto-clients "
                 "prometheus)")
    try:
        import numpy  # noqa: F401
    except ImportError:
        skip("python3-numpy not installed")
    with broker_session("ssae_monsvc_") as (tmp, port, broker, sub):
        run1(tmp, port, sub)
        run2(tmp, broker, port, sub)
        run3(tmp)
    done()


if __name__ == "__main__":
    main()
