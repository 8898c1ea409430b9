#!/usr/bin/python3
"""Benchmark for BENCHMARKS.md: `ssae score` against the Python pipeline a
PyTorch user would write (torchaudio.load, torchaudio MelSpectrogram, the
SPEC module on the CPU), on the same files, in the same run.

    /usr/bin/python3 tools/bench/bench_score.py --ssae build/ssae [--files 240]
        [--rounds 3] [--dir /tmp/ssae_bench_clips] [--model M]

Generates ten-second 16 kHz 16-bit WAV files (machine hum, harmonics,
noise) into --dir unless they are there already. Each round runs both
pipelines back to back, each as its own process started from here, as a
user would run them (so both pay their start-up: the Python one its
imports), and times wall clock and CPU time. On a machine that others
share the load moves between rounds: the ratio of each round is printed and
the median is the figure to quote. The file scores of the two must agree.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def make_clips(d, n, seconds=10.0, sr=16000):
    os.makedirs(d, exist_ok=True)
    paths = []
    t = np.arange(int(sr * seconds)) / sr
    for i in range(n):
        p = os.path.join(d, "clip%04d.wav" % i)
        paths.append(p)
        if os.path.exists(p):
            continue
        rng = np.random.default_rng(i)
        f0 = 50 + 400 * rng.random()
        x = sum((0.3 / k) * np.sin(2 * np.pi * k * f0 * t + rng.random() * 6) for k in range(1, 8))
        x += 0.05 * rng.standard_normal(len(t))
        x *= 0.5 * (1 + 0.2 * np.sin(2 * np.pi * 0.3 * t))
        pcm = np.clip(np.round(x * 32768 * 0.5), -32768, 32767).astype("<i2")
        with wave.open(p, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(sr)
            w.writeframes(pcm.tobytes())
    return paths


def python_pipeline(model_path, paths):
    """What a user's script does, imports included; prints the file scores
    as JSON and the time of its per-file loop on stderr."""
    import torch
    import torchaudio
    sys.path.insert(0, os.path.dirname(HERE))
    import ssae_torch as st
    model, meta = st.load_model(model_path)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0, f_max=None,
        power=2.0, center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")
    t0 = time.perf_counter()
    scores = {}
    with torch.no_grad():
        for path in paths:
            wave_, sr = torchaudio.load(path)
            lm = 10.0 * torch.log10(mel(wave_[0]) + 2.220446049250313e-16)
            x = lm.T.unfold(0, 5, 1).transpose(1, 2).reshape(-1, 320)
            s = ((model(x) - x) ** 2).mean(dim=1)
            scores[path] = float(s.mean())
    loop = time.perf_counter() - t0
    json.dump(scores, sys.stdout)
    sys.stderr.write("loop %.6f threads %d torch %s torchaudio %s\n" % (
        loop, torch.get_num_threads(), torch.__version__, torchaudio.__version__))
    return 0


def timed(cmd):
    """Runs cmd; returns (wall s, CPU s of the child, stdout, stderr)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode:
        sys.stderr.write(p.stderr)
        raise SystemExit("failed: %s ..." % " ".join(cmd[:4]))
    return wall, cpu, p.stdout, p.stderr


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--python-pipeline":
        return python_pipeline(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssae", required=True)
    ap.add_argument("--files", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/ssae_bench_clips")
    ap.add_argument("--model", default=None, help="model file (default: "
                    "src/model/default.safetensors, the one built into ssae)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(HERE))
    model_path = a.model or os.path.join(root, "src", "model", "default.safetensors")
    paths = make_clips(a.dir, a.files)
    n = len(paths)
    print("files: %d x 10 s, 16 kHz mono, in %s" % (n, a.dir))
    print("machine: %s, %d cores; load average before: %.2f %.2f %.2f"
          % ((cpu_model(), os.cpu_count()) + os.getloadavg()))
    ssae_cmd = [a.ssae, "score", "-q", "--backend", "cpu", "--model", model_path] + paths
    py_cmd = [sys.executable, os.path.abspath(__file__), "--python-pipeline", model_path] + paths

    print("%-6s %10s %10s %10s %10s %10s %9s %9s" % (
        "round", "ssae wall", "ssae CPU", "py wall", "py CPU", "py loop", "x wall", "x CPU"))
    rows = []
    for r in range(a.rounds):
        ws, cs, out_s, _ = timed(ssae_cmd)
        wp, cp, out_p, err_p = timed(py_cmd)
        loop = float(err_p.split()[1])
        rows.append((ws, cs, wp, cp, loop))
        print("%-6d %10.3f %10.3f %10.3f %10.3f %10.3f %8.1fx %8.1fx" % (
            r + 1, ws, cs, wp, cp, loop, wp / ws, cp / cs))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    print(err_p.strip().split(" ", 2)[2].replace("threads", "torch threads:", 1))

    med = lambda k: statistics.median(x[k] for x in rows)
    print("median ssae score:       %.3f s wall (%.0f files/s), %.3f s CPU"
          % (med(0), n / med(0), med(1)))
    print("median python pipeline:  %.3f s wall (%.1f files/s), %.3f s CPU, per-file loop %.3f s"
          % (med(2), n / med(2), med(3), med(4)))
    print("speed-up end to end, wall: median %.1fx (rounds: %s)" % (
        statistics.median(x[2] / x[0] for x in rows),
        " ".join("%.1f" % (x[2] / x[0]) for x in rows)))
    print("speed-up in CPU time:      median %.1fx" % statistics.median(x[3] / x[1] for x in rows))
    print("speed-up, python loop only vs ssae wall: median %.1fx"
          % statistics.median(x[4] / x[0] for x in rows))

    ssae_scores = {ln.split("\t")[0]: float(ln.split("\t")[1])
                   for ln in out_s.strip().split("\n")}
    py_scores = json.loads(out_p)
    worst = max(abs(ssae_scores[k] - v) / abs(v) for k, v in py_scores.items())
    print("file scores agree within %.2e (relative; torch float32 vs ssae)" % worst)
    return 0 if worst < 1e-4 and len(ssae_scores) == n else 1


if __name__ == "__main__":
    sys.exit(main())
