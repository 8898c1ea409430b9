#!/usr/bin/env python3
"""Writes the fuzz seed corpus (tests/model/fuzz_corpus/): small valid model
files of several shapes and a few near-misses, so that the fuzzer starts
from the interesting parts of the format. Standard library only."""
import json
import math
import os
import random
import struct
import sys

NAMES = ["slice_encoder.0.weight", "slice_encoder.0.bias", "slice_encoder.1.weight",
         "slice_encoder.1.bias", "global_basis", "bottleneck_mlp.0.weight",
         "bottleneck_mlp.0.bias", "bottleneck_mlp.1.weight", "bottleneck_mlp.1.bias",
         "slice_decoder.0.weight", "slice_decoder.0.bias"]


def shapes(m, f, l, s):
    return [[m], [m], [s, m], [s], [l, f * s], [l], [l], [l, l], [l], [m, s], [m]]


def model(m, f, l, s, meta=None, seed=0, tweak=None):
    rnd = random.Random(seed)
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, shp in zip(NAMES, shapes(m, f, l, s)):
        n = math.prod(shp)
        vals = [rnd.uniform(-1, 1) for _ in range(n)]
        raw = struct.pack("<%df" % n, *vals)
        header[name] = {"dtype": "F32", "shape": shp, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if tweak:
        tweak(header)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fuzz_corpus")
    os.makedirs(out, exist_ok=True)
    files = {
        "tiny_1x1x1x1": model(1, 1, 1, 1),
        "small_4x2x3x5": model(4, 2, 3, 5, {"n_mels": "4", "frames": "2", "threshold": "1.5"}),
        "meta_features": model(6, 3, 2, 2, {"sample_rate": "22050", "pad_mode": "constant",
                                            "mel_scale": "htk", "latent_dim": "2",
                                            "note": "caf\u00e9 \"q\"\\n"}),
        "extra_tensor": model(3, 1, 2, 2, {}, tweak=lambda h: h.update(
            {"extra": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})),
        "bad_dtype": model(2, 1, 1, 1, tweak=lambda h: h["global_basis"].update({"dtype": "I32"})),
        "bad_shape": model(2, 1, 1, 2, tweak=lambda h: h["slice_decoder.0.weight"].update({"shape": [2, 2]})),
        "overlap": model(2, 1, 1, 1, tweak=lambda h: h["slice_encoder.0.bias"].update({"data_offsets": [0, 8]})),
        "missing": model(2, 1, 1, 1, tweak=lambda h: h.pop("bottleneck_mlp.1.bias")),
    }
    for name, blob in files.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)
    with open(os.path.join(out, "truncated.safetensors"), "wb") as f:
        f.write(files["small_4x2x3x5"][:-7])
    with open(os.path.join(out, "not_json.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 12) + b'{"a":[1,2,}}')


if __name__ == "__main__":
    main()
