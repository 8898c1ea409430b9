"""End to end with a real JACK server: jackd (dummy driver, 16 kHz, 256
frames), sndfile-jackplay playing a generated recording into `ssae jack`.
A recording with an injected anomaly (3.0-5.0 s) gives one alarm_on near
3 s and one alarm_off after 5 s; a normal recording gives none. Also: the
ports, a buffer-size change (jack_bufsize) under a running client,
`ssae monitor` live through PortAudio's JACK device, the server going
away (both end cleanly: exit 1, a clear message, events flushed), and a
server that stops answering (SIGSTOP: `ssae jack` takes it as gone after
--watchdog seconds and gives up closing its client after a bound, with the
same clean end). Skips (77) without jackd or
sndfile-jackplay or a JACK-enabled ssae.

The model is made here so that the anomaly is known to score high: its
slice decoder's weights are zero and its bias is the normal recording's
mean log-mel level per band, so a window's score is the mean squared
distance of its log-mel values from the normal level. The threshold comes
from the normal recording's own window scores (`ssae monitor --input`)."""
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import wave

from ssae_jack import Jack
from ssae_testlib import skip

SSAE = os.environ["SSAE"]
BUILD = os.environ.get("SSAE_BUILD_ROOT", "")
RATE = 16000
DUR = 7.0
A0, A1 = 3.0, 5.0


def write_wav(path, anomaly, seed):
    rng = random.Random(seed)
    out = bytearray()
    for i in range(int(RATE * DUR)):
        t = i / RATE
        v = 0.02 * rng.uniform(-1, 1) + 0.02 * math.sin(2 * math.pi * 300 * t)
        if anomaly and A0 <= t < A1:
            v += 0.5 * rng.uniform(-1, 1)  # a loud broadband fault
        out += struct.pack("<h", max(-32768, min(32767, int(v * 32767))))
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(bytes(out))


def write_model(path, level):
    """A safetensors model (SPEC section 3) whose reconstruction is `level`."""
    M, F, L, S = 64, 5, 32, 64
    C = F * S
    rng = random.Random(5)

    def rnd(n, a):
        return [rng.uniform(-a, a) for _ in range(n)]
    tensors = [
        ("slice_encoder.0.weight", [M], [1.0] * M),
        ("slice_encoder.0.bias", [M], [0.0] * M),
        ("slice_encoder.1.weight", [S, M], rnd(S * M, 0.1)),
        ("slice_encoder.1.bias", [S], rnd(S, 0.1)),
        ("global_basis", [L, C], rnd(L * C, 0.1)),
        ("bottleneck_mlp.0.weight", [L], [1.0] * L),
        ("bottleneck_mlp.0.bias", [L], [0.0] * L),
        ("bottleneck_mlp.1.weight", [L, L], rnd(L * L, 0.1)),
        ("bottleneck_mlp.1.bias", [L], rnd(L, 0.1)),
        ("slice_decoder.0.weight", [M, S], [0.0] * (M * S)),
        ("slice_decoder.0.bias", [M], list(level)),
    ]
    header, data, off = {}, bytearray(), 0
    for name, shape, vals in tensors:
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    header["__metadata__"] = {"note": "test model: score = distance from a level"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(data))


def mean_logmel(tmp, wav):
    npy = os.path.join(tmp, "f.npy")
    r = subprocess.run([SSAE, "features", wav, "-o", npy], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    with open(npy, "rb") as f:
        raw = f.read()
    hl = struct.unpack("<H", raw[8:10])[0]
    hdr = raw[10:10 + hl].decode()
    body = raw[10 + hl:]
    n = len(body) // 4
    vals = struct.unpack("<%df" % n, body)
    assert "'<f4'" in hdr and "(%d, 64)" % (n // 64) in hdr.replace(" ", " "), hdr
    T = n // 64
    return [sum(vals[t * 64 + m] for t in range(T)) / T for m in range(64)]


def window_scores(tmp, model, wav):
    tsv = os.path.join(tmp, "w.tsv")
    r = subprocess.run([SSAE, "monitor", "--backend", "cpu", "--model", model, "--input", wav,
                        "--windows", tsv, "--no-meter", "--threshold", "1e30"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(tsv) as f:
        rows = [l.split("\t") for l in f.read().splitlines()[1:]]
    return [(float(t), float(s)) for _, _, t, s in rows]


# every `ssae jack` started, killed at the end if still running (a failed
# check must not leave a client behind)
CLIENTS = []


def start_client(jack, tmp, model, thr, name, events, extra=("--inputs", "1", "--passthrough")):
    p = subprocess.Popen(
        [SSAE, "jack", "--model", model, "--backend", "cpu", "--name", name,
         "--threshold", repr(thr),
         "--smoothing", "0.05", "--on", "3", "--off", "3", "--status", "0",
         "--events", events] + list(extra),
        env=jack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLIENTS.append(p)
    line = p.stderr.readline()  # "client ... running": the engine has started
    t_start = time.monotonic()
    if "running" not in line:
        p.kill()
        raise AssertionError("ssae jack did not start: " + line + p.stderr.read())
    return p, t_start


def play(jack, name, wav):
    t = time.monotonic()
    r = subprocess.run(["sndfile-jackplay", "--autoconnect=" + name + ":in_1", wav], env=jack.env,
                       capture_output=True, text=True, timeout=DUR + 20)
    assert r.returncode == 0, r.stdout + r.stderr
    return t


def read_events(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    for prog in ("jackd", "jack_lsp", "sndfile-jackplay"):
        if not shutil.which(prog):
            skip(prog + " not found")
    cfg = os.path.join(BUILD, "ssae_config.h")
    if not os.path.exists(cfg) or "SSAE_HAVE_JACK 1" not in open(cfg).read():
        skip("ssae was built without JACK")

    with tempfile.TemporaryDirectory() as tmp:
        normal = os.path.join(tmp, "normal.wav")
        anomal = os.path.join(tmp, "anomaly.wav")
        write_wav(normal, False, 1)
        write_wav(anomal, True, 2)
        model = os.path.join(tmp, "level.safetensors")
        write_model(model, mean_logmel(tmp, normal))
        ns = window_scores(tmp, model, normal)
        an = window_scores(tmp, model, anomal)
        top = max(s for _, s in ns)
        inside = [s for t, s in an if A0 + 0.2 < t < A1 - 0.2]
        assert min(inside) > 20 * top, ("the test anomaly does not score high", min(inside), top)
        thr = math.sqrt(top * min(inside))
        print(f"normal max window score {top:.3g}, anomaly min {min(inside):.3g}, "
              f"threshold {thr:.3g}")

        jack = Jack(tmp, "ssae_test_jack_e2e", RATE)
        try:
            # The anomaly through the device front end (--gpu-frontend, its
            # CPU path without a GPU): the same alarms from JACK's periods.
            for wav, is_anomaly, more in ((normal, False, ()), (anomal, True, ("--gpu-frontend",))):
                name = "ssae_t%d" % int(is_anomaly)
                events = os.path.join(tmp, name + ".jsonl")
                p, t_start = start_client(jack, tmp, model, thr, name, events,
                                          ("--inputs", "1", "--passthrough") + more)
                ports = jack.ports()
                for port in ("in_1", "out_1", "score_1", "alarm_1"):
                    assert f"{name}:{port}" in ports, ports
                t_play = play(jack, name, wav)
                time.sleep(0.5)
                p.send_signal(signal.SIGINT)
                out, err = p.communicate(timeout=20)
                assert p.returncode == 0, err
                evs = read_events(events)
                assert [json.loads(l) for l in out.splitlines() if l.strip()] == evs
                status = evs[-1]
                assert status["event"] == "status" and status["dropped"] == 0, status
                assert status["windows"] >= (DUR - 0.5) * RATE / 512, status
                alarms = [e for e in evs if e["event"] in ("alarm_on", "alarm_off")]
                # Seconds of audio since the client started when playback began.
                off = t_play - t_start
                print(f"{os.path.basename(wav)}: playback began at {off:.2f} s; "
                      f"events {[(e['event'], round(e['t'] - off, 2)) for e in alarms]}; "
                      f"latency p99 {status['latency_ms']['p99']} ms")
                if not is_anomaly:
                    assert not alarms, alarms
                    continue
                assert [e["event"] for e in alarms] == ["alarm_on", "alarm_off"], alarms
                on, offe = alarms[0]["t"] - off, alarms[1]["t"] - off
                # alarm on: 3 windows above after the fault enters a window;
                # off: 3 below after it has left the 5-frame window and the
                # smoothing (50 ms) has decayed. Slack for the start-up offset.
                assert A0 - 0.1 <= on <= A0 + 0.6, on
                assert A1 - 0.1 <= offe <= A1 + 1.0, offe
                assert alarms[0]["channel"] == 0 and alarms[0]["score"] > thr
                # SPEC section 4's alarm keys, through ssae jack's event sink.
                a_on, a_off = alarms
                assert a_on["id"] == a_off["id"] and len(a_on["id"]) == 36, alarms
                assert a_on["machine"] == a_off["machine"] == "ch0", alarms
                assert a_on["time"].endswith("Z") and a_off["time"] >= a_on["time"], alarms
                assert abs(a_off["duration_s"] - (a_off["t"] - a_on["t"])) < 1e-6, a_off
                assert a_off["peak_score"] >= a_on["window_score"], alarms
                assert a_off["reason"] == "score", a_off
                assert abs(alarms[0]["threshold"] - thr) < 1e-6 * thr

            # Two clients into one engine (--clients 2: an input group each, fed
            # by each client's own process thread): the normal recording into
            # channel 1, the anomaly into channel 2, at the same time.
            events = os.path.join(tmp, "groups.jsonl")
            # --connect numbers the inputs across the clients (the dummy
            # driver's capture ports carry silence: they add nothing).
            p, t_start = start_client(jack, tmp, model, thr, "ssae_g", events,
                                      ("--inputs", "2", "--clients", "2", "--connect",
                                       "system:capture_1", "system:capture_2"))
            ports = jack.ports()
            for port in ("ssae_g-1:in_1", "ssae_g-1:score_1", "ssae_g-2:in_2", "ssae_g-2:alarm_2"):
                assert port in ports, ports
            lsp = subprocess.run(["jack_lsp", "-c"], env=jack.env, capture_output=True,
                                 text=True).stdout.split("\n")
            conn = {}
            for line in lsp:
                if line.strip() and not line.startswith(" "):
                    cur = line.strip()
                elif line.strip():
                    conn.setdefault(cur, []).append(line.strip())
            assert conn.get("ssae_g-1:in_1") == ["system:capture_1"], conn
            assert conn.get("ssae_g-2:in_2") == ["system:capture_2"], conn
            t_play = time.monotonic()
            players = [subprocess.Popen(["sndfile-jackplay", "--autoconnect=" + port, wav],
                                        env=jack.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                       for port, wav in (("ssae_g-1:in_1", normal), ("ssae_g-2:in_2", anomal))]
            for pl in players:
                out, _ = pl.communicate(timeout=DUR + 20)
                assert pl.returncode == 0, out
            time.sleep(0.5)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=20)
            assert p.returncode == 0, err
            evs = read_events(events)
            status = evs[-1]
            assert status["event"] == "status" and status["dropped"] == 0, status
            assert status["windows"] >= 2 * (DUR - 0.5) * RATE / 512, status
            alarms = [e for e in evs if e["event"] in ("alarm_on", "alarm_off")]
            off = t_play - t_start
            print(f"two clients: events {[(e['event'], e['channel'], round(e['t'] - off, 2)) for e in alarms]}")
            assert [(e["event"], e["channel"]) for e in alarms] == \
                [("alarm_on", 1), ("alarm_off", 1)], alarms
            assert A0 - 0.1 <= alarms[0]["t"] - off <= A0 + 0.6, alarms
            assert A1 - 0.1 <= alarms[1]["t"] - off <= A1 + 1.0, alarms

            # `ssae monitor` live through PortAudio, whose JACK host API sees
            # this server as a device ("system").
            pa = "SSAE_HAVE_PORTAUDIO 1" in open(cfg).read()
            if pa:
                r = subprocess.run([SSAE, "monitor", "--list-devices"], env=jack.env,
                                   capture_output=True, text=True, timeout=30)
                pa = r.returncode == 0 and "JACK" in r.stdout
                if not pa:
                    print("PortAudio has no JACK device here: live monitor part skipped")
            if pa:
                pev = os.path.join(tmp, "pa.jsonl")
                r = subprocess.run([SSAE, "monitor", "--backend", "cpu", "--device", "system",
                                    "--duration", "2", "--events", pev, "--no-meter"],
                                   env=jack.env, capture_output=True, text=True, timeout=30)
                assert r.returncode == 0, r.stderr
                st = read_events(pev)[-1]
                assert st["event"] == "status" and st["windows"] >= 40 and st["dropped"] == 0, st
                print(f"monitor via PortAudio: {st['windows']} windows in 2 s, "
                      f"latency p99 {st['latency_ms']['p99']} ms")
                mev = os.path.join(tmp, "pa_gone.jsonl")
                # Once the server is gone, PortAudio's clean-up blocks inside
                # libjack, which therefore never joins its client thread: the
                # monitor ends without it (events first). Under ThreadSanitizer
                # that unjoined libjack thread is reported as a leak at exit;
                # it is not ours to join, and not a race.
                menv = dict(jack.env)
                menv["TSAN_OPTIONS"] = (menv.get("TSAN_OPTIONS", "") +
                                        " report_thread_leaks=0").strip()
                mon = subprocess.Popen([SSAE, "monitor", "--backend", "cpu", "--device", "system",
                                        "--events", mev, "--no-meter"], env=menv,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                CLIENTS.append(mon)
                # Running before the server goes (a slow start, e.g. under a
                # sanitizer, must not meet a server on its way out).
                mline = mon.stderr.readline()
                if "listening" not in mline:
                    mon.kill()
                    raise AssertionError("ssae monitor did not start: " + mline + mon.stderr.read())

            # The server goes away: a clear message, events flushed, exit 1.
            events = os.path.join(tmp, "gone.jsonl")
            p, _ = start_client(jack, tmp, model, thr, "ssae_gone", events)
            time.sleep(0.5)
            # The server's buffer size changes under the running client.
            if shutil.which("jack_bufsize"):
                r = subprocess.run(["jack_bufsize", "1024"], env=jack.env,
                                   capture_output=True, text=True, timeout=10)
                assert r.returncode == 0, r.stdout + r.stderr
            time.sleep(1.0)
            jack.stop()
            out, err = p.communicate(timeout=20)
            assert p.returncode == 1, (p.returncode, err)
            assert "JACK server went away" in err, err
            evs = read_events(events)
            assert any(e["event"] == "server_shutdown" for e in evs), evs
            assert evs[-1]["event"] == "status", evs
            # 1.5 s of audio, across the buffer-size change, all analysed.
            assert evs[-1]["windows"] >= 35 and evs[-1]["dropped"] == 0, evs[-1]
            if pa:
                # The monitor's device disappeared with the server.
                out, err = mon.communicate(timeout=20)
                assert mon.returncode == 1, (mon.returncode, err)
                assert "stopped" in err, err
                evs = read_events(mev)
                assert any(e["event"] == "device_lost" for e in evs), evs
                assert evs[-1]["event"] == "status", evs

            # A server that stops answering without going (SIGSTOP: no
            # shutdown notice, its sockets stay open): the client has no
            # process cycle for --watchdog seconds and takes the server as
            # gone; closing the client blocks in libjack and is given up
            # after its bound (5 s). A clear message, events flushed, exit 1.
            jack = Jack(tmp, "ssae_test_jack_e2e", RATE)
            # libjack's threads of the client left open are not joined (see
            # the monitor above): not a leak of ours under ThreadSanitizer.
            jack.env["TSAN_OPTIONS"] = (jack.env.get("TSAN_OPTIONS", "") +
                                        " report_thread_leaks=0").strip()
            events = os.path.join(tmp, "hung.jsonl")
            p, _ = start_client(jack, tmp, model, thr, "ssae_hung", events,
                                ("--inputs", "1", "--watchdog", "1"))
            time.sleep(0.5)
            t_stop = time.monotonic()
            jack.proc.send_signal(signal.SIGSTOP)
            try:
                out, err = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                raise AssertionError("ssae jack did not exit with the server stopped: " + err)
            finally:
                jack.proc.kill()  # a stopped process ends on SIGKILL too
                jack.proc.wait()
            took = time.monotonic() - t_stop
            print(f"server stopped: ssae jack exited after {took:.1f} s")
            assert p.returncode == 1, (p.returncode, err)
            assert "JACK server went away (no process cycle" in err, err
            assert "did not finish within" in err, err
            assert took < 1 + 5 + 4, (took, err)
            evs = read_events(events)
            assert any(e["event"] == "server_shutdown" for e in evs), evs
            assert evs[-1]["event"] == "status" and evs[-1]["dropped"] == 0, evs
        finally:
            for c in CLIENTS:
                if c.poll() is None:
                    c.kill()
                    c.wait()
            jack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
