"""Nothing lost, nothing silent (issue 18), seen from the command line:

- stdout that cannot be written (/dev/full) is reported once and makes the
  exit status 1 (score, info, eval, report, train, monitor's events);
- files (--windows, --scores, pictures) go through the atomic writer: on a
  full disk (a small tmpfs when the test may mount one, else /dev/full) the
  message names the file and the reason and the previous file is untouched;
- train: SIGTERM during training writes a valid model marked interrupted
  (exit 0); Ctrl-C, again and SIGTERM during the save (the test hook
  SSAE_TEST_PAUSE_AT=save) wait for the save: a complete model, no
  temporary file; Ctrl-C while the features are computed: no model, exit
  130; data with no spread give threshold "none" with a reason;
- score: Ctrl-C finishes the current lines, says how many files were done,
  exits 130, the --windows file ends with a whole line;
- a cut data chunk is a warning naming the file, --strict makes it an
  error (score, eval, report, train, features);
- eval --csv with a bad line (a bad label, an empty path) is refused before any work (exit 2, the line
  named); --plot with a bad name is refused before any work (exit 2);
- --format json stays valid JSON for a file name that is not UTF-8;
- info on a FIFO does not block; monitor --channel N reports channel N;
  NaN input through the monitor is counted (status event "nonfinite"),
  status events carry "xruns"; --threshold 0 is refused alike by eval,
  report, monitor; score --channel's error does not offer 'all'; a
  300-byte jack --name is refused before connecting (exit 2); --gpu of
  monitor and jack (alone and as a service) names a GPU of this host and
  not with --backend cpu, refused before any work otherwise (exit 2), and
  a config's engine.gpu that is not a device index is refused naming it.
Standard library only."""
import glob
import json
import math
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile

from ssae_testlib import start_paused
import time
import wave

SSAE = os.environ["SSAE"]
failures = []


def check(ok, what):
    print(f"{'ok' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def wav(path, rate, samples, float32=False, channels=1, cut=0):
    """A WAV file; cut: bytes the data chunk's header claims beyond the file."""
    if float32:
        data = b"".join(struct.pack("<f", s) for s in samples)
        fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * 4 * channels, 4 * channels, 32)
    else:
        data = b"".join(struct.pack("<h", max(-32768, min(32767, int(32767 * s))))
                        for s in samples)
        fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + \
        struct.pack("<I", len(data) + cut) + data
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body) + cut) + body)


def tone(i, n=32000):
    return [0.3 * math.sin(0.05 * (i + 1) * k) + 0.01 * math.sin(1.3 * k * k) for k in range(n)]


def run(args, stdout=subprocess.PIPE, env=None, timeout=300):
    return subprocess.run([SSAE, *args], stdout=stdout, stderr=subprocess.PIPE,
                          timeout=timeout, env=env)


def err(p):
    return p.stderr.decode(errors="replace")


_cairo = []


def has_cairo():
    """Whether this ssae draws pictures (report, eval --plot): a build
    without cairo (the GPU hosts' here) refuses them before any work."""
    if not _cairo:
        p = run(["report", "--backend", "cpu", "-o", os.path.join(tempfile.gettempdir(),
                 "ssae-cairo-probe.png"), "/nonexistent/ssae-cairo-probe.wav"])
        _cairo.append("built without cairo" not in err(p))
    return _cairo[0]


def try_tmpfs(d, size="64k"):
    """A small tmpfs at d (root only); True when mounted."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d],
                       capture_output=True)
    return r.returncode == 0


def umount(d):
    subprocess.run(["umount", d], capture_output=True)


def fill(d):
    """Fills the file system of d; returns the filler's path."""
    p = os.path.join(d, "filler")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    os.close(fd)
    return p


def test_stdout(d, good, model):
    # A short run with stderr not a terminal prints no progress line (only
    # runs longer than 10 s do)
    p = run(["score", "--backend", "cpu", *good])
    check(p.returncode == 0 and "files/s" not in err(p),
          f"score, stderr not a terminal: exit {p.returncode}, stderr {err(p)!r}")
    for args in (["score", "-q", "--backend", "cpu", *good], ["info"],
                 ["eval", "--backend", "cpu", "--normal", good[0], "--anomaly", good[1]],
                 ["train", "-q", "--backend", "cpu", "--epochs", "1", "-o",
                  os.path.join(d, "full.safetensors"), *good]):
        with open("/dev/full", "w") as full:
            p = run(args, stdout=full)
        e = err(p)
        check(p.returncode == 1 and "stdout: write failed: No space left" in e
              and e.count("stdout:") == 1,
              f"{args[0]} > /dev/full: exit {p.returncode}, stderr {e[-300:]!r}")
    if has_cairo():
        with open("/dev/full", "w") as full:
            p = run(["report", "--backend", "cpu", good[0], "-o", os.path.join(d, "r.png")],
                    stdout=full)
        check(p.returncode == 1 and "stdout: write failed" in err(p),
              f"report > /dev/full: exit {p.returncode}")
    # The monitor's events on stdout (not a terminal): it keeps monitoring,
    # counts the lost lines, reports once, exits 1.
    with open("/dev/full", "w") as full:
        p = run(["monitor", "--backend", "cpu", "--input", good[0], "--status", "0.5"],
                stdout=full)
    e = err(p)
    check(p.returncode == 1 and "write failed" in e and "event line(s) lost" in e
          and "0 event line(s) lost" not in e and "s of audio" in e,
          f"monitor events > /dev/full: exit {p.returncode}, stderr {e[-400:]!r}")
    # The summary's count is the final one (the closing message's), the
    # last status line included
    said = re.search(r"(\d+) event line\(s\) lost", e)
    closing = re.findall(r"\((\d+) event lines? lost\)", e)
    check(said and closing and said.group(1) == closing[-1],
          f"monitor: summary's lost lines {said and said.group(1)}, closing {closing}")
    # A file too short for one window: named, exit 1 (as ssae score)
    short = os.path.join(d, "short-monitor.wav")
    with wave.open(short, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x01\x00" * 2047)
    p = run(["monitor", "--backend", "cpu", "--input", short])
    check(p.returncode == 1 and f"{short}: too short: no window" in err(p),
          f"monitor on a too-short file: exit {p.returncode}, {err(p)[-300:]!r}")
    # A windows TSV that cannot be written is named as such, not as events
    p = run(["monitor", "--backend", "cpu", "--input", good[0], "--windows", "/dev/full"])
    check(p.returncode == 1 and "windows TSV" in err(p)
          and "lost event lines are counted" not in err(p),
          f"monitor --windows /dev/full: exit {p.returncode}, {err(p)[-300:]!r}")


def test_files(d, good):
    # Non-regular targets are written in place, with every write checked.
    p = run(["score", "-q", "--backend", "cpu", "--windows", "/dev/full", good[0]])
    check(p.returncode == 1 and "/dev/full" in err(p) and "No space left" in err(p),
          f"score --windows /dev/full: exit {p.returncode}, {err(p)[-200:]!r}")
    p = run(["eval", "--backend", "cpu", "--scores", "/dev/full", "--normal", good[0],
             "--anomaly", good[1]])
    check(p.returncode == 1 and "/dev/full" in err(p) and "No space left" in err(p),
          f"eval --scores /dev/full: exit {p.returncode}")
    # A shard's part is renamed onto its path at the end: a path that is
    # not a regular file (here a FIFO; /dev/null as root was replaced by a
    # file) is refused and left as it is.
    fifo = os.path.join(d, "part-fifo")
    os.mkfifo(fifo)
    for extra in ([], ["--windows", fifo]):
        out = fifo if not extra else os.path.join(d, "part-ok.tsv")
        p = run(["score", "-q", "--backend", "cpu", "--shard", "0/1", "-o", out, *extra,
                 good[0]])
        check(p.returncode != 0 and f"{fifo}: not a regular file" in err(p)
              and stat.S_ISFIFO(os.stat(fifo).st_mode)
              and not os.path.exists(fifo + ".partial"),
              f"score --shard onto a FIFO {extra}: exit {p.returncode}, {err(p)[-200:]!r}")
    mnt = os.path.join(d, "small")
    if not try_tmpfs(mnt):
        print("skip: no tmpfs (not root, or mount refused): the full-disk cases")
        return
    try:
        targets = []
        for name, args in (
                ("w.tsv", ["score", "-q", "--backend", "cpu", "--windows", None, *good]),
                ("s.tsv", ["eval", "--backend", "cpu", "--scores", None, "--normal", good[0],
                           "--anomaly", good[1]]),
                ("f.npy", ["features", good[0], "-o", None]),
                ("r.png", ["report", "--backend", "cpu", good[0], "-o", None]),
                ("r.svg", ["report", "--backend", "cpu", good[0], "-o", None]),
                ("p.png", ["eval", "--backend", "cpu", "--plot", None, "--normal", good[0],
                           "--anomaly", good[1]])):
            if name[:2] in ("r.", "p.") and not has_cairo():
                continue
            t = os.path.join(mnt, name)
            with open(t, "wb") as f:
                f.write(b"previous good file\n")
            targets.append((name, [t if a is None else a for a in args], t))
        filler = fill(mnt)
        for name, args, t in targets:
            p = run(args)
            with open(t, "rb") as f:
                kept = f.read() == b"previous good file\n"
            left = [f for f in os.listdir(mnt) if f not in ("filler",) and
                    f not in [n for n, _, _ in targets]]
            check(p.returncode == 1 and t in err(p) and "No space left" in err(p) and kept
                  and not left,
                  f"{name} on a full disk: exit {p.returncode}, previous kept {kept}, "
                  f"left {left}, {err(p)[-200:]!r}")
        os.unlink(filler)
        # A read-only file system: refused with the reason, nothing written.
        r = subprocess.run(["mount", "-o", "remount,ro", mnt], capture_output=True)
        if r.returncode == 0:
            t = os.path.join(mnt, "w.tsv")
            p = run(["score", "-q", "--backend", "cpu", "--windows", t, good[0]])
            check(p.returncode == 1 and "Read-only" in err(p),
                  f"--windows on a read-only file system: exit {p.returncode} {err(p)!r}")
    finally:
        umount(mnt)


def read_meta(model):
    with open(model, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def test_train_signals(d, good):
    # SIGTERM during training, after the first epoch.
    model = os.path.join(d, "term.safetensors")
    p = subprocess.Popen([SSAE, "train", "--backend", "cpu", "--epochs", "1000000",
                          "--patience", "0", "-o", model, *good],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = ""
    for line in p.stderr:
        got += line
        if line.startswith("epoch 2/"):
            break
    p.send_signal(signal.SIGTERM)
    out, rest = p.communicate(timeout=120)
    meta = read_meta(model) if os.path.exists(model) else {}
    check(p.returncode == 0 and meta.get("interrupted", "").startswith("epoch ")
          and "(interrupted)" in out,
          f"train SIGTERM in training: exit {p.returncode}, metadata {meta.get('interrupted')}, "
          f"stdout {out!r}")
    check(run(["info", model]).returncode == 0, "the interrupted model loads")
    # Ctrl-C, a second Ctrl-C and SIGTERM during the save.
    model = os.path.join(d, "save.safetensors")
    p, paused = start_paused([SSAE, "train", "--backend", "cpu", "--epochs", "2", "-o", model,
                              *good], "save")
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGTERM)
    out, rest = p.communicate(timeout=120)
    tmp = glob.glob(model + ".*")
    check(paused and p.returncode == 0 and os.path.exists(model) and not tmp
          and run(["info", model]).returncode == 0,
          f"train Ctrl-C x2 + SIGTERM at the save: exit {p.returncode}, paused {paused}, "
          f"temporaries {tmp}, stderr {rest!r}")


def test_train_features_interrupt(d, good):
    """Ctrl-C before training (while the features are computed): no model,
    no temporary, exit 130."""
    model = os.path.join(d, "feat.safetensors")
    p, _ = start_paused([SSAE, "train", "--backend", "cpu", "--epochs", "2", "-o", model,
                         *good], "features")
    p.send_signal(signal.SIGINT)
    _, e = p.communicate(timeout=60)
    check(p.returncode == 130 and "no model written" in e and not glob.glob(model + "*"),
          f"train Ctrl-C while computing features: exit {p.returncode}, {e!r}")


def test_score_interrupt(d):
    many = os.path.join(d, "many")
    os.makedirs(many)
    for i in range(120):
        wav(os.path.join(many, f"f{i:03d}.wav"), 16000, tone(i % 7, 48000))
    wt = os.path.join(d, "win.tsv")
    # Unbuffered bytes: a buffered readline may take more than the first
    # line from the pipe, and communicate() reads the pipe itself (what the
    # buffer took would be lost from the count).
    p = subprocess.Popen([SSAE, "score", "--backend", "cpu", "--jobs", "1", "--windows", wt,
                          many], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = p.stdout.readline()
    p.send_signal(signal.SIGINT)
    out, e = p.communicate(timeout=120)
    e = e.decode(errors="replace")
    lines = (first + out).decode(errors="replace").splitlines()
    with open(wt, "rb") as f:
        w = f.read()
    whole = w.endswith(b"\n") and all(len(x.split(b"\t")) == 4 for x in w.splitlines())
    files_in_w = {x.split(b"\t")[0] for x in w.splitlines()[1:]}
    check(p.returncode == 130 and "interrupted:" in e and f"of 120 files done" in e
          and 0 < len(lines) < 120 and whole and len(files_in_w) == len(lines),
          f"score Ctrl-C: exit {p.returncode}, {len(lines)} lines, windows whole {whole}, "
          f"files in windows {len(files_in_w)}, stderr {e[-200:]!r}")


def test_cut_and_strict(d, good):
    cut = os.path.join(d, "cut.wav")
    wav(cut, 16000, tone(3), cut=20000)
    p = run(["score", "--backend", "cpu", cut])
    check(p.returncode == 0 and cut in err(p) and "warning" in err(p),
          f"score on a cut file: warning naming it, exit 0 ({p.returncode}, {err(p)!r})")
    cairo = has_cairo()
    for args in (["score", "--backend", "cpu", cut],
                 ["eval", "--backend", "cpu", "--normal", good[0], "--anomaly", cut],
                 ["features", cut, "-o", os.path.join(d, "cut.npy")],
                 ["train", "-q", "--backend", "cpu", "--epochs", "1", "-o",
                  os.path.join(d, "cut.safetensors"), good[0], good[1], cut]) + \
            ((["report", "--backend", "cpu", cut, "-o", os.path.join(d, "cut.png")],)
             if cairo else ()):
        p = run([args[0], "--strict", *args[1:]])
        check(p.returncode == 1 and cut in err(p),
              f"{args[0]} --strict on a cut file: exit {p.returncode} {err(p)[-200:]!r}")
    check(not os.path.exists(os.path.join(d, "cut.npy")), "features --strict wrote nothing")


def test_eval_csv(d, good):
    csv = os.path.join(d, "list.csv")
    rows = ["path,label", f"{good[0]},normal", f"{good[1]},0", f"{good[2]},anomaly",
            "x.wav,banana", f"{good[0]},1", f"{good[1]},anomaly", f"{good[2]},normal",
            f"{good[0]},anomaly"]
    with open(csv, "w") as f:
        f.write("\n".join(rows) + "\n")
    t0 = time.time()
    p = run(["eval", "--backend", "cpu", "--csv", csv])
    check(p.returncode == 2 and f"{csv}:5" in err(p) and "banana" in err(p) and not p.stdout
          and "scor" not in err(p),
          f"eval --csv with a bad line 5: exit {p.returncode}, {err(p)!r}")
    # An empty path, and a first line that names a file with a bad label (not
    # a header): refused the same way.
    for rows, line, what in (([f"{good[0]},normal", ",anomaly", f"{good[1]},1"], 2,
                              "no path before the label"),
                             ([f"{good[0]},ok", f"{good[1]},anomaly"], 1, "label 'ok'")):
        with open(csv, "w") as f:
            f.write("\n".join(rows) + "\n")
        p = run(["eval", "--backend", "cpu", "--csv", csv])
        check(p.returncode == 2 and f"{csv}:{line}: " in err(p) and what in err(p)
              and not p.stdout, f"eval --csv, {what}: exit {p.returncode}, {err(p)!r}")
    # A file that fails is skipped and not counted as scored.
    bad = os.path.join(d, "missing.wav")
    with open(csv, "w") as f:
        f.write(f"{good[0]},normal\n{good[1]},normal\n{bad},anomaly\n{good[2]},anomaly\n")
    p = run(["eval", "--backend", "cpu", "--csv", csv])
    e = err(p)
    check(p.returncode == 1 and "3 scored, 1 skipped" in e and "scored 4/4" not in e,
          f"eval progress with a skipped file: {e!r}")
    p = run(["eval", "--backend", "cpu", "--plot", os.path.join(d, "p.gif"), "--normal",
             good[0], "--anomaly", good[1]])
    check(p.returncode == 2 and ".png" in err(p) and not p.stdout and time.time() - t0 < 60,
          f"eval --plot p.gif refused before work: exit {p.returncode}")


def test_small(d, good):
    # Invalid UTF-8 in a file name: valid JSON.
    bd = os.path.join(d.encode(), b"caf\xe9-\xff.wav")
    shutil.copy(good[0].encode(), bd)
    p = subprocess.run([SSAE.encode(), b"score", b"--backend", b"cpu", b"--format", b"json",
                        bd], capture_output=True, timeout=120)
    try:
        obj = json.loads(p.stdout.decode("utf-8"))
        ok = "\ufffd" in obj["path"] and obj["windows"] > 0
    except (ValueError, UnicodeDecodeError, KeyError) as ex:
        ok = False
        print("json error:", ex, p.stdout)
    check(p.returncode == 0 and ok, "score --format json with a non-UTF-8 name is valid JSON")
    os.unlink(bd)
    # info on a FIFO returns at once.
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    try:
        p = run(["info", fifo], timeout=20)
        check(p.returncode == 1 and "not a regular file" in err(p), "info FIFO refused")
    except subprocess.TimeoutExpired:
        check(False, "info FIFO blocked")
    # --model FIFO: every command that loads a model refuses it at once
    # (the loader opens without waiting for a writer).
    for args in (["score", "--model", fifo, good[0]],
                 ["monitor", "--model", fifo, "--input", good[0]]) + \
            ((["report", "--model", fifo, good[0], "-o", os.path.join(d, "f.png")],)
             if has_cairo() else ()):
        try:
            p = run(args, timeout=20)
            check(p.returncode == 1 and "not a regular file" in err(p),
                  f"{args[0]} --model FIFO: exit {p.returncode} {err(p)!r}")
        except subprocess.TimeoutExpired:
            check(False, f"{args[0]} --model FIFO blocked")
    # --threshold 0: refused alike.
    for args in (["eval", "--normal", good[0], "--anomaly", good[1]],
                 ["report", good[0], "-o", os.path.join(d, "t.png")],
                 ["monitor", "--input", good[0]]):
        p = run([args[0], "--threshold", "0", *args[1:]])
        check(p.returncode == 2 and "--threshold" in err(p),
              f"{args[0]} --threshold 0: exit {p.returncode}")
    p = run(["score", "--channel", "x", good[0]])
    check(p.returncode == 2 and "'all'" not in err(p) and "mix" in err(p),
          f"score --channel x: {err(p)!r}")
    # --device names a GPU of this host: refused before any work otherwise
    # (never a job gone on on another device).
    p = run(["score", "--backend", "cpu", "--device", "1", good[0]])
    check(p.returncode == 2 and "--backend cpu" in err(p) and not p.stdout,
          f"score --backend cpu --device 1: {p.returncode} {err(p)!r}")
    for cmd in (["score", "--backend", "cuda", "--device", "200", good[0]],
                ["train", "-o", os.path.join(d, "dev.safetensors"), "--device", "200", good[0]],
                ["eval", "--device", "200", "--normal", good[0], "--anomaly", good[1]],
                ["report", "--device", "200", good[0], "-o", os.path.join(d, "dev.png")],
                ["bench", "--device", "200", "--batches", "1", "--seconds", "0.01"]):
        p = run(cmd)
        # (a build without CUDA refuses --backend cuda first, also a usage error)
        check(p.returncode == 2 and ("--device" in err(p) and ("this host has" in err(p) or
                                                               "no CUDA" in err(p))
                                     or "--backend cuda: this ssae was built without CUDA"
                                     in err(p))
              and not p.stdout, f"{cmd[0]} --device 200: {p.returncode} {err(p)!r}")
    p = run(["train", "-o", os.path.join(d, "dev.safetensors"), "--backend", "cpu", "--device",
             "1", good[0]])
    check(p.returncode == 2 and "--backend cpu" in err(p),
          f"train --backend cpu --device 1: {p.returncode} {err(p)!r}")
    for cmd in (["eval", "--backend", "cpu", "--device", "1", "--normal", good[0], "--anomaly",
                 good[1]],
                ["report", "--backend", "cpu", "--device", "1", good[0], "-o",
                 os.path.join(d, "dev.png")],
                ["bench", "--backend", "cpu", "--device", "1"]):
        p = run(cmd)
        check(p.returncode == 2 and "--backend cpu" in err(p) and not p.stdout,
              f"{cmd[0]} --backend cpu --device 1: {p.returncode} {err(p)!r}")
    check(not os.path.exists(os.path.join(d, "dev.safetensors")), "refused train wrote nothing")
    check(not os.path.exists(os.path.join(d, "dev.png")), "refused report wrote nothing")
    # --gpu: the live engine's GPU, the same refusals before any work, by
    # monitor and jack alone and as a service (a config and --gpu over it).
    svc = os.path.join(d, "svc.yaml")
    with open(svc, "w") as f:
        f.write("machines:\n  - name: m\n")
    for cmd in (["monitor", "--input", good[0]], ["jack"],
                ["monitor", "--config", svc, "--input", good[0]], ["jack", "--config", svc]):
        what = " ".join(cmd[:2] if "--config" in cmd else cmd[:1])
        p = run([cmd[0], "--gpu", "200", *cmd[1:]])
        check(p.returncode == 2 and "--gpu 200" in err(p) and ("this host has" in err(p) or
                                                                "no CUDA" in err(p))
              and not p.stdout, f"{what} --gpu 200: {p.returncode} {err(p)!r}")
        p = run([cmd[0], "--backend", "cpu", "--gpu", "1", *cmd[1:]])
        check(p.returncode == 2 and "--backend cpu" in err(p) and not p.stdout,
              f"{what} --backend cpu --gpu 1: {p.returncode} {err(p)!r}")
    p = run(["monitor", "--gpu", "-1", "--input", good[0]])
    check(p.returncode == 2 and "--gpu" in err(p),
          f"monitor --gpu -1: {p.returncode} {err(p)!r}")
    for value, why in (("-1", "0..255"), ("x", "not an integer")):
        with open(svc, "w") as f:
            f.write(f"engine:\n  gpu: {value}\nmachines:\n  - name: m\n")
        p = run(["monitor", "--config", svc, "--input", good[0]])
        check(p.returncode == 1 and ("engine.gpu" in err(p) and why in err(p) or
                                     "without the plant service" in err(p)) and not p.stdout,
              f"monitor --config with gpu: {value}: {p.returncode} {err(p)!r}")
    p = run(["jack", "--name", "n" * 300])
    check(p.returncode == 2 and "--name" in err(p) and "no server" not in err(p)
          or "without JACK" in err(p), f"jack --name of 300 bytes: {p.returncode} {err(p)!r}")
    for cmd in (["monitor", "--input", good[0]], ["jack"]):
        p = run(cmd + ["--events", ""])
        check(p.returncode == 2 and "--events: an empty path" in err(p),
              f"{cmd[0]} --events '': {p.returncode} {err(p)!r}")
    p = run(["monitor", "--config", d, "--input", good[0]])
    check(p.returncode == 1 and f"{d}: cannot read: Is a directory" in err(p) or
          "without the plant service" in err(p), f"--config DIR: {p.returncode} {err(p)!r}")
    # --status 0 is "no status events" alone; a service's state comes at the
    # status cadence, so there it is refused as engine.status_every: 0 is.
    with open(svc, "w") as f:
        f.write("machines:\n  - name: m\n")
    for value in ("0", "7200"):
        p = run(["monitor", "--config", svc, "--status", value, "--input", good[0]])
        check(p.returncode == 2 and f"--status {value}" in err(p) and "(0, 3600]" in err(p)
              and not p.stdout or "without the plant service" in err(p),
              f"monitor --config --status {value}: {p.returncode} {err(p)!r}")
    p = run(["monitor", "--status", "0", "--input", good[0]])
    check(p.returncode == 0, f"monitor --status 0 alone: {p.returncode} {err(p)!r}")
    p = run(["jack", "--name", "plant:line1"])
    check(p.returncode == 2 and "cannot contain ':'" in err(p) and "no server" not in err(p)
          or "without JACK" in err(p), f"jack --name with a colon: {p.returncode} {err(p)!r}")
    # --backend cuda in a build without CUDA: a usage error, as --gpu N is.
    p = run(["score", "--backend", "cuda", good[0]])
    check(p.returncode == 2 and "built without CUDA" in err(p) or
          p.returncode in (0, 1) and "built without CUDA" not in err(p),
          f"score --backend cuda: {p.returncode} {err(p)!r}")
    # monitor --channel 1 of a two-channel file: events say channel 1.
    st = os.path.join(d, "stereo.wav")
    t = tone(2)
    inter = [v for k in range(len(t)) for v in (0.0, t[k])]
    wav(st, 16000, inter, channels=2)
    ev = os.path.join(d, "ev.jsonl")
    p = run(["monitor", "--backend", "cpu", "--input", st, "--channel", "1", "--threshold",
             "1e-9", "--events", ev, "--status", "0.5"])
    evs = [json.loads(x) for x in open(ev)] if os.path.exists(ev) else []
    chans = {e["channel"] for e in evs if e["event"].startswith("alarm")}
    status = [e for e in evs if e["event"] == "status"]
    check(p.returncode == 0 and chans == {1} and status and "xruns" in status[-1]
          and "nonfinite" in status[-1],
          f"monitor --channel 1: alarm channels {chans}, status {status[-1:]}")
    # NaN samples through the monitor: silence, counted.
    nan = os.path.join(d, "nan.wav")
    s = tone(1)
    for k in range(16000, 16100):
        s[k] = float("nan")
    wav(nan, 16000, s, float32=True)
    p = run(["monitor", "--backend", "cpu", "--input", nan, "--events", ev])
    evs = [json.loads(x) for x in open(ev)]
    status = [e for e in evs if e["event"] == "status"]
    check(p.returncode == 0 and status and status[-1]["nonfinite"] == 100
          and "100 non-finite" in err(p),
          f"monitor NaN input: exit {p.returncode}, status {status[-1:]}, {err(p)[-300:]!r}")
    # --realtime that falls behind (the process stopped for 1.2 s) says so.
    p = subprocess.Popen([SSAE, "monitor", "--backend", "cpu", "--input", good[0],
                          "--realtime", "--no-meter"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)
    p.send_signal(signal.SIGSTOP)
    time.sleep(1.2)
    p.send_signal(signal.SIGCONT)
    _, e = p.communicate(timeout=60)
    most = [float(x.split("at most ")[1].split(" s")[0]) for x in e.splitlines()
            if "behind real time" in x and "at most" in x]
    check(p.returncode == 0 and "warning:" in e and "s behind real time at" in e and most
          and most[0] >= 1.0,
          f"monitor --realtime that falls behind says by how much: {e[-400:]!r}")


def test_no_spread(d):
    zd = os.path.join(d, "zeros")
    os.makedirs(zd)
    for i in range(3):
        wav(os.path.join(zd, f"z{i}.wav"), 16000, [0.0] * 16000)
    model = os.path.join(d, "zero.safetensors")
    p = run(["train", "-q", "--backend", "cpu", "--epochs", "2", "-o", model, zd])
    meta = read_meta(model) if os.path.exists(model) else {}
    check(p.returncode == 0 and meta.get("threshold") == "none" and "no threshold" in err(p),
          f"train on all-zero files: exit {p.returncode}, threshold {meta.get('threshold')}, "
          f"{err(p)!r}")


def main():
    d = tempfile.mkdtemp(prefix="ssae_nothing_lost_")
    try:
        good = [os.path.join(d, f"good{i}.wav") for i in range(3)]
        for i, g in enumerate(good):
            wav(g, 16000, tone(i))
        test_stdout(d, good, None)
        test_files(d, good)
        test_train_signals(d, good)
        test_train_features_interrupt(d, good)
        test_score_interrupt(d)
        test_cut_and_strict(d, good)
        test_eval_csv(d, good)
        test_small(d, good)
        test_no_spread(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s):\n" + "\n".join(failures))
        sys.exit(1)


main()
