#!/usr/bin/python3
"""Benchmark for BENCHMARKS.md: `ssae score` against the Python pipeline a
PyTorch user would write (torchaudio.load, torchaudio MelSpectrogram, the
SPEC module on the CPU), on the same files, in the same run.

    /usr/bin/python3 tools/bench_score.py --ssae build/ssae [--files 240]
        [--dir /tmp/ssae_bench_clips] [--model M]

Generates ten-second 16 kHz 16-bit WAV files (machine hum, harmonics,
noise) into --dir unless they are there already, times both pipelines
(wall clock and CPU time) and checks that their file scores agree.
"""
import argparse
import os
import resource
import subprocess
import sys
import time
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


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


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssae", required=True)
    ap.add_argument("--files", type=int, default=240)
    ap.add_argument("--dir", default="/tmp/ssae_bench_clips")
    ap.add_argument("--model", default=None, help="model file (default: the built-in one, "
                    "exported with ssae's own default.safetensors)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model_path = a.model or os.path.join(root, "src", "model", "default.safetensors")
    paths = make_clips(a.dir, a.files)
    print("files: %d x 10 s, 16 kHz mono, in %s" % (len(paths), a.dir))
    print("machine: %s, %d cores" % (cpu_model(), os.cpu_count()))

    # ssae score (all cores, auto backend = CPU on this machine).
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run([a.ssae, "score", "-q", "--backend", "cpu", "--model", model_path] + paths,
                       capture_output=True, text=True)
    t_ssae, c_ssae = time.perf_counter() - t0, cpu_children() - c0
    if p.returncode:
        print(p.stderr)
        return 1
    ssae_scores = {ln.split("\t")[0]: float(ln.split("\t")[1]) for ln in p.stdout.strip().split("\n")}

    # The Python pipeline, including its imports as a user's script pays them.
    c1, t1 = cpu_self(), time.perf_counter()
    import torch
    import torchaudio
    import ssae_torch as st
    t_import = time.perf_counter() - t1
    model, meta = st.load_model(model_path)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0, f_max=None,
        power=2.0, center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")
    t2 = time.perf_counter()
    py_scores = {}
    with torch.no_grad():
        for path in paths:
            wave_, sr = torchaudio.load(path)
            lm = 10.0 * torch.log10(mel(wave_[0]) + 2.220446049250313e-16)
            x = lm.T.unfold(0, 5, 1).transpose(1, 2).reshape(-1, 320)
            s = ((model(x) - x) ** 2).mean(dim=1)
            py_scores[path] = float(s.mean())
    t_loop = time.perf_counter() - t2
    t_py, c_py = time.perf_counter() - t1, cpu_self() - c1

    worst = max(abs(ssae_scores[k] - v) / abs(v) for k, v in py_scores.items())
    n = len(paths)
    print("torch %s, torchaudio %s, %d torch threads" % (torch.__version__, torchaudio.__version__,
                                                       torch.get_num_threads()))
    print("%-34s %8s %10s %10s" % ("", "wall s", "files/s", "CPU s"))
    print("%-34s %8.2f %10.1f %10.2f" % ("ssae score (all cores)", t_ssae, n / t_ssae, c_ssae))
    print("%-34s %8.2f %10.1f %10.2f" % ("python pipeline, end to end", t_py, n / t_py, c_py))
    print("%-34s %8.2f %10.1f %10s" % ("  of which the per-file loop", t_loop, n / t_loop, "-"))
    print("%-34s %8.2f" % ("  of which imports", t_import))
    print("speed-up end to end (wall):   %.1fx" % (t_py / t_ssae))
    print("speed-up per-file loop only:  %.1fx" % (t_loop / t_ssae))
    print("speed-up in CPU time:         %.1fx" % (c_py / c_ssae))
    print("file scores agree within %.2e (relative; torch float32 vs ssae)" % worst)
    return 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
