"""The PyTorch reference's WAV reader (tools/ssae_torch.py read_wav, used
where torchaudio.load cannot read files: torchaudio >= 2.9 without
torchcodec) against torchaudio.load where it can, else against the
standard library's wave module: 8-, 16- and 24-bit PCM, one and two
channels, the extensible header, an odd-sized chunk before the data; a
file that is not a WAV refused by name. Exit 77 without torch."""
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)
sys.path.insert(0, os.path.join(os.environ.get("SSAE_SOURCE_ROOT", "."), "tools"))
import ssae_torch as st  # noqa: E402

fails = []


def write(path, x, bits, ch, extensible=False, junk=b""):
    if bits == 8:
        raw = x.astype(np.uint8).tobytes()
    elif bits == 24:
        v = x.astype(np.int64).reshape(-1) & 0xFFFFFF
        raw = np.stack([v & 255, (v >> 8) & 255, v >> 16], 1).astype(np.uint8).tobytes()
    else:
        raw = x.astype("<i%d" % (bits // 8)).tobytes()
    align = ch * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else 1, ch, 16000, 16000 * align, align,
                      bits)
    if extensible:  # cbSize, valid bits, channel mask, KSDATAFORMAT_SUBTYPE_PCM
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", 1) + \
            bytes.fromhex("000000001000800000aa00389b71")
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if junk:
        chunks += b"LIST" + struct.pack("<I", len(junk)) + junk + b"\0" * (len(junk) & 1)
    chunks += b"data" + struct.pack("<I", len(raw)) + raw
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks)


d = tempfile.mkdtemp()
rng = np.random.RandomState(0)
with_torchaudio = False
try:
    import torchaudio
    with_torchaudio = st.torchaudio_reads_files()
except ImportError:
    pass
print("oracle: %s" % ("torchaudio.load" if with_torchaudio else "the wave module (16-bit)"))
ranges = {8: (0, 256), 16: (-32768, 32768), 24: (-(1 << 23), 1 << 23)}
for bits in (8, 16, 24):
    for ch in (1, 2):
        for ext in (False, True):
            lo, hi = ranges[bits]
            x = rng.randint(lo, hi, (777, ch))
            p = os.path.join(d, "b%d_c%d_e%d.wav" % (bits, ch, ext))
            write(p, x, bits, ch, ext, junk=b"odd" if ch == 2 else b"")
            got, rate = st.read_wav(p)
            if bits == 8:
                want = torch.from_numpy(((x - 128) / 128).T.astype(np.float32))
            else:
                want = torch.from_numpy((x / 2.0 ** (bits - 1)).T.astype(np.float32))
            if with_torchaudio and not ext:
                want, _ = torchaudio.load(p)
            if rate != 16000 or got.shape != (ch, 777) or not torch.equal(got, want):
                fails.append("%d-bit, %d channels, extensible %s" % (bits, ch, ext))
            if bits == 16 and not with_torchaudio and not ext:
                import wave
                with wave.open(p) as w:
                    ref = np.frombuffer(w.readframes(777), "<i2").reshape(-1, ch).T / 32768.0
                if not torch.equal(got, torch.from_numpy(ref.astype(np.float32))):
                    fails.append("16-bit against wave, %d channels" % ch)
bad = os.path.join(d, "bad.wav")
with open(bad, "wb") as f:
    f.write(b"OggS" + bytes(40))
try:
    st.read_wav(bad)
    fails.append("a non-WAV file was read")
except ValueError as e:
    if "bad.wav" not in str(e):
        fails.append("the refusal does not name the file: %s" % e)
if fails:
    print("FAIL:\n  " + "\n  ".join(fails))
    sys.exit(1)
print("ok")
