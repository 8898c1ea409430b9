"""`ssae report` end to end: a generated recording with bearing clicks gives
a PNG of the documented size whose threshold line is one clean row in the
score panel and whose spectrogram fills the top panel; the alarm spans it
prints overlap the labelled anomaly; SVG output; errors."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evalref import read_png  # noqa: E402
from ssae_testlib import check, done  # noqa: E402

ssae, gen = os.environ["SSAE"], sys.argv[1]


with tempfile.TemporaryDirectory() as d:
    wav, png, svg = (os.path.join(d, n) for n in ("clicks.wav", "r.png", "r.svg"))
    subprocess.run([gen, "--seed", "9", "--seconds", "8", "--anomaly", "clicks", "--at", "3",
                    "--length", "3", "-o", wav], check=True)
    p = subprocess.run([ssae, "report", wav, "-o", png, "--backend", "cpu"], capture_output=True,
                       text=True)
    print(p.stdout, p.stderr)
    check(p.returncode == 0, f"rc {p.returncode}")
    spans = [(float(a), float(b)) for a, b in re.findall(r"alarm ([\d.]+) s \.\. ([\d.]+) s",
                                                         p.stdout)]
    check(any(a < 6 and b > 3 for a, b in spans), f"no alarm over the clicks (3..6 s): {spans}")
    check(all(a > 2.5 and b < 6.8 for a, b in spans), f"alarm outside the clicks: {spans}")
    check(f"picture: {png}" in p.stdout, "says where the picture is")

    w, h, rows = read_png(png)
    check((w, h) == (1200, 800), f"size {w}x{h}")
    thr = (217, 26, 38)

    def is_thr(c):
        return all(abs(a - b) <= 3 for a, b in zip(c, thr))

    xs = range(150, 1050, 5)
    line_rows = [y for y in range(h) if sum(is_thr(rows[y][x]) for x in xs) >= 0.95 * len(xs)]
    check(1 <= len(line_rows) <= 3 and line_rows[-1] - line_rows[0] == len(line_rows) - 1,
          f"threshold rows {line_rows}")
    check(all(0.55 * h < y < 0.92 * h for y in line_rows), f"threshold line not in the score "
          f"panel: {line_rows}")
    # The spectrogram panel: coloured (not white, not grey) across its area.
    coloured = sum(1 for y in range(90, 400, 20) for x in range(150, 1050, 50)
                   if max(rows[y][x]) - min(rows[y][x]) > 40)
    check(coloured >= 0.9 * 16 * 18, f"spectrogram panel: {coloured} coloured samples")

    p = subprocess.run([ssae, "report", wav, "-o", svg, "--backend", "cpu"], capture_output=True,
                       text=True)
    check(p.returncode == 0 and b"<svg" in open(svg, "rb").read(2000), "svg")
    p = subprocess.run([ssae, "report", os.path.join(d, "missing.wav"), "-o", png],
                       capture_output=True, text=True)
    check(p.returncode == 1 and "missing.wav" in p.stderr, f"missing file: {p.stderr}")
    p = subprocess.run([ssae, "report", wav, "-o", os.path.join(d, "r.jpg")],
                       capture_output=True, text=True)
    check(p.returncode == 2, "bad extension is a usage error")

done()
