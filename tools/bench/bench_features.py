#!/usr/bin/python3
"""Log-mel throughput, single thread: ssae against torchaudio on the same
files in the same run. Prints seconds of audio per CPU second for
  1. the log-mel stage alone (audio already decoded, 16 kHz float32):
     ssae (timed inside `dsp_tool bench`): one front end fed every clip
     (process + flush), and ssae_logmel_compute per clip (a new front end
     each time); torchaudio: one MelSpectrogram + 10*log10(x + eps),
     torch.set_num_threads(1);
  2. file to .npy: `ssae features FILES -o OUTDIR` (child CPU time: program
     start, decoding, log-mel, writing) vs torchaudio.load + the same
     transform + numpy.save per file.
Each round measures both sides back to back; the ratios of each round and
their median are printed, with the load average (the CPU may be shared).
usage: /usr/bin/python3 tools/bench/bench_features.py --ssae BUILD/ssae \\
           --dsp-tool BUILD/tests/dsp/dsp_tool [--repeat N] [--rounds R] FILE|DIR...
"""
import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch
import torchaudio

EPS = 2.220446049250313e-16


def files_of(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".wav"))
        else:
            out.append(p)
    return out


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssae", required=True)
    ap.add_argument("--dsp-tool", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    files = files_of(a.paths)
    torch.set_num_threads(1)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0.0, f_max=None,
        power=2.0, center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")

    def transform(x):
        return 10 * torch.log10(mel(x) + EPS)

    clips = [torchaudio.load(f)[0][0].contiguous() for f in files]
    audio = sum(x.shape[0] for x in clips) / 16000
    transform(clips[0])  # warm-up
    print(f"files: {len(files)}, {audio:.1f} s of audio, repeat {a.repeat}, "
          f"torch {torch.__version__}, torchaudio {torchaudio.__version__}")
    stage, stage_new, e2e = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            load = os.getloadavg()[0]
            # 1. log-mel stage.
            out = subprocess.run([a.dsp_tool, "bench", str(a.repeat), *files], check=True,
                                 capture_output=True, text=True).stdout.split()
            s_audio, s_reuse, s_new = float(out[0]), float(out[1]), float(out[2])
            t0 = time.process_time()
            with torch.no_grad():
                for _ in range(a.repeat):
                    for x in clips:
                        transform(x)
            t1 = s_audio / (time.process_time() - t0)
            s1, s1n = s_audio / s_reuse, s_audio / s_new
            stage.append(s1 / t1)
            stage_new.append(s1n / t1)
            # 2. file -> .npy.
            c0 = child_cpu()
            for _ in range(a.repeat):
                subprocess.run([a.ssae, "features", *files, "-o", d], check=True,
                               stderr=subprocess.DEVNULL)
            s2 = audio * a.repeat / (child_cpu() - c0)
            t0 = time.process_time()
            with torch.no_grad():
                for _ in range(a.repeat):
                    for f in files:
                        x = torchaudio.load(f)[0][0]
                        np.save(os.path.join(d, "ta.npy"), transform(x).T.contiguous().numpy())
            t2 = audio * a.repeat / (time.process_time() - t0)
            e2e.append(s2 / t2)
            print(f"round {r + 1} (load {load:.1f})")
            print(f"  log-mel stage  ssae {s1:8.0f} s/CPU-s (one front end), {s1n:8.0f} "
                  f"(compute per clip)   torchaudio {t1:6.0f}   ratio {s1 / t1:5.1f}x / "
                  f"{s1n / t1:5.1f}x")
            print(f"  file to .npy   ssae {s2:8.0f} s/CPU-s   torchaudio {t2:6.0f}   "
                  f"ratio {s2 / t2:5.1f}x")
    print(f"median ratio: log-mel stage {statistics.median(stage):.1f}x (one front end), "
          f"{statistics.median(stage_new):.1f}x (compute per clip); "
          f"file to .npy {statistics.median(e2e):.1f}x")


if __name__ == "__main__":
    main()
