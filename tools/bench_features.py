#!/usr/bin/python3
"""Log-mel throughput, single thread: ssae against torchaudio on the same
files in the same run. Prints seconds of audio per CPU second for
  1. the log-mel stage alone (audio already decoded, 16 kHz float32):
     ssae_logmel_compute (timed inside `dsp_tool bench`) vs
     torchaudio MelSpectrogram + 10*log10(x + eps), torch.set_num_threads(1);
  2. file to .npy: `ssae features DIR -o OUTDIR` (child CPU time) vs
     torchaudio.load + the same transform + numpy.save per file.
usage: /usr/bin/python3 tools/bench_features.py --ssae BUILD/ssae \
           --dsp-tool BUILD/tests/dsp/dsp_tool [--repeat N] FILE|DIR...
"""
import argparse
import os
import resource
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
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    files = files_of(a.paths)
    torch.set_num_threads(1)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, f_min=0.0, f_max=None,
        power=2.0, center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")

    def transform(x):
        return 10 * torch.log10(mel(x) + EPS)

    # 1. log-mel stage.
    out = subprocess.run([a.dsp_tool, "bench", str(a.repeat), *files], check=True,
                         capture_output=True, text=True).stdout.split()
    ssae_audio, ssae_cpu = float(out[0]), float(out[1])
    clips = [torchaudio.load(f)[0][0].contiguous() for f in files]
    transform(clips[0])  # warm-up
    t0 = time.process_time()
    audio = 0.0
    with torch.no_grad():
        for _ in range(a.repeat):
            for x in clips:
                transform(x)
                audio += x.shape[0] / 16000
    ta_cpu = time.process_time() - t0
    s1, t1 = ssae_audio / ssae_cpu, audio / ta_cpu
    print(f"files: {len(files)}, {audio / a.repeat:.1f} s of audio, repeat {a.repeat}")
    print(f"log-mel stage   ssae {s1:10.0f} s/CPU-s   torchaudio {t1:8.0f} s/CPU-s"
          f"   ratio {s1 / t1:5.1f}x")

    # 2. file -> .npy.
    with tempfile.TemporaryDirectory() as d:
        c0 = child_cpu()
        for _ in range(a.repeat):
            subprocess.run([a.ssae, "features", *files, "-o", d], check=True,
                           stderr=subprocess.DEVNULL)
        ssae_cpu = child_cpu() - c0
        t0 = time.process_time()
        with torch.no_grad():
            for _ in range(a.repeat):
                for f in files:
                    x = torchaudio.load(f)[0][0]
                    np.save(os.path.join(d, "ta.npy"), transform(x).T.contiguous().numpy())
        ta_cpu = time.process_time() - t0
    s2, t2 = audio / ssae_cpu, audio / ta_cpu
    print(f"file to .npy    ssae {s2:10.0f} s/CPU-s   torchaudio {t2:8.0f} s/CPU-s"
          f"   ratio {s2 / t2:5.1f}x")


if __name__ == "__main__":
    main()
