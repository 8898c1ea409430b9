"""tools/ssae-gen: deterministic from its seed (same seed, same bytes;
another seed, other bytes), the anomaly only inside its labelled span, the
labels file, and a whole train/test set."""
import os
import subprocess
import sys
import tempfile
import wave

from ssae_testlib import check, done

gen = sys.argv[1]


def run(*args):
    p = subprocess.run([gen, *args], capture_output=True, text=True)
    if p.returncode:
        print(p.stderr)
    return p


def samples(path):
    with wave.open(path) as w:
        check(w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2,
              f"{path}: format {w.getframerate()} Hz x{w.getnchannels()} {w.getsampwidth()} bytes")
        raw = w.readframes(w.getnframes())
    return [int.from_bytes(raw[i:i + 2], "little", signed=True) for i in range(0, len(raw), 2)]


with tempfile.TemporaryDirectory() as d:
    p = lambda n: os.path.join(d, n)  # noqa: E731
    for kind in ["none", "clicks", "squeal", "imbalance", "clog"]:
        a, b = p(f"{kind}_a.wav"), p(f"{kind}_b.wav")
        check(run("--seed", "11", "--seconds", "3", "--anomaly", kind, "--at", "1",
                  "--length", "1", "-o", a, "--labels", a + ".tsv").returncode == 0, kind)
        run("--seed", "11", "--seconds", "3", "--anomaly", kind, "--at", "1", "--length", "1",
            "-o", b)
        check(open(a, "rb").read() == open(b, "rb").read(), f"{kind}: same seed, other bytes")
        c = p(f"{kind}_c.wav")
        run("--seed", "12", "--seconds", "3", "--anomaly", kind, "--at", "1", "--length", "1",
            "-o", c)
        check(open(a, "rb").read() != open(c, "rb").read(), f"{kind}: seed ignored")
    base = samples(p("none_a.wav"))
    check(len(base) == 48000, f"length {len(base)}")
    check(max(abs(v) for v in base) > 3000, "normal sound is audible")
    for kind in ["clicks", "squeal", "imbalance", "clog"]:
        x = samples(p(f"{kind}_a.wav"))
        # Before the span the machine sounds exactly as without the fault;
        # inside it clearly differs.
        check(x[:16000] == base[:16000], f"{kind}: differs before its span")
        inside = sum((u - v) ** 2 for u, v in zip(x[17000:31000], base[17000:31000])) / 14000
        power = sum(v * v for v in base[17000:31000]) / 14000
        check(inside > 0.05 * power, f"{kind}: too faint ({inside / power:.3f} of the power)")
        lines = open(p(f"{kind}_a.wav.tsv")).read().splitlines()
        check(lines == ["start\tend\tlabel", f"1.000\t2.000\t{kind}"], f"{kind} labels {lines}")
    check(open(p("none_a.wav.tsv")).read() == "start\tend\tlabel\n", "labels of a normal clip")

    # Bad arguments are usage errors.
    check(run("--anomaly", "rattle", "-o", p("x.wav")).returncode == 2, "unknown anomaly")
    check(run("--seconds", "-1", "-o", p("x.wav")).returncode == 2, "negative length")
    check(run("--seed", "1").returncode == 2, "missing -o")

    s1, s2 = p("set1"), p("set2")
    check(run("--set", s1, "--train", "3", "--test", "4", "--seconds", "1").returncode == 0, "set")
    run("--set", s2, "--train", "3", "--test", "4", "--seconds", "1")
    files = []
    for root, _, names in os.walk(s1):
        files += [os.path.relpath(os.path.join(root, n), s1) for n in names]
    files.sort()
    want = sorted([f"train/normal_{i:04d}.wav" for i in range(3)] +
                  [f"test/normal/normal_{i:04d}.wav" for i in range(4)] +
                  ["test/anomaly/anomaly_0000_clicks.wav", "test/anomaly/anomaly_0001_squeal.wav",
                   "test/anomaly/anomaly_0002_imbalance.wav", "test/anomaly/anomaly_0003_clog.wav",
                   "test/labels.csv", "test/spans.tsv"])
    check(files == want, f"set files {files}")
    for f in files:
        check(open(os.path.join(s1, f), "rb").read() == open(os.path.join(s2, f), "rb").read(),
              f"set not deterministic: {f}")
    csv = open(os.path.join(s1, "test/labels.csv")).read().splitlines()
    check(csv[0] == "path,label" and len(csv) == 9 and csv[1].endswith(",normal")
          and csv[-1] == "anomaly/anomaly_0003_clog.wav,anomaly", f"labels.csv {csv}")
    # Training and test clips are different recordings.
    check(open(os.path.join(s1, "train/normal_0000.wav"), "rb").read() !=
          open(os.path.join(s1, "test/normal/normal_0000.wav"), "rb").read(), "train == test")
    spans = open(os.path.join(s1, "test/spans.tsv")).read().splitlines()[1:]
    for line in spans:
        _, a, b, _ = line.split("\t")
        check(0 <= float(a) < float(b) <= 1.0 and float(b) - float(a) >= 0.55, f"span {line}")

done()
