"""The CPU forward pass against the SPEC's PyTorch module run in float64.

SPEC section 2: ||y - y_ref|| / ||y_ref|| <= 1e-6 and window-score relative
error <= 1e-5, on real-scale log-mel inputs (-100 ... +20 dB), for random
weights at several scales, non-default dimensions, and trained weights.

usage: test_parity.py MODEL_FORWARD_EXE   (exits 77 without torch)
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torchaudio  # noqa: F401
except ImportError:
    sys.exit(77)

import ssae_torch as st

REL_L2_MAX = 1e-6
SCORE_REL_MAX = 1e-5


def logmel_inputs(n_mels, frames, seed):
    """Windows of real log-mel frames: noise, tones, silence and clicks."""
    g = torch.Generator().manual_seed(seed)
    sr = 16000
    t = torch.arange(sr * 2, dtype=torch.float64) / sr
    sig = 0.05 * torch.randn(t.shape, generator=g, dtype=torch.float64)
    sig += 0.3 * torch.sin(2 * torch.pi * 440 * t) + 0.1 * torch.sin(2 * torch.pi * 3100 * t)
    sig[sr // 2: sr // 2 + 4000] = 0.0          # digital silence: -156 dB frames
    sig[sr: sr + 2000] *= 1e-3                  # quiet stretch
    sig[3 * sr // 2] = 0.99                     # click
    meta = {"n_mels": str(n_mels)}
    lm = st.logmel(sig.to(torch.float32), meta)
    return st.windows(lm, frames).to(torch.float32)


def synthetic_inputs(n, n_mels, frames, seed, noise=15.0):
    """Spectral shapes across -100 ... +20 dB with noise."""
    g = torch.Generator().manual_seed(seed)
    band = torch.linspace(0, 1, n_mels, dtype=torch.float64)
    base = -20 - 70 * band + 8 * torch.sin(12 * band)
    x = base + noise * torch.randn(n, frames, n_mels, generator=g, dtype=torch.float64)
    return x.clamp(-100, 20).reshape(n, -1).to(torch.float32)


def scaled_model(dims, seed, scale):
    m = st.make_model(*dims, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name == "global_basis":
                continue
            if name.endswith("0.weight") and p.dim() == 1:       # LayerNorm gains
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1 and name.startswith(("slice_encoder.0", "bottleneck_mlp.0")):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.mul_(scale)
    return m


def trained_model(dims, x, seed, steps=150):
    """A briefly trained model: reconstructions close to the input, so that
    scores are small differences of large numbers (x and y near -50 dB,
    (y - x)^2 near 1)."""
    torch.manual_seed(seed)
    m = st.SpectralShapeAutoencoder(*dims).double()
    xd = x.double()
    with torch.no_grad():   # warm start: the decoder bias at the mean spectrum
        m.slice_decoder[0].bias.copy_(xd.view(-1, dims[1], dims[0]).mean(dim=(0, 1)))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((m(xd) - xd) ** 2).mean()
        loss.backward()
        opt.step()
    return m.float(), float(loss)


def check(exe, tmp, name, model, x, threads=0, isas=("",)):
    path = os.path.join(tmp, name + ".safetensors")
    st.save_model(model, path, {"provenance": "test_parity " + name})
    ref_model, _ = st.load_model(path, dtype=torch.float64)
    with torch.no_grad():
        xd = x.double()
        y_ref = ref_model(xd)
        s_ref = ((y_ref - xd) ** 2).mean(dim=1)
    xin = os.path.join(tmp, name + ".in")
    with open(xin, "wb") as f:
        f.write(x.contiguous().numpy().tobytes())
    so, ro = os.path.join(tmp, name + ".s"), os.path.join(tmp, name + ".r")
    ok = True
    for isa in isas:
        # SSAE_CPU_KERNELS caps the instruction set of the CPU kernels.
        env = dict(os.environ, SSAE_CPU_KERNELS=isa)
        subprocess.run([exe, path, xin, so, ro, str(threads)], check=True, env=env)
        with open(so, "rb") as f:
            s = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).double()
        with open(ro, "rb") as f:
            y = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).double().reshape(y_ref.shape)
        rel = float((y - y_ref).norm() / y_ref.norm())
        srel = float(((s - s_ref).abs() / s_ref.abs()).max())
        good = rel <= REL_L2_MAX and srel <= SCORE_REL_MAX
        ok &= good
        print("%-36s windows %5d  rel L2 %.3e  max score rel err %.3e  mean score %.4g  %s"
              % (name + (" [%s]" % isa if isa else ""), len(x), rel, srel, float(s_ref.mean()),
                 "ok" if good else "FAIL"))
    return ok


def main():
    exe = sys.argv[1]
    # One thread: on a loaded machine more only oversubscribe the cores.
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        d = (64, 5, 32, 64)
        x = torch.cat([logmel_inputs(64, 5, 1), synthetic_inputs(300, 64, 5, 2)])
        for scale in (0.1, 1.0, 4.0, 20.0):
            ok &= check(exe, tmp, "random scale %g" % scale, scaled_model(d, 10, scale), x)
        ok &= check(exe, tmp, "random 1 thread", scaled_model(d, 11, 1.0), x, threads=1)
        d2 = (128, 3, 16, 48)
        x2 = torch.cat([logmel_inputs(128, 3, 3), synthetic_inputs(200, 128, 3, 4)])
        for scale in (0.5, 5.0):
            ok &= check(exe, tmp, "128 mels 3 fr 16 lat x%g" % scale, scaled_model(d2, 12, scale), x2)
        d3 = (40, 7, 13, 21)   # nothing a multiple of the tile sizes
        x3 = synthetic_inputs(101, 40, 7, 5)
        ok &= check(exe, tmp, "40 mels 7 fr 13 lat 21 sl", scaled_model(d3, 13, 1.0), x3,
                    isas=("", "avx2", "generic"))
        xt = synthetic_inputs(256, 64, 5, 6, noise=1.0)
        tm, loss = trained_model(d, xt, 14)
        print("trained model: final loss %.4g" % loss)
        ok &= check(exe, tmp, "trained", tm, torch.cat([xt, synthetic_inputs(64, 64, 5, 7, noise=1.0)]),
                    isas=("", "avx2", "generic"))
        ok &= check(exe, tmp, "trained, real log-mel input", tm, logmel_inputs(64, 5, 7))
        # The model that ships (trained weights once there are some).
        root = os.environ.get("SSAE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
        dm, _ = st.load_model(os.path.join(root, "src", "model", "default.safetensors"))
        if (dm.n_mels, dm.frames) == (64, 5):
            ok &= check(exe, tmp, "default model", dm, torch.cat([logmel_inputs(64, 5, 8), x]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
