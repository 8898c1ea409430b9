"""GPU log-mel parity with torchaudio in float64 (SPEC section 1), as
tests/dsp/test_parity.py checks the CPU front end: the GPU front end's
frames (gpu/ssae_cuda_frontend.h, fed in random block sizes by
`test_cuda_frontend --logmel`) within 0.001 dB of
torchaudio.transforms.MelSpectrogram + 10*log10(x + eps) computed in
float64, on every bin within 90 dB of its frame's peak; on the dsp parity
signals (white, pink, chirp, tones and noise, silence, a full-scale square
wave), short streams, the HTK scale without norm, and n_fft 400 (a plain
DFT in double on the GPU: the same 0.001 dB, where the CPU's float
kiss_fftr is held to 0.01). Exits 77 without torch or a CUDA device.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from ssae_logmel_oracle import compare, failures, oracle, signals
except ImportError as e:  # the oracle is missing: skip, never pass
    print(f"skip: {e}")
    sys.exit(77)

TOOL = sys.argv[1]
if subprocess.run([TOOL, "--probe"]).returncode != 0:
    print("skip: no CUDA device")
    sys.exit(77)


def gpu_logmel(tmp, x, *keys):
    inp, out = os.path.join(tmp, "in.npy"), os.path.join(tmp, "out.npy")
    np.save(inp, np.asarray(x, dtype=np.float32))
    p = subprocess.run([TOOL, "--logmel", inp, out, *keys], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"test_cuda_frontend --logmel failed ({p.returncode}): {p.stderr}")
    return np.load(out)


with tempfile.TemporaryDirectory() as tmp:
    for name, x in signals(16000).items():
        for pad in ("reflect", "constant"):
            compare(f"GPU 16k {name} {pad}", gpu_logmel(tmp, x, f"pad_mode={pad}"),
                    oracle(x, pad))
    rng = np.random.default_rng(5)
    for n, pads in ((100, ("constant",)), (513, ("reflect", "constant")),
                    (700, ("reflect", "constant")), (1500, ("reflect", "constant"))):
        x = (0.3 * rng.standard_normal(n)).astype(np.float32)
        for pad in pads:
            compare(f"GPU 16k noise {n} samples {pad}", gpu_logmel(tmp, x, f"pad_mode={pad}"),
                    oracle(x, pad))
    x = signals(16000)["chirp"]
    compare("GPU 16k chirp htk/none 40 mels 50-7000 Hz",
            gpu_logmel(tmp, x, "mel_scale=htk", "mel_norm=none", "n_mels=40", "fmin=50",
                       "fmax=7000"),
            oracle(x, "reflect", mel_scale="htk", norm=None, n_mels=40, f_min=50.0,
                   f_max=7000.0))
    for name in ("white", "tone+noise", "square"):
        x = signals(16000)[name]
        compare(f"GPU 16k {name} n_fft 400 hop 160 (DFT in double)",
                gpu_logmel(tmp, x, "n_fft=400", "hop_length=160"),
                oracle(x, "reflect", n_fft=400, hop_length=160))

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all GPU parity checks passed")
