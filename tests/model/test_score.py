"""`ssae score` against the PyTorch pipeline a user would write.

A model written by PyTorch (through tools/ssae_torch.py) scores generated
WAV files in `ssae score` and in torchaudio (MelSpectrogram as SPEC section
1) + the SPEC module, in float64: file and window scores agree within 1e-5
relative. A directory holding an unreadable file and a too-short file:
the rest is scored, both are named on stderr, exit status 1. Also --format
json, --windows, --channel, the default model, usage errors, and the
fall back to the CPU (forced through SSAE_BACKEND_FAIL_AT).

Exits 77 without torch/torchaudio.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import wave

try:
    import numpy as np
    import torch
    import torchaudio  # noqa: F401
except ImportError:
    sys.exit(77)

import ssae_torch as st

SSAE = os.environ.get("SSAE")
REL = 1e-5
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL:", msg)


def write_wav(path, data, sr=16000):
    """data: (samples, channels) float in [-1, 1) -> 16-bit PCM."""
    pcm = np.clip(np.round(data * 32768), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(data.shape[1])
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())


def read_wav(path):
    with wave.open(path, "rb") as w:
        n, ch = w.getnframes(), w.getnchannels()
        pcm = np.frombuffer(w.readframes(n), dtype="<i2").reshape(n, ch)
    return torch.from_numpy(pcm.astype(np.float64) / 32768.0)


def signal(seed, seconds, channels=1):
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000.0
    out = []
    for c in range(channels):
        f0 = 200 + 900 * rng.random()
        x = 0.2 * np.sin(2 * np.pi * f0 * t) + 0.05 * np.sin(2 * np.pi * 2.7 * f0 * t)
        x += (0.01 + 0.05 * rng.random()) * rng.standard_normal(len(t))
        x *= 1 + 0.5 * np.sin(2 * np.pi * (0.5 + c) * t)
        out.append(x * 0.8)
    return np.stack(out, axis=1)


def reference(model, meta, wave_1d):
    """File score and window scores: torchaudio features + module, float64."""
    x = st.windows(st.logmel(wave_1d, meta), int(meta.get("frames", "5")))
    with torch.no_grad():
        y = model(x)
    s = ((y - x) ** 2).mean(dim=1)
    return float(s.mean()), s


def run(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([SSAE, "score"] + args, capture_output=True, text=True, env=e)
    return p.returncode, p.stdout, p.stderr


def relerr(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    if not SSAE:
        print("SSAE is not set")
        return 1
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "clips")
        os.makedirs(os.path.join(d, "sub"))
        names = []
        for i, secs in enumerate([3.0, 1.7, 2.2]):
            p = os.path.join(d, "clip%d.wav" % i)
            write_wav(p, signal(i, secs))
            names.append(p)
        p = os.path.join(d, "sub", "deep.wav")
        write_wav(p, signal(9, 1.3))
        names.append(p)
        stereo = os.path.join(tmp, "stereo.wav")
        write_wav(stereo, signal(5, 1.5, channels=2))
        with open(os.path.join(d, "broken.wav"), "wb") as f:
            f.write(b"RIFF\x10\x00\x00\x00WAVEfmt junk that is not a header")
        write_wav(os.path.join(d, "short.wav"), signal(3, 0.05))

        # A model made and saved by PyTorch, with a threshold between the
        # files' scores so that both verdicts occur.
        torch.manual_seed(1)
        model = st.SpectralShapeAutoencoder().double().eval()
        meta = dict(st.FEATURE_DEFAULTS)
        ref = {p: reference(model, meta, read_wav(p)[:, 0]) for p in names}
        file_scores = sorted(v[0] for v in ref.values())
        thr = 0.5 * (file_scores[1] + file_scores[2])
        mpath = os.path.join(tmp, "torch_model.safetensors")
        st.save_model(model, mpath, {"threshold": "%.17g" % thr, "threshold_method": "test",
                                     "provenance": "test_score.py"})
        model, meta = st.load_model(mpath, dtype=torch.float64)

        wpath = os.path.join(tmp, "windows.tsv")
        rc, out, err = run(["--model", mpath, "--windows", wpath, d])
        check(rc == 1, "exit status %d with a bad file in the directory (want 1)" % rc)
        check("broken.wav" in err and "short.wav" in err and "too short" in err,
              "stderr should name both bad files: %r" % err)
        lines = [ln.split("\t") for ln in out.strip().split("\n")]
        got_paths = [ln[0] for ln in lines]
        check(got_paths == sorted(names), "paths/order %s" % got_paths)
        for ln in lines:
            path, score, nwin, verdict = ln[0], float(ln[1]), int(ln[2]), ln[3]
            rs, rw = ref[path]
            e = relerr(score, rs)
            print("%-50s ssae %.9g torch %.9g rel %.2e windows %d" % (os.path.relpath(path, tmp), score, rs, e, nwin))
            check(e <= REL, "%s: file score rel err %.3g" % (path, e))
            check(nwin == len(rw), "%s: %d windows, torch %d" % (path, nwin, len(rw)))
            check(verdict == ("anomaly" if score > thr else "normal"), "%s: verdict %s" % (path, verdict))
        with open(wpath) as f:
            rows = [r.rstrip("\n").split("\t") for r in f]
        check(rows[0] == ["path", "window", "time", "score"], "windows header %s" % rows[0])
        worst = 0.0
        for r in rows[1:]:
            path, k, t, s = r[0], int(r[1]), float(r[2]), float(r[3])
            worst = max(worst, relerr(s, float(ref[path][1][k])))
            check(abs(t - (k + 2) * 512 / 16000) < 1e-6, "window time %s" % r)
        check(len(rows) - 1 == sum(len(v[1]) for v in ref.values()), "window rows %d" % (len(rows) - 1))
        print("window scores: worst rel err %.2e over %d windows" % (worst, len(rows) - 1))
        check(worst <= REL, "window score rel err %.3g" % worst)

        # JSON lines say the same.
        rc, jout, _ = run(["--model", mpath, "--format", "json", "-q"] + names)
        check(rc == 0, "json run exit %d" % rc)
        objs = [json.loads(ln) for ln in jout.strip().split("\n")]
        check([o["path"] for o in objs] == names, "json paths")
        for o, ln in zip(objs, lines):
            check(o["score"] == float(ln[1]) and o["windows"] == int(ln[2]) and o["verdict"] == ln[3],
                  "json vs tsv: %s vs %s" % (o, ln))

        # Channel selection on a stereo file.
        st_wave = read_wav(stereo)
        for ch, w in (("1", st_wave[:, 1]), ("mix", st_wave.mean(dim=1))):
            rc, o, e = run(["--model", mpath, "--channel", ch, stereo])
            rs, _ = reference(model, meta, w)
            got = float(o.split("\t")[1]) if rc == 0 else float("nan")
            check(rc == 0 and relerr(got, rs) <= REL, "--channel %s: %s vs %.9g (%s)" % (ch, o.strip(), rs, e.strip()))
        rc, o, e = run(["--model", mpath, "--channel", "2", stereo])
        check(rc == 1 and "channel 2" in e, "--channel 2 of a stereo file: rc %d %r" % (rc, e))

        # A forced device failure: the CPU takes over, reported once, same scores.
        rc, o, e = run(["--model", mpath, "--backend", "cpu"] + names, {"SSAE_BACKEND_FAIL_AT": "1"})
        check(rc == 0 and e.count("switched to the CPU") == 1, "fallback: rc %d stderr %r" % (rc, e))
        check([x.split("\t")[:3] for x in o.strip().split("\n")] == [x[:3] for x in lines],
              "scores after the fallback differ")

        # The built-in model, with its own threshold (or none: 'unknown').
        rc, o, e = run([names[0]])
        info = json.loads(subprocess.run([SSAE, "info", "--format", "json"], capture_output=True,
                                         text=True).stdout)
        t = info["threshold"]
        f = o.strip().split("\t")
        want = "unknown" if t is None else ("anomaly" if float(f[1]) > t else "normal")
        check(rc == 0 and f[3] == want, "default model: %r %r (threshold %s)" % (o, e, t))

        # Usage errors exit 2; a bad model exits 1 and names it.
        for args in (["--format", "xml", names[0]], [], ["--backend", "tpu", names[0]], ["--bogus", names[0]],
                     ["--channel", "all", names[0]]):
            rc, _, e = run(args)
            check(rc == 2, "usage error %s: exit %d" % (args, rc))
        bad_model = os.path.join(tmp, "bad.safetensors")
        with open(bad_model, "wb") as f:
            f.write(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
        rc, _, e = run(["--model", bad_model, names[0]])
        check(rc == 1 and "bad.safetensors" in e, "bad model: rc %d %r" % (rc, e))
        rc, o, _ = run(["--help"])
        check(rc == 0 and "--windows" in o, "--help")
    if fails:
        print("%d failure(s)" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
