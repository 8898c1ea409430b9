"""`pip install .` as the README gives it (a venv with the system's site
packages, --no-build-isolation; --no-index here: nothing may come from the
network): meson-python builds the tree and the wheel holds the package and
libssae. Then, from another directory and without the build tree on the
path: the package imports from the venv, loads the libssae inside it, and
scores windows and runs the drop-in module as the build tree's copy does;
the installed `ssae` program runs. Takes a build of the whole tree (about
two minutes on two cores). Skipped (77) where the venv module or
meson-python is missing; tools/install-deps.sh --test installs both."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import ssae
import ssae.torch as st
from conftest import SOURCE

try:
    import mesonpy  # noqa: F401
    import venv  # noqa: F401
    import ensurepip  # noqa: F401
    missing = None
except ImportError as e:
    missing = str(e)

pytestmark = pytest.mark.skipif(missing is not None, reason="pip install needs %s" % missing)

CHECK = textwrap.dedent("""
    import os, sys, json
    import numpy as np, torch
    import ssae, ssae._lib, ssae.torch as st
    x = np.load(sys.argv[1])
    m = ssae.Model(backend="cpu")
    mod = st.SpectralShapeAutoencoder.from_file(sys.argv[2])
    with torch.no_grad():
        y = mod(torch.from_numpy(x)).numpy()
    np.save(sys.argv[3], m.score(x))
    np.save(sys.argv[4], y)
    print(json.dumps({"package": ssae.__file__, "lib": ssae._lib.load()._name,
                      "backends": ssae.backends()}))
""")


def test_pip_install(tmp_path, windows):
    venv_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv_dir)],
                   check=True, capture_output=True)
    py = str(venv_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_NO_INPUT"] = "1"
    p = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--disable-pip-version-check", SOURCE],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    x = windows[:200]
    np.save(tmp_path / "x.npy", x)
    model = os.path.join(SOURCE, "src", "model", "default.safetensors")
    with open(tmp_path / "check.py", "w") as f:
        f.write(CHECK)
    p = subprocess.run([py, "check.py", "x.npy", model, "s.npy", "y.npy"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    import json
    got = json.loads(p.stdout.strip().splitlines()[-1])
    site = str(venv_dir)
    assert got["package"].startswith(site), got  # not the build tree's copy
    assert got["lib"].startswith(site), got       # the libssae inside the wheel
    assert got["backends"]["cpu"]

    # the same numbers as the build tree's package (another build of the
    # same source: within float32 rounding)
    s_ref = ssae.Model(backend="cpu").score(x)
    mod = st.SpectralShapeAutoencoder.from_file(model)
    with torch.no_grad():
        y_ref = mod(torch.from_numpy(x)).numpy()
    s, y = np.load(tmp_path / "s.npy"), np.load(tmp_path / "y.npy")
    assert np.allclose(s, s_ref, rtol=1e-6, atol=0), np.abs(s / s_ref - 1).max()
    assert np.allclose(y, y_ref, rtol=1e-5, atol=1e-4)

    # the ssae program came with it
    p = subprocess.run([str(venv_dir / "bin" / "ssae"), "info", model], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0 and "n_mels 64" in p.stdout, p.stdout + p.stderr
