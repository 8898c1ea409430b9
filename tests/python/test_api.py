"""ssae.Model, ssae.logmel, ssae.score_file, ssae.backends on NumPy arrays and
CPU tensors, against the float64 SPEC module and the ssae program."""
import os
import pathlib
import subprocess
import warnings

import numpy as np
import pytest
import torch

import ssae
from conftest import (DEFAULT_MODEL, frames_to_windows, oracle, rel_l2, signal,
                      write_wav)

SSAE = os.environ.get("SSAE")


def test_attributes():
    m = ssae.Model()
    assert (m.n_mels, m.frames, m.latent_dim, m.slice_latent_dim) == (64, 5, 32, 64)
    assert m.window_size == 320
    assert m.features["sample_rate"] == 16000 and m.features["n_fft"] == 1024
    assert m.features["center"] is True and m.features["pad_mode"] == "reflect"
    assert m.threshold is not None and m.threshold > 0
    assert m.backend in ssae.backends()
    b = ssae.backends()
    assert list(b)[-1] == "cpu" and b["cpu"] is True


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_forward_vs_float64(model_path, windows, kind):
    m = ssae.Model(model_path, backend="cpu")
    ref = oracle(model_path)
    x64 = torch.from_numpy(windows).double()
    with torch.no_grad():
        y_ref = ref(x64)
    s_ref = ((y_ref - x64) ** 2).mean(1)
    x = windows if kind == "numpy" else torch.from_numpy(windows)
    s, y = m.score_reconstruct(x)
    assert type(s) is type(x) and type(y) is type(x)
    assert tuple(y.shape) == tuple(x.shape) and tuple(s.shape) == (len(windows),)
    assert rel_l2(y, y_ref) <= 1e-6
    rel = np.abs(np.asarray(s, dtype=np.float64) - s_ref.numpy()) / s_ref.numpy()
    assert rel.max() <= 1e-5
    np.testing.assert_array_equal(np.asarray(m.score(x)), np.asarray(s))
    y3 = m.reconstruct(x.reshape(-1, 5, 64))
    assert tuple(y3.shape) == (len(windows), 5, 64)


def test_score_frames(logmel_frames, windows):
    m = ssae.Model(backend="cpu")
    s = m.score_frames(logmel_frames)
    assert s.shape == (len(logmel_frames) - 4,)
    np.testing.assert_allclose(s, m.score(windows), rtol=1e-6)
    st = m.score_frames(torch.from_numpy(logmel_frames))
    assert isinstance(st, torch.Tensor)
    assert m.score_frames(logmel_frames[:4]).shape == (0,)
    assert m.score(np.zeros((0, 320), np.float32)).shape == (0,)


def test_logmel_equals_ssae_features(tmp_path):
    if not SSAE:
        pytest.skip("SSAE (the program) not given")
    samples = write_wav(str(tmp_path / "a.wav"), signal(3.0, seed=1))
    subprocess.run([SSAE, "features", str(tmp_path / "a.wav"), "-o", str(tmp_path / "a.npy")],
                   check=True, capture_output=True)
    want = np.load(str(tmp_path / "a.npy"))
    got = ssae.logmel(samples)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    got_t = ssae.logmel(torch.from_numpy(samples))
    assert isinstance(got_t, torch.Tensor) and got_t.numpy().tobytes() == want.tobytes()
    # the model's settings are the defaults here
    assert ssae.logmel(samples, model=ssae.Model()).tobytes() == want.tobytes()
    # or a model file's path (str or os.PathLike); anything else named
    assert ssae.logmel(samples, model=DEFAULT_MODEL).tobytes() == want.tobytes()
    assert ssae.logmel(samples, model=pathlib.Path(DEFAULT_MODEL)).tobytes() == want.tobytes()
    with pytest.raises(TypeError, match="model: expected an ssae.Model or a model file's path"):
        ssae.logmel(samples, model=3)
    # other settings reach the library
    assert ssae.logmel(samples, n_mels=32, pad_mode="constant").shape == (want.shape[0], 32)


def test_score_file_equals_ssae_score(tmp_path):
    if not SSAE:
        pytest.skip("SSAE (the program) not given")
    path = str(tmp_path / "b.wav")
    samples = write_wav(path, signal(3.0, seed=2))
    out = subprocess.run([SSAE, "score", "-q", "--backend", "cpu", "--windows",
                          str(tmp_path / "w.tsv"), path], check=True, capture_output=True,
                         text=True).stdout
    file_score = float(out.split("\t")[1])
    rows = [ln.split("\t") for ln in open(tmp_path / "w.tsv").read().splitlines()[1:]]
    want = np.array([float(r[3]) for r in rows])
    score, w = ssae.score_file(path)
    assert len(w) == len(want)
    np.testing.assert_allclose(w, want, rtol=1e-6)
    assert abs(score - file_score) <= 1e-6 * file_score
    # the same as the pieces: logmel, then every window
    m = ssae.Model(backend="cpu")
    np.testing.assert_allclose(m.score_frames(ssae.logmel(samples)), w, rtol=1e-6)
    # the default backend may be the GPU's: equal within SPEC's tolerance
    for s2 in (ssae.score_file(path, model=m)[0], ssae.score_file(path, model=DEFAULT_MODEL)[0],
               ssae.score_file(path, channel="mix")[0]):
        assert abs(s2 - score) <= 1e-6 * score


def test_model_device_refused():
    """device= names a CUDA device of this host, for a backend that can be
    CUDA: anything else is a ValueError saying what was wrong."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match="has %d CUDA device" % n):
        ssae.Model(backend="auto", device=n)
    with pytest.raises(ValueError, match="CUDA device index"):
        ssae.Model(device="cpu")
    with pytest.raises(ValueError, match="CUDA device index"):
        ssae.Model(device="gpu7")
    with pytest.raises(ValueError, match="not backend='cpu'"):
        ssae.Model(backend="cpu", device=0)


def test_backend_failure_falls_back(windows):
    m = ssae.Model(backend="cpu")
    want = m.score(windows)
    m.fail_next()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = m.score(windows)
        again = m.score(windows)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)
    msgs = [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]
    assert len(msgs) == 1 and "test hook" in msgs[0], msgs
    assert m.backend == "cpu"


def test_bad_input(tmp_path):
    m = ssae.Model(backend="cpu")
    x = np.zeros((3, 320), np.float32)
    with pytest.raises(TypeError, match="float64"):
        m.score(x.astype(np.float64))
    with pytest.raises(TypeError, match="torch.float64"):
        m.score(torch.zeros(3, 320, dtype=torch.float64))
    with pytest.raises(TypeError, match="list"):
        m.score([[0.0] * 320])
    with pytest.raises(ValueError, match=r"shape \(3, 319\)"):
        m.score(np.zeros((3, 319), np.float32))
    with pytest.raises(ValueError, match="dimensions"):
        m.score(np.zeros(320, np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        m.score(np.zeros((320, 3), np.float32).T)
    with pytest.raises(ValueError, match="contiguous"):
        m.score(torch.zeros(320, 6)[:, ::2].T)
    with pytest.raises(ValueError, match=r"\(T, 64\)"):
        m.score_frames(np.zeros((10, 63), np.float32))
    with pytest.raises(TypeError, match="float64"):
        ssae.logmel(np.zeros(4000))
    with pytest.raises(ValueError, match="n_fft"):
        ssae.logmel(np.zeros(4000, np.float32), n_fft=3)
    with pytest.raises(ValueError, match="backend"):
        ssae.Model(backend="tpu")
    with pytest.raises(OSError, match="nope.safetensors"):
        ssae.Model(str(tmp_path / "nope.safetensors"))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(OSError, match="bad.safetensors"):
        ssae.Model(str(bad))
    with pytest.raises(OSError, match="missing.wav"):
        ssae.score_file(str(tmp_path / "missing.wav"))
    with pytest.raises(ValueError, match="channel"):
        ssae.score_file(str(tmp_path / "x.wav"), channel=-3)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.score(x)


def test_math_option_on_the_cpu(windows):
    """math="3xtf32" is CUDA's; the CPU takes it and computes as it does."""
    a = ssae.Model(backend="cpu").score(windows)
    b = ssae.Model(backend="cpu", math="3xtf32").score(windows)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="math"):
        ssae.Model(backend="cpu", math="fp16")
