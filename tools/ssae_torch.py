"""PyTorch interop for ssae model files (SPEC sections 1-3).

    from ssae_torch import SpectralShapeAutoencoder, load_model, save_model
    model, meta = load_model("model.safetensors")        # nn.Module + metadata
    save_model(model, "out.safetensors", {"seed": "1"})   # or a state_dict

A model file is a safetensors file: the module's state_dict (F32) plus
string metadata (feature settings, dimensions, threshold, provenance). The
`safetensors` package is used when it is installed; otherwise this module
reads and writes the format itself (Debian 12 has no package for it).

Also the reference pipeline a PyTorch user would write (torchaudio log-mel
features, windows, the module's scores), and a command line:

    python3 ssae_torch.py make-model OUT [--seed N] [--n-mels M] [--frames F]
                                         [--latent-dim L] [--slice-latent-dim S]
    python3 ssae_torch.py score MODEL FILE...   (the PyTorch pipeline)
    python3 ssae_torch.py info MODEL

Works with torch 1.13 (Debian 12) and torch 2.x.
"""
import json
import math
import os
import struct
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

TENSOR_NAMES = [
    "slice_encoder.0.weight", "slice_encoder.0.bias",
    "slice_encoder.1.weight", "slice_encoder.1.bias",
    "global_basis",
    "bottleneck_mlp.0.weight", "bottleneck_mlp.0.bias",
    "bottleneck_mlp.1.weight", "bottleneck_mlp.1.bias",
    "slice_decoder.0.weight", "slice_decoder.0.bias",
]

# SPEC section 1, as metadata text (what ssae writes).
FEATURE_DEFAULTS = {
    "sample_rate": "16000",
    "n_fft": "1024",
    "hop_length": "512",
    "window": "hann",
    "center": "true",
    "pad_mode": "reflect",
    "n_mels": "64",
    "fmin": "0",
    "fmax": "8000",
    "mel_scale": "slaney",
    "mel_norm": "slaney",
    "power": "2",
    "log": "10*log10(mel+2.220446049250313e-16)",
    "frames": "5",
}

LOG_EPS = 2.220446049250313e-16


class SpectralShapeAutoencoder(nn.Module):
    """The SPEC section 2 module, verbatim."""

    def __init__(self, n_mels=64, frames=5, latent_dim=32, slice_latent_dim=64):
        super().__init__()
        self.n_mels, self.frames, self.slice_latent_dim = n_mels, frames, slice_latent_dim
        self.combined_dim = frames * slice_latent_dim
        self.slice_encoder = nn.Sequential(nn.LayerNorm(n_mels), nn.Linear(n_mels, slice_latent_dim), nn.GELU())
        self.global_basis = nn.Parameter(torch.empty(latent_dim, self.combined_dim))
        nn.init.xavier_uniform_(self.global_basis)
        self.bottleneck_mlp = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, latent_dim), nn.GELU())
        self.slice_decoder = nn.Sequential(nn.Linear(slice_latent_dim, n_mels))

    def forward(self, x):
        s = self.slice_encoder(x.view(-1, self.frames, self.n_mels)).reshape(-1, self.combined_dim)
        nb = F.normalize(self.global_basis, p=2, dim=1)
        z = self.bottleneck_mlp(s @ nb.T)
        r = (z @ nb).view(-1, self.frames, self.slice_latent_dim)
        return self.slice_decoder(r).reshape(-1, self.frames * self.n_mels)


# --- safetensors without the package --------------------------------------

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _have_safetensors():
    try:
        import safetensors.torch  # noqa: F401
        return True
    except ImportError:
        return False


def read_safetensors(path):
    """Returns ({name: tensor}, {metadata}) of a safetensors file."""
    if _have_safetensors():
        from safetensors import safe_open
        out = {}
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            for k in f.keys():
                out[k] = f.get_tensor(k)
        return out, dict(meta)
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError("%s: header length %d runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
        b, e = info["data_offsets"]
        shape = info["shape"]
        if e > len(data) or b > e:
            raise ValueError("%s: tensor %s has offsets outside the data" % (path, name))
        buf = bytearray(data[b:e])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape).clone()
    return out, dict(meta)


def write_safetensors(tensors, path, metadata=None):
    """Writes {name: tensor} and string metadata to path (atomically)."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=d)
    os.close(fd)
    try:
        if _have_safetensors():
            from safetensors.torch import save_file
            save_file(tensors, tmp, metadata=metadata)
        else:
            header = {}
            if metadata:
                header["__metadata__"] = metadata
            chunks, off = [], 0
            for name, t in tensors.items():
                if t.dtype not in _NAMES:
                    raise ValueError("tensor %s: unsupported dtype %s" % (name, t.dtype))
                raw = _tensor_bytes(t)
                header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                                "data_offsets": [off, off + len(raw)]}
                chunks.append(raw)
                off += len(raw)
            h = json.dumps(header, separators=(",", ":")).encode("utf-8")
            h += b" " * ((8 - len(h) % 8) % 8)
            with open(tmp, "wb") as f:
                f.write(struct.pack("<Q", len(h)))
                f.write(h)
                for c in chunks:
                    f.write(c)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _tensor_bytes(t):
    if sys.byteorder != "little":
        raise ValueError("writing safetensors needs a little-endian machine")
    if t.numel() == 0:
        return b""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.reshape(-1).numpy().tobytes()


# --- model files -----------------------------------------------------------

def dims_from_state(state):
    """(n_mels, frames, latent_dim, slice_latent_dim) from tensor shapes."""
    s, m = state["slice_encoder.1.weight"].shape
    l, c = state["global_basis"].shape
    if c % s:
        raise ValueError("global_basis has %d columns, not a multiple of %d" % (c, s))
    return int(m), int(c // s), int(l), int(s)


def load_model(path, dtype=torch.float32):
    """Builds the SPEC module from an ssae model file.

    Returns (module in eval mode, metadata dict). dtype=torch.float64 gives
    the float64 oracle."""
    tensors, meta = read_safetensors(path)
    missing = [n for n in TENSOR_NAMES if n not in tensors]
    if missing:
        raise ValueError("%s: missing tensors %s" % (path, ", ".join(missing)))
    state = {n: tensors[n] for n in TENSOR_NAMES}
    m, f, l, s = dims_from_state(state)
    model = SpectralShapeAutoencoder(n_mels=m, frames=f, latent_dim=l, slice_latent_dim=s)
    model.load_state_dict(state)
    return model.to(dtype).eval(), meta


def full_metadata(dims, metadata=None):
    """The metadata ssae expects: feature defaults, dimensions, then the
    caller's entries (which win)."""
    m, f, l, s = dims
    meta = dict(FEATURE_DEFAULTS)
    meta.update({"n_mels": str(m), "frames": str(f), "latent_dim": str(l),
                 "slice_latent_dim": str(s)})
    for k, v in (metadata or {}).items():
        meta[str(k)] = str(v)
    if "sample_rate" in (metadata or {}) and "fmax" not in metadata:
        meta["fmax"] = "%g" % (int(meta["sample_rate"]) / 2)
    return meta


def save_model(model_or_state, path, metadata=None):
    """Writes an ssae model file from a module or its state_dict (F32)."""
    state = model_or_state.state_dict() if isinstance(model_or_state, nn.Module) else model_or_state
    missing = [n for n in TENSOR_NAMES if n not in state]
    if missing:
        raise ValueError("state_dict lacks %s" % ", ".join(missing))
    out = {n: state[n].detach().to(torch.float32).contiguous() for n in TENSOR_NAMES}
    write_safetensors(out, path, full_metadata(dims_from_state(out), metadata))


def make_model(n_mels=64, frames=5, latent_dim=32, slice_latent_dim=64, seed=0):
    """A model with PyTorch's default initialisation from a seed."""
    torch.manual_seed(seed)
    return SpectralShapeAutoencoder(n_mels, frames, latent_dim, slice_latent_dim)


# --- the reference pipeline -------------------------------------------------

def meta_features(meta):
    """Feature settings from metadata (defaults for what is missing)."""
    f = dict(FEATURE_DEFAULTS)
    f.update({k: v for k, v in meta.items() if k in FEATURE_DEFAULTS})
    return f


def logmel(wave, meta=None):
    """Log-mel frames (T x n_mels) of a 1-D tensor, SPEC section 1."""
    import torchaudio
    f = meta_features(meta or {})
    sr = int(f["sample_rate"])
    fmax = float(f["fmax"])
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=sr, n_fft=int(f["n_fft"]), hop_length=int(f["hop_length"]),
        n_mels=int(f["n_mels"]), f_min=float(f["fmin"]),
        f_max=None if fmax <= 0 else fmax, power=float(f["power"]),
        center=f["center"] in ("true", "True", "1"), pad_mode=f["pad_mode"],
        norm="slaney" if f["mel_norm"] == "slaney" else None,
        mel_scale=f["mel_scale"]).to(wave.dtype)
    return (10.0 * torch.log10(mel(wave) + LOG_EPS)).T.contiguous()


def windows(frames, n_frames_per_window):
    """(T - F + 1) x (F * n_mels) windows, frame-major (SPEC section 1)."""
    t, m = frames.shape
    n = t - n_frames_per_window + 1
    if n <= 0:
        return frames.new_zeros((0, n_frames_per_window * m))
    return frames.unfold(0, n_frames_per_window, 1).transpose(1, 2).reshape(n, -1)


def window_scores(model, x):
    with torch.no_grad():
        y = model(x.to(next(model.parameters()).dtype))
    return ((y - x.to(y.dtype)) ** 2).mean(dim=1)


def torchaudio_reads_files():
    """False where torchaudio.load cannot read a file: torchaudio >= 2.9
    decodes only through torchcodec, which may not be installed."""
    import importlib.util
    return not (importlib.util.find_spec("torchaudio._torchcodec") is not None and
                importlib.util.find_spec("torchcodec") is None)


def read_wav(path):
    """(channels x samples float32 tensor, sample rate) of a WAV file of
    integer PCM (8 to 32 bits) or float samples, scaled as torchaudio.load
    scales them (integers by 2^(bits-1), 8-bit unsigned about 128): the
    reader where torchaudio cannot read files (torchaudio_reads_files)."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("%s: not a RIFF WAVE file" % path)
    pos, fmt, pcm = 12, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if cid == b"fmt " and len(body) >= 16:
            tag, ch, rate, _, align, bits = struct.unpack("<HHIIHH", body[:16])
            if tag == 0xFFFE and len(body) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the subformat's tag
                tag = struct.unpack("<H", body[24:26])[0]
            fmt = (tag, ch, rate, align, bits)
        elif cid == b"data":
            pcm = body
        pos += 8 + size + (size & 1)
    if fmt is None or pcm is None:
        raise ValueError("%s: no fmt or data chunk" % path)
    tag, ch, rate, align, bits = fmt
    if ch < 1 or align != ch * ((bits + 7) // 8):
        raise ValueError("%s: %d channels of %d bits in frames of %d bytes" % (path, ch, bits, align))
    pcm = pcm[:len(pcm) // align * align]
    if tag == 3 and bits in (32, 64):
        x = np.frombuffer(pcm, dtype="<f%d" % (bits // 8)).astype(np.float32)
    elif tag == 1 and bits == 8:
        x = (np.frombuffer(pcm, dtype=np.uint8).astype(np.float32) - 128) / 128
    elif tag == 1 and bits in (16, 32):
        x = (np.frombuffer(pcm, dtype="<i%d" % (bits // 8)).astype(np.float64) /
             2.0 ** (bits - 1)).astype(np.float32)
    elif tag == 1 and bits == 24:
        b = np.frombuffer(pcm, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / 2.0 ** 23).astype(np.float32)
    else:
        raise ValueError("%s: format tag %d with %d bits: not read here" % (path, tag, bits))
    return torch.from_numpy(np.ascontiguousarray(x.reshape(-1, ch).T)), rate


def load_audio(path, channel=0, sample_rate=16000):
    """Samples of one channel ('mix' for the mean) at sample_rate:
    torchaudio.load, or read_wav where torchaudio cannot read files."""
    import torchaudio
    wave, sr = torchaudio.load(path) if torchaudio_reads_files() else read_wav(path)
    wave = wave.mean(dim=0) if channel == "mix" else wave[int(channel)]
    if sr != sample_rate:
        wave = torchaudio.functional.resample(wave, sr, sample_rate)
    return wave


def score_file(model, meta, path, channel=0):
    """(file score, window scores) the way a PyTorch user computes them."""
    f = meta_features(meta)
    wave = load_audio(path, channel, int(f["sample_rate"]))
    x = windows(logmel(wave, meta), int(f["frames"]))
    s = window_scores(model, x)
    return float(s.mean()) if len(s) else float("nan"), s


def _main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="ssae_torch.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-model", help="write a randomly initialised model file")
    mk.add_argument("out")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--n-mels", type=int, default=64)
    mk.add_argument("--frames", type=int, default=5)
    mk.add_argument("--latent-dim", type=int, default=32)
    mk.add_argument("--slice-latent-dim", type=int, default=64)
    mk.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    sc = sub.add_parser("score", help="score files with the PyTorch pipeline")
    sc.add_argument("model")
    sc.add_argument("files", nargs="+")
    sc.add_argument("--channel", default="0")
    inf = sub.add_parser("info", help="print a model file's dimensions and metadata")
    inf.add_argument("model")
    a = ap.parse_args(argv)
    if a.cmd == "make-model":
        model = make_model(a.n_mels, a.frames, a.latent_dim, a.slice_latent_dim, a.seed)
        meta = {"provenance": "random initialisation (tools/ssae_torch.py make-model)",
                "seed": str(a.seed), "threshold_method": "none"}
        if a.n_mels != 64:
            meta["n_mels"] = str(a.n_mels)
        for kv in a.meta:
            k, _, v = kv.partition("=")
            meta[k] = v
        save_model(model, a.out, meta)
    elif a.cmd == "score":
        model, meta = load_model(a.model)
        for p in a.files:
            s, w = score_file(model, meta, p, a.channel)
            print("%s\t%.9g\t%d" % (p, s, len(w)))
    elif a.cmd == "info":
        model, meta = load_model(a.model)
        print("dims", dims_from_state(model.state_dict()))
        for k, v in sorted(meta.items()):
            print("%s\t%s" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
