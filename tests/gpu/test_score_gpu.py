"""`ssae score --backend cuda` on the GPU front end (gpu/ssae_score_gpu.h)
against `--backend cpu`: the same lines, errors and --windows file.

Files: 300 short clips (more than one run's slots: slots are reused), long
ones (several runs per file), a 48 kHz one (resampled), a file too short
for a window and one that is not audio, in one call; and 40 clips of 6 s
at 16 and at 48 kHz, whose length sets the runs' shape (each read whole in
one run).

- Everywhere: the pipeline on the front end's CPU path (the test hook
  SSAE_SCORE_GPU_ON_CPU=1): output identical to --backend cpu, byte for
  byte (the same frame and model code); Ctrl-C part way: the files started
  finished, in order, none after them, exit 130.
- With a CUDA device: the real GPU path: the same files, windows and
  verdicts, scores within 1e-5 relative (SPEC section 2); and the
  SSAE_CUDA_FAIL_AFTER hook (the front end moves to the CPU part way):
  every file still scored; with two GPUs, --device 1 on the front end and
  on the backend path (--strict) gives the same scores (with one, it is
  refused naming the count), and eval, report and bench run there.
"""
import os
import signal
import subprocess
import sys
import tempfile

from ssae_testlib import start_paused

ssae = os.environ.get("SSAE")
build = os.environ.get("SSAE_BUILD_ROOT")
if not ssae or not build:
    print("SSAE / SSAE_BUILD_ROOT not set: skipped")
    sys.exit(77)
gen = os.path.join(build, "tools", "ssae-gen")
if not os.path.exists(gen):
    print("ssae-gen not built: skipped")
    sys.exit(77)

fails = 0


def fail(msg):
    global fails
    print("FAIL:", msg)
    fails += 1


def score(d, backend, env_extra, wfile):
    env = dict(os.environ)
    env.update(env_extra)
    p = subprocess.run([ssae, "score", "-q", "--backend", backend, "--windows", wfile, d],
                       capture_output=True, text=True, env=env)
    with open(wfile) as f:
        windows = f.read()
    return p.returncode, p.stdout, p.stderr, windows


def errors(stderr):
    return sorted(l for l in stderr.splitlines() if "files failed" in l or ".wav" in l)


def compare_scores(what, ref, got, tol, col):
    """Lines of tab-separated fields: all equal but column col, a score
    within tol relative."""
    a, b = ref.splitlines(), got.splitlines()
    if len(a) != len(b):
        fail(f"{what}: {len(b)} lines, cpu {len(a)}")
        return
    for la, lb in zip(a, b):
        fa, fb = la.split("\t"), lb.split("\t")
        if len(fa) != len(fb) or [v for i, v in enumerate(fa) if i != col] != \
                [v for i, v in enumerate(fb) if i != col]:
            fail(f"{what}: '{lb}' against cpu '{la}'")
            continue
        if fa[col] == fb[col]:
            continue
        x, y = float(fa[col]), float(fb[col])
        if abs(x - y) > tol * max(abs(x), 1e-30):
            fail(f"{what}: score {y} against cpu {x}")


with tempfile.TemporaryDirectory() as d:
    clips = os.path.join(d, "clips")
    os.makedirs(clips)
    jobs = []
    for i in range(300):
        jobs.append([gen, "--seed", str(i + 1), "--seconds", "0.3", "-o",
                     os.path.join(clips, f"short{i:03d}.wav")])
    for i, sec in enumerate(["9.7", "13", "31"]):
        jobs.append([gen, "--seed", str(1000 + i), "--seconds", sec, "--anomaly", "clicks",
                     "-o", os.path.join(clips, f"long{i}.wav")])
    jobs.append([gen, "--seed", "7", "--seconds", "5", "--rate", "48000", "-o",
                 os.path.join(clips, "rate48k.wav")])
    jobs.append([gen, "--seed", "8", "--seconds", "0.1", "-o",
                 os.path.join(clips, "tooshort.wav")])
    for j in jobs:
        subprocess.run(j, check=True, capture_output=True)
    with open(os.path.join(clips, "notaudio.wav"), "w") as f:
        f.write("not a wave file\n")

    ref = score(clips, "cpu", {}, os.path.join(d, "w_cpu.tsv"))
    if ref[0] != 1 or len(ref[1].splitlines()) != 304:
        fail(f"cpu reference: rc={ref[0]}, {len(ref[1].splitlines())} lines\n{ref[2]}")
    hook = score(clips, "cuda", {"SSAE_SCORE_GPU_ON_CPU": "1"}, os.path.join(d, "w_hook.tsv"))
    if hook[0] != ref[0] or hook[1] != ref[1] or hook[3] != ref[3]:
        fail(f"CPU path of the GPU pipeline differs from --backend cpu: rc={hook[0]}\n{hook[2]}")
    if errors(hook[2]) != errors(ref[2]):
        fail(f"errors differ:\n{hook[2]}\nagainst\n{ref[2]}")

    # auto: the GPU front end for a job of at least the threshold's bytes
    # (lowered to 1 MB here, these clips are ~2 MB), the CPU path below it
    # (the default threshold: 160 MB per core); the same output either way.
    def auto(min_bytes):
        env = dict(os.environ, SSAE_SCORE_GPU_ON_CPU="1")
        if min_bytes is not None:
            env["SSAE_AUTO_GPU_MIN_BYTES"] = str(min_bytes)
        return subprocess.run([ssae, "score", "-q", "--stats", "--backend", "auto", clips],
                              capture_output=True, text=True, env=env)
    for min_bytes, want_gpu in ((1 << 20, True), (1 << 40, False), (None, False)):
        a = auto(min_bytes)
        on_gpu = "GPU front end:" in a.stderr
        if on_gpu != want_gpu or a.stdout != ref[1] or a.returncode != ref[0]:
            fail(f"auto, threshold {min_bytes}: GPU front end {on_gpu} (wanted {want_gpu}), "
                 f"rc={a.returncode}, output {'same' if a.stdout == ref[1] else 'differs'}\n"
                 f"{a.stderr}")

    # The runs' shape follows the files: 40 clips of 6 s (96,000 samples)
    # fit a block each (the median size as 16-bit samples, rounded up to
    # 16,384: 98,304), so all 40 are read whole in one run; the same output
    # as the CPU path.
    # The files' sample count comes from their headers, so 48 kHz files of 6 s
    # (three times the bytes, resampled to 16 kHz) get the same block.
    for rate in ("16000", "48000"):
        six = os.path.join(d, f"six{rate}")
        os.makedirs(six)
        for i in range(40):
            subprocess.run([gen, "--seed", str(2000 + i), "--seconds", "6", "--rate", rate, "-o",
                            os.path.join(six, f"six{i:02d}.wav")], check=True,
                           capture_output=True)
        env = dict(os.environ, SSAE_SCORE_GPU_ON_CPU="1")
        sh = subprocess.run([ssae, "score", "-q", "--stats", "--backend", "cuda", six],
                            capture_output=True, text=True, env=env)
        sref = subprocess.run([ssae, "score", "-q", "--backend", "cpu", six],
                              capture_output=True, text=True)
        if "1 runs of 40 files x 98304 samples" not in sh.stderr or sh.stdout != sref.stdout \
                or sh.returncode != 0:
            fail(f"runs' shape for 40 clips of 6 s at {rate} Hz: rc={sh.returncode}, output "
                 f"{'same' if sh.stdout == sref.stdout else 'differs'}\n{sh.stderr}")

    # Ctrl-C after the first results (SSAE_TEST_PAUSE_AT holds the command
    # there until the signal): the files already started are finished and
    # printed, in order, and none after them; exit 130 naming the count; the
    # --windows file whole, with the same files. 800 clips: more than the
    # two sets of runs hold (256 files a run here).
    many = os.path.join(d, "many")
    os.makedirs(many)
    with open(os.path.join(clips, "short000.wav"), "rb") as f:
        one = f.read()
    for i in range(800):
        with open(os.path.join(many, f"m{i:03d}.wav"), "wb") as f:
            f.write(one)
    wt = os.path.join(d, "w_int.tsv")
    p, paused = start_paused([ssae, "score", "--backend", "cuda", "--windows", wt, many],
                             "score-results", dict(os.environ, SSAE_SCORE_GPU_ON_CPU="1"))
    p.send_signal(signal.SIGINT)
    out, e = p.communicate(timeout=120)
    names = [l.split("\t")[0] for l in out.splitlines()]
    first = [os.path.join(many, f"m{i:03d}.wav") for i in range(len(names))]
    with open(wt) as f:
        w = f.read()
    wnames = {l.split("\t")[0] for l in w.splitlines()[1:]}
    whole = w.endswith("\n") and all(len(l.split("\t")) == 4 for l in w.splitlines())
    if not (paused and p.returncode == 130 and f"of 800 files done" in e and
            0 < len(names) < 800 and names == first and whole and wnames == set(names)):
        fail(f"Ctrl-C on the GPU front end: paused {paused}, rc={p.returncode}, "
             f"{len(names)} lines, in order {names == first}, windows whole {whole} with "
             f"{len(wnames)} files\n{e[-300:]}")
    else:
        print(f"Ctrl-C on the GPU front end: {len(names)} of 800 files done, exit 130: ok")

    probe = subprocess.run([os.path.join(build, "tests", "gpu", "test_cuda_frontend"), "--probe"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        gpu = score(clips, "cuda", {}, os.path.join(d, "w_gpu.tsv"))
        if gpu[0] != ref[0] or errors(gpu[2]) != errors(ref[2]):
            fail(f"GPU: rc={gpu[0]}\n{gpu[2]}")
        if "went on on the CPU" in gpu[2]:
            fail(f"GPU: left the GPU:\n{gpu[2]}")
        compare_scores("GPU file scores", ref[1], gpu[1], 1e-5, 1)
        compare_scores("GPU window scores", ref[3], gpu[3], 1e-5, 3)
        fb = score(clips, "cuda", {"SSAE_CUDA_FAIL_AFTER": "1"}, os.path.join(d, "w_fb.tsv"))
        if fb[0] != ref[0] or "went on on the CPU" not in fb[2]:
            fail(f"GPU failure hook: rc={fb[0]}\n{fb[2]}")
        compare_scores("fallback file scores", ref[1], fb[1], 1e-5, 1)
        compare_scores("fallback window scores", ref[3], fb[3], 1e-5, 3)
        # --device 1 (a second GPU): the front end there, and the backend
        # path (--strict) made on it; the same files and scores.
        for extra in ([], ["--strict"]):
            p = subprocess.run([ssae, "score", "-q", "--backend", "cuda", "--device", "1",
                                *extra, clips], capture_output=True, text=True)
            if p.returncode == 2 and "this host has 1 CUDA device" in p.stderr:
                print("one GPU: --device 1 refused, as it should be")
                break
            if p.returncode != ref[0] or "went on on the CPU" in p.stderr or \
                    "unavailable" in p.stderr:
                fail(f"--device 1 {extra}: rc={p.returncode}\n{p.stderr}")
            compare_scores(f"--device 1 {extra} file scores", ref[1], p.stdout, 1e-5, 1)
        # eval, report and bench take --device too: eval's file scores on
        # device 1 as on the CPU, report's picture made, bench's kernels
        # timed there (it names the device)
        ev, ev_rc = {}, {}
        for dev, be in (("0", "cpu"), ("1", "cuda")):
            out = os.path.join(d, f"ev{dev}.tsv")
            args = ["--backend", be] + (["--device", dev] if be == "cuda" else [])
            p = subprocess.run([ssae, "eval", *args, "--normal", clips, "--anomaly", clips,
                                "--scores", out], capture_output=True, text=True)
            if p.returncode == 2 and "this host has 1 CUDA device" in p.stderr:
                break
            # 1 with the set's unreadable and too-short files skipped, as on the CPU
            ev_rc[dev] = p.returncode
            if p.returncode not in (0, 1) or ev_rc[dev] != ev_rc["0"] or \
                    not os.path.exists(out):
                fail(f"eval --device {dev}: rc={p.returncode}\n{p.stderr}")
                break
            with open(out) as f:
                ev[dev] = f.read()
        if len(ev) == 2:
            compare_scores("eval --device 1 file scores", ev["0"], ev["1"], 1e-5, 3)
            png = os.path.join(d, "r1.png")
            p = subprocess.run([ssae, "report", "--backend", "cuda", "--device", "1",
                                os.path.join(clips, "long0.wav"), "-o", png],
                               capture_output=True, text=True)
            if not (p.returncode == 0 and os.path.exists(png) and os.path.getsize(png) > 0 or
                    p.returncode == 1 and "without cairo" in p.stderr):
                fail(f"report --device 1: rc={p.returncode}\n{p.stderr}")
            p = subprocess.run([ssae, "bench", "--backend", "cuda", "--device", "1", "--batches",
                                "1,4096", "--seconds", "0.01"], capture_output=True, text=True)
            if p.returncode != 0 or "# CUDA device 1:" not in p.stdout or \
                    len([l for l in p.stdout.splitlines() if l.startswith("cuda ")]) != 4:
                fail(f"bench --device 1: rc={p.returncode}\n{p.stdout}{p.stderr}")
            print("eval, report and bench on --device 1: ok")
    else:
        print("no CUDA device: the GPU part skipped")

if fails:
    print(f"{fails} failures")
    sys.exit(1)
print("ok")
