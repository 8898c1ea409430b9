"""The CUDA backend against the PyTorch module of SPEC section 2 run in float64.

Fresh random weights (LayerNorm parameters away from ones/zeros) and
log-mel-scale inputs each run; batch sizes 1 ... 1048576; default and other
dimensions. The model goes through a safetensors file written here, so the
file loader is on the path too. Exits 77 without torch or without a GPU
(the helper test_cuda_forward says so).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("torch not available: skipped")
    sys.exit(77)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from ssae_torch import SpectralShapeAutoencoder  # noqa: E402  (the SPEC module, one copy)

def save_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def helper():
    root = os.environ.get("SSAE_BUILD_ROOT", "build")
    return os.path.join(root, "tests", "gpu", "test_cuda_forward")


def trained_model_case(tmp, dev):
    """SPEC section 2 also asks for trained weights: the shipped model on the
    log-mel windows of generated machine sound, at its level and 60 dB
    quieter (trained models reconstruct closely, so window scores are small
    differences and float32 rounding weighs more than with random weights)."""
    import numpy as np
    from ssae_torch import load_model, windows
    src = os.environ.get("SSAE_SOURCE_ROOT", ".")
    build = os.environ.get("SSAE_BUILD_ROOT", "build")
    mpath = os.path.join(src, "src", "model", "default.safetensors")
    ref, _ = load_model(mpath, dtype=torch.float64)
    ref = ref.to(dev)
    failures = 0
    for anomaly, gain in (("none", 1.0), ("clicks", 1.0), ("squeal", 0.001)):
        wav = os.path.join(tmp, f"g-{anomaly}.wav")
        subprocess.run([os.path.join(build, "tools", "ssae-gen"), "--seed", "5",
                        "--seconds", "20", "--anomaly", anomaly, "-o", wav], check=True)
        npy = os.path.join(tmp, f"g-{anomaly}.npy")
        subprocess.run([os.environ.get("SSAE", os.path.join(build, "ssae")), "features",
                        "--model", mpath, wav, "-o", npy], check=True)
        frames = torch.from_numpy(np.load(npy)).double() + 20 * np.log10(gain)
        x = windows(frames, 5).float().contiguous()
        n = x.shape[0]
        xin, sout, rout = (os.path.join(tmp, p) for p in ("x.f32", "s.f32", "r.f32"))
        x.numpy().tofile(xin)
        p = subprocess.run([helper(), "--apply", mpath, xin, str(n), sout, rout],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL trained model, {anomaly}: helper: {p.stdout}{p.stderr}")
            failures += 1
            continue
        kern = p.stdout.strip().splitlines()[-1]
        s = torch.from_numpy(np.fromfile(sout, dtype="float32"))
        r = torch.from_numpy(np.fromfile(rout, dtype="float32")).view(n, -1)
        with torch.no_grad():
            xd = x.double().to(dev)
            y = ref(xd)
            sref = ((y - xd) ** 2).mean(dim=1).cpu()
            y = y.cpu()
        rel = ((r.double() - y).norm() / y.norm()).item()
        srel = ((s.double() - sref).abs() / sref.abs()).max().item()
        ok = rel <= 1e-6 and srel <= 1e-5
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} trained model, ssae-gen {anomaly} x{gain:g} "
              f"({float(x.min()):.0f} ... {float(x.max()):.0f} dB) n={n:<6} {kern:<16} "
              f"relL2={rel:.2e} score-rel={srel:.2e}")
    return failures


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    print(f"seed {seed}, float64 reference on {dev}")
    cases = [((64, 5, 32, 64), [1, 7, 33, 4097, 100000, 1048576]),
             ((40, 3, 16, 24), [1, 7, 33, 4097, 100000]),
             ((64, 7, 32, 64), [33, 4097])]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (M, Fr, L, S), sizes in cases:
            net = SpectralShapeAutoencoder(M, Fr, L, S)
            with torch.no_grad():
                for ln in (net.slice_encoder[0], net.bottleneck_mlp[0]):
                    ln.weight.uniform_(0.5, 1.5)
                    ln.bias.uniform_(-0.2, 0.2)
            sd = {k: v.detach().float() for k, v in net.state_dict().items()}
            meta = {"n_mels": str(M), "frames": str(Fr), "latent_dim": str(L),
                    "slice_latent_dim": str(S)}
            mpath = os.path.join(tmp, "m.safetensors")
            save_safetensors(mpath, sd, meta)
            ref = SpectralShapeAutoencoder(M, Fr, L, S).double().to(dev)
            ref.load_state_dict({k: v.double() for k, v in sd.items()})
            for n in sizes:
                level = torch.rand(n, 1) * 80 - 100
                x = (level + torch.rand(n, Fr * M) * 40 - 20).float()
                xin, sout, rout = (os.path.join(tmp, p) for p in ("x.f32", "s.f32", "r.f32"))
                x.numpy().tofile(xin)
                p = subprocess.run([helper(), "--apply", mpath, xin, str(n), sout, rout],
                                   capture_output=True, text=True)
                if p.returncode == 77:
                    print("no CUDA device: skipped")
                    return 77
                if p.returncode != 0:
                    print(f"FAIL dims {M},{Fr},{L},{S} n={n}: helper: {p.stdout}{p.stderr}")
                    failures += 1
                    continue
                kern = p.stdout.strip().splitlines()[-1]
                s = torch.from_numpy(__import__("numpy").fromfile(sout, dtype="float32"))
                r = torch.from_numpy(__import__("numpy").fromfile(rout, dtype="float32")).view(n, -1)
                with torch.no_grad():
                    xd = x.double().to(dev)
                    y = ref(xd)
                    sref = ((y - xd) ** 2).mean(dim=1).cpu()
                    y = y.cpu()
                if not (torch.isfinite(s).all() and torch.isfinite(r).all()):
                    print(f"FAIL dims {M},{Fr},{L},{S} n={n}: outputs not written")
                    failures += 1
                    continue
                rel = ((r.double() - y).norm() / y.norm()).item()
                srel = ((s.double() - sref).abs() / sref.abs()).max().item()
                ok = rel <= 1e-6 and srel <= 1e-5
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} dims {M},{Fr},{L},{S} n={n:<8} {kern:<16} "
                      f"relL2={rel:.2e} score-rel={srel:.2e}")
        failures += trained_model_case(tmp, dev)
    print("all passed" if not failures else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
