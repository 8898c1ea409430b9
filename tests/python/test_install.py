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
    s = m.score(x)
    np.save(sys.argv[3], s)
    np.save(sys.argv[4], y)
    cuda = None
    if torch.cuda.is_available() and ssae.backends()["cuda"]:
        # the wheel's CUDA kernels: scores of CUDA tensors, and the drop-in
        # module's forward and backward on the GPU, against its CPU path
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # a fallback to plain PyTorch warns
            xc = torch.from_numpy(x).cuda()
            sc = ssae.Model(backend="cuda").score(xc)
            modc = st.SpectralShapeAutoencoder.from_file(sys.argv[2]).cuda()
            xg = xc.clone().requires_grad_(True)
            xh = torch.from_numpy(x).requires_grad_(True)
            torch.nn.functional.mse_loss(modc(xg), xg).backward()
            torch.nn.functional.mse_loss(mod(xh), xh).backward()
        g = max(float((pc.grad.cpu() - ph.grad).norm() / ph.grad.norm())
                for pc, ph in zip(modc.parameters(), mod.parameters()))
        cuda = {"device": str(sc.device),
                "scores": float(np.abs(sc.cpu().numpy() / s - 1).max()),
                "grads": g, "dx": float((xg.grad.cpu() - xh.grad).norm() / xh.grad.norm()),
                "warnings": [str(w.message) for w in caught]}
    print(json.dumps({"package": ssae.__file__, "lib": ssae._lib.load()._name,
                      "backends": ssae.backends(), "cuda": cuda}))
""")


def test_pip_install(tmp_path, windows):
    venv_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv_dir)],
                   check=True, capture_output=True)
    py = str(venv_dir / "bin" / "python")
    if sys.prefix != sys.base_prefix:
        # this Python is itself a venv (the GPU hosts' torch lives in one):
        # the new venv sees the base Python's site packages, so it is given
        # this one's too (numpy and torch), behind its own
        import site
        own = subprocess.run([py, "-c", "import site; print(site.getsitepackages()[0])"],
                             check=True, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(own, "_parent_venv.pth"), "w") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The caller's PYTHONPATH without the build tree's package (a host's
    # meson-python may come that way: tools/gpu-host-deps.sh)
    keep = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if d and not os.path.exists(os.path.join(d, "ssae", "__init__.py"))]
    if keep:
        env["PYTHONPATH"] = os.pathsep.join(keep)
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
    if got["cuda"] is not None:
        c = got["cuda"]
        print("the wheel on the GPU:", c)
        assert c["device"].startswith("cuda"), c
        assert c["scores"] <= 1e-5 and c["grads"] <= 1e-4 and c["dx"] <= 1e-4, c
        assert not c["warnings"], c

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
