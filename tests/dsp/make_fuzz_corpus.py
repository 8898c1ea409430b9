#!/usr/bin/env python3
"""Writes the seed corpus of the audio-path fuzz target (fuzz_audio_load.c)
into tests/dsp/fuzz_corpus: small valid files of the formats the reader
takes (WAV PCM 8/16 bit and float, WAVE_FORMAT_EXTENSIBLE, AIFF, FLAC) and
broken ones that each hit a check (1 Hz, 402 MHz, 999 Hz and 768 kHz rates,
a cut data chunk, NaN samples, a 52-byte FLAC claiming ~1.07e9 frames, a
FLAC of long constant blocks, not audio at all). Every file is under 4 KiB
(the fuzz run's -max_len). Standard library only; the output is the same
on every run.

    python3 tests/dsp/make_fuzz_corpus.py [OUTDIR]
"""
import math
import os
import struct
import sys


def wav(rate, channels, frames, bits=16, fmt=1, data_claim=None, extensible=False,
        samples=None):
    """A RIFF/WAVE file; samples: a flat list (interleaved) of floats in [-1, 1)."""
    if samples is None:
        samples = [0.5 * math.sin(0.05 * i * (1 + i % channels)) for i in range(frames * channels)]
    if fmt == 3:
        data = b"".join(struct.pack("<f", s) for s in samples)
    elif bits == 8:
        data = bytes((int(128 + 127 * s) & 0xFF) for s in samples)
    else:
        data = b"".join(struct.pack("<h", int(32767 * s)) for s in samples)
    block = channels * bits // 8
    if extensible:
        guid = struct.pack("<H", fmt) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        mask = (1 << channels) - 1
        fmt_chunk = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits,
                                22, bits, mask) + guid
    else:
        fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * block, block, bits)
    claim = len(data) if data_claim is None else data_claim
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + b"data" +
            struct.pack("<I", claim) + data)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def ext80(x):
    """IEEE 754 80-bit extended, as AIFF stores the sample rate."""
    e = int(math.floor(math.log2(x)))
    m = int(x * 2 ** (63 - e))
    return struct.pack(">HQ", 16383 + e, m)


def aiff(rate, frames):
    data = b"".join(struct.pack(">h", int(12000 * math.sin(0.07 * i))) for i in range(frames))
    comm = struct.pack(">hIh", 1, frames, 16) + ext80(rate)
    ssnd = struct.pack(">II", 0, 0) + data
    body = b"AIFF" + b"COMM" + struct.pack(">I", len(comm)) + comm + b"SSND" + \
        struct.pack(">I", len(ssnd)) + ssnd
    return b"FORM" + struct.pack(">I", len(body)) + body


def crc8(b):
    c = 0
    for x in b:
        c ^= x
        for _ in range(8):
            c = ((c << 1) ^ 0x07) & 0xFF if c & 0x80 else (c << 1) & 0xFF
    return c


def crc16(b):
    c = 0
    for x in b:
        c ^= x << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x8005) & 0xFFFF if c & 0x8000 else (c << 1) & 0xFFFF
    return c


def streaminfo(rate, channels, bits, total, block):
    v = rate << 44 | (channels - 1) << 41 | (bits - 1) << 36 | total
    return struct.pack(">HH", block, block) + b"\x00" * 6 + struct.pack(">Q", v) + b"\x00" * 16


def flac_frame(n, block, subframe):
    """A fixed-block-size mono 16-bit frame (n < 128) with one subframe."""
    head = bytes([0xFF, 0xF8, 0x70, 0x08, n]) + struct.pack(">H", block - 1)
    head += bytes([crc8(head)])
    frame = head + subframe
    return frame + struct.pack(">H", crc16(frame))


def flac(rate, frames_list, block, total=None):
    """frames_list: one subframe (bytes) per frame."""
    if total is None:
        total = block * len(frames_list)
    out = b"fLaC" + bytes([0x80, 0, 0, 34]) + streaminfo(rate, 1, 16, total, block)
    for n, sub in enumerate(frames_list):
        out += flac_frame(n, block, sub)
    return out


def verbatim(block, phase):
    return b"\x02" + b"".join(struct.pack(">h", int(9000 * math.sin(0.1 * i + phase)))
                              for i in range(block))


def constant(value):
    return b"\x00" + struct.pack(">h", value)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                               "fuzz_corpus")
    os.makedirs(out, exist_ok=True)
    nan_samples = [0.1 * math.sin(0.2 * i) for i in range(400)]
    nan_samples[123] = float("nan")
    inf_samples = [0.0] * 400
    inf_samples[7] = float("-inf")
    files = {
        "wav_pcm16_mono_16k.wav": wav(16000, 1, 1500),
        "wav_pcm8_stereo_8k.wav": wav(8000, 2, 1500, bits=8),
        "wav_float_44k.wav": wav(44100, 1, 800, bits=32, fmt=3),
        "wavex_4ch_48k.wav": wav(48000, 4, 400, extensible=True),
        "wav_rate_768k.wav": wav(768000, 1, 1500),
        "wav_rate_1k.wav": wav(1000, 1, 1500),
        "wav_rate_999.wav": wav(999, 1, 1500),
        "wav_rate_1hz.wav": wav(1, 1, 1500),
        "wav_rate_402mhz.wav": wav(402000000, 1, 1500),
        "wav_cut_data.wav": wav(16000, 1, 1500, data_claim=4 * 3000),
        "wav_float_nan.wav": wav(16000, 1, 400, bits=32, fmt=3, samples=nan_samples),
        "wav_float_neg_inf.wav": wav(16000, 1, 400, bits=32, fmt=3, samples=inf_samples),
        "aiff_16_22k.aiff": aiff(22050, 1500),
        "flac_16k_verbatim.flac": flac(16000, [verbatim(576, 0), verbatim(576, 1)], 576),
        "flac_huge_count.flac": flac(16000, [], 4096, total=(1 << 30) - 1) + b"\xa5" * 10,
        "flac_cut.flac": flac(16000, [verbatim(576, 0)], 576, total=576 * 5),
        "flac_constant_long.flac": flac(44100, [constant(100 * n) for n in range(40)], 65535),
        "not_audio.txt": b"this is not an audio file\n" * 4,
    }
    for name, data in sorted(files.items()):
        assert len(data) <= 4096, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
