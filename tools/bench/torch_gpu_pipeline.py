#!/usr/bin/env python3
"""The PyTorch GPU pipeline a user would write for `ssae score`'s job:
torchaudio.load per file (tools/ssae_torch.py's WAV reader where
torchaudio needs torchcodec, which is absent), torchaudio's MelSpectrogram
on the GPU, the SPEC
module (tools/ssae_torch.py) on the GPU, file score = mean window score.
Files of one length go to the GPU in batches (--batch files at a time).

    torch_gpu_pipeline.py MODEL.safetensors FILE... [--batch 64]

Prints "path<TAB>score" lines on stdout; on stderr the seconds of the loop
(imports and model loading not counted, CUDA set-up counted) and versions.
"""
import argparse
import os
import sys
import time

import torch
import torchaudio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ssae_torch as st  # noqa: E402


def loader():
    """torchaudio.load's first channel where it can read files here, else
    the reference's WAV reader (the same scaling)."""
    if st.torchaudio_reads_files():
        return lambda path: torchaudio.load(path)[0][0]
    return lambda path: st.read_wav(path)[0][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device("cuda")
    model, meta = st.load_model(a.model)
    model = model.to(dev)
    f = st.meta_features(meta)
    frames = int(f["frames"])
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=int(f["sample_rate"]), n_fft=int(f["n_fft"]),
        hop_length=int(f["hop_length"]), n_mels=int(f["n_mels"]), f_min=float(f["fmin"]),
        f_max=None, power=float(f["power"]), center=True, pad_mode=f["pad_mode"],
        norm="slaney", mel_scale="slaney").to(dev)
    load = loader()
    t0 = time.perf_counter()
    out = []
    with torch.no_grad():
        for i in range(0, len(a.files), a.batch):
            paths = a.files[i:i + a.batch]
            waves = [load(p) for p in paths]
            groups = {}
            for p, w in zip(paths, waves):
                groups.setdefault(w.shape[0], []).append((p, w))
            for _, items in groups.items():
                x = torch.stack([w for _, w in items]).to(dev, non_blocking=True)
                lm = 10.0 * torch.log10(mel(x) + st.LOG_EPS)        # B x M x T
                lm = lm.transpose(1, 2)                             # B x T x M
                b, t, m = lm.shape
                win = lm.unfold(1, frames, 1).transpose(2, 3).reshape(b, -1, frames * m)
                y = model(win.reshape(-1, frames * m))
                s = ((y - win.reshape(-1, frames * m)) ** 2).mean(dim=1).reshape(b, -1)
                scores = s.mean(dim=1).cpu()
                out.extend((p, float(v)) for (p, _), v in zip(items, scores))
    torch.cuda.synchronize()
    loop = time.perf_counter() - t0
    for p, v in out:
        print(f"{p}\t{v:.9g}")
    print(f"loop {loop:.6f} torch {torch.__version__} torchaudio {torchaudio.__version__}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
