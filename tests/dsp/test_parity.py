"""Log-mel parity with torchaudio (SPEC section 1).

The oracle is torchaudio.transforms.MelSpectrogram configured as the SPEC
says, then 10*log10(x + 2.220446049250313e-16), computed in float64 (the
filterbank too: torch's default dtype is set to float64 before it is built).
float64 because torchaudio's own float32 pipeline is off from its float64
result by about 0.001 dB on a full-scale square wave: float rounding inside
the FFT leaves a floor ~140 dB under the peak, which shows on bins 80-90 dB
down. ssae computes the FFT, power and mel sums in double and must be within
0.001 dB on every bin within 90 dB of its frame's peak.

16 kHz signals go through ssae's log-mel directly (tests/dsp/dsp_tool).
48 kHz signals are written as 16-bit WAV files and go through `ssae
features` (libsoxr resampling to 16 kHz); the oracle gets the very samples
ssae resampled (dsp_tool load), so the check is on the features, not on
two different resamplers.
"""
import os
import subprocess
import sys
import tempfile
import wave

try:
    import numpy as np
    import torch
    from ssae_logmel_oracle import RANGE_DB, compare, failures, oracle, signals
except ImportError as e:  # the oracle is missing: skip, never pass
    print(f"skip: {e}")
    sys.exit(77)

DSP_TOOL = sys.argv[1]
SSAE = os.environ["SSAE"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")


def write_wav16(path, x, sr):
    pcm = np.clip(np.round(np.asarray(x) * 32768), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())


with tempfile.TemporaryDirectory() as tmp:
    inp, out = os.path.join(tmp, "in.npy"), os.path.join(tmp, "out.npy")
    # 16 kHz straight into the front end.
    for name, x in signals(16000).items():
        x = x.astype(np.float32)
        np.save(inp, x)
        for pad in ("reflect", "constant"):
            run([DSP_TOOL, "logmel", inp, out, f"pad_mode={pad}"])
            ours = np.load(out)
            compare(f"16k {name} {pad}", ours, oracle(x, pad))
            if name == "square":
                # torchaudio's float32 pipeline, for the record (not the oracle).
                r64 = oracle(x, pad)
                mask = r64 >= r64.max(axis=1, keepdims=True) - RANGE_DB
                d = np.abs(oracle(x, pad, torch.float32) - r64)[mask].max()
                print(f"   (torchaudio float32 vs float64 on this signal: {d:.2e} dB)")

    # Short streams: the start and end padding overlap (torchaudio refuses
    # reflect padding of a signal not longer than n_fft/2).
    rng = np.random.default_rng(5)
    for n, pads in ((100, ("constant",)), (513, ("reflect", "constant")),
                    (700, ("reflect", "constant")), (1500, ("reflect", "constant"))):
        x = (0.3 * rng.standard_normal(n)).astype(np.float32)
        np.save(inp, x)
        for pad in pads:
            run([DSP_TOOL, "logmel", inp, out, f"pad_mode={pad}"])
            compare(f"16k noise {n} samples {pad}", np.load(out), oracle(x, pad))

    # The other scale and norm, and a size that is not a power of two
    # (kiss_fftr in float: 0.01 dB on signals without deep spectral gaps).
    x = signals(16000)["chirp"].astype(np.float32)
    np.save(inp, x)
    run([DSP_TOOL, "logmel", inp, out, "mel_scale=htk", "mel_norm=none", "n_mels=40",
         "fmin=50", "fmax=7000"])
    compare("16k chirp htk/none 40 mels 50-7000 Hz", np.load(out),
            oracle(x, "reflect", mel_scale="htk", norm=None, n_mels=40, f_min=50.0,
                   f_max=7000.0))
    for name in ("white", "tone+noise"):
        x = signals(16000)[name].astype(np.float32)
        np.save(inp, x)
        run([DSP_TOOL, "logmel", inp, out, "n_fft=400", "hop_length=160"])
        compare(f"16k {name} n_fft 400 hop 160 (kiss_fftr)", np.load(out),
                oracle(x, "reflect", n_fft=400, hop_length=160), tol=0.01)

    # 48 kHz files through `ssae features` (resampled by ssae).
    for name, x in signals(48000, seed=2).items():
        wav = os.path.join(tmp, "in48.wav")
        write_wav16(wav, x, 48000)
        run([DSP_TOOL, "load", wav, inp, "16000", "0"])
        y = np.load(inp)[0]
        if y.shape[0] != 4 * 16000:
            failures.append(f"48k {name}: resampled to {y.shape[0]} samples, not 64000")
        for pad in ("reflect", "constant"):
            run([SSAE, "features", "--pad-mode", pad, wav, "-o", out])
            compare(f"48k->16k {name} {pad}", np.load(out), oracle(y, pad))

    # Bands narrower than an FFT bin (all-zero filters, which torchaudio
    # warns of): `ssae features` names as many as torchaudio has, and the
    # most bands that have none.
    import re
    import warnings
    import torchaudio.functional as AF
    wav = os.path.join(tmp, "in16.wav")
    write_wav16(wav, signals(16000)["chirp"], 16000)

    def zero_filters(n_mels, n_fft):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fb = AF.melscale_fbanks(n_fft // 2 + 1, 0.0, 8000.0, n_mels, 16000, norm="slaney",
                                    mel_scale="slaney")
        return int((fb.sum(0) == 0).sum())

    for n_mels, n_fft in ((2000, 1024), (386, 1024), (385, 1024), (64, 1024), (200, 256)):
        p = subprocess.run([SSAE, "features", "--n-mels", str(n_mels), "--n-fft", str(n_fft),
                            "--hop", str(n_fft // 2), wav, "-o", out],
                           capture_output=True, text=True)
        want = zero_filters(n_mels, n_fft)
        said = re.search(r"warning: (\d+) of the (\d+) mel bands .* with (\d+) bands or fewer",
                         p.stderr)
        got = int(said.group(1)) if said else 0
        if p.returncode != 0 or got != want:
            failures.append(f"{n_mels} mels, n_fft {n_fft}: ssae says {got} empty band(s), "
                            f"torchaudio has {want}; rc {p.returncode}: {p.stderr!r}")
        elif said:
            most = int(said.group(3))
            if zero_filters(most, n_fft) or not zero_filters(most + 1, n_fft):
                failures.append(f"{n_mels} mels, n_fft {n_fft}: {most} is not the most bands "
                                f"without an empty one")
            print(f"ok  {n_mels} mels, n_fft {n_fft}: {got} empty bands as torchaudio; "
                  f"{most} is the most without one")

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all parity checks passed")
