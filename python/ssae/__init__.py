"""ssae from Python: the library's kernels on NumPy arrays and torch tensors.

    import ssae
    m = ssae.Model()                      # the built-in model; or Model("x.safetensors")
    s = m.score(windows)                  # (n, F*M) or (n, F, M) float32 -> (n,)
    y = m.reconstruct(windows)            # same shape as windows
    s = m.score_frames(frames)            # (T, M) -> (T-F+1,), each frame encoded once
    frames = ssae.logmel(samples)         # 1-D float32 at 16 kHz -> (T, 64), as `ssae features`
    score, windows = ssae.score_file("a.wav")   # as `ssae score`
    ssae.backends()                       # {"cuda": False, "cpu": True}

Inputs are float32, C-contiguous NumPy arrays or torch tensors; results come
back as the same kind on the same device. Anything else (another dtype, a
wrong shape, a non-contiguous view) raises TypeError or ValueError naming
the problem; nothing is converted silently.

CUDA tensors: when the library has the device-pointer entry points
(ssae_tensor_api.h) and the model runs on its CUDA backend, the kernel
reads the tensor in place on the current stream of the tensor's device
(torch.cuda.current_stream), results are written to new tensors on that
device, and the call returns without waiting (stream order, as for any
torch operation). score_frames lays the frames' windows out on the device
first. Otherwise the tensor is copied to the host and the result copied
back: with one RuntimeWarning per process in builds without the entry
points; silently on a model opened with backend="cpu"; after a GPU failure
with the failure's one warning (below).

A backend failure (the GPU) makes the library switch to the CPU and rerun
the batch, so results are unaffected; it is reported with one
RuntimeWarning per model. ssae.torch has the PyTorch module
(SpectralShapeAutoencoder) whose forward and backward run on these kernels.
"""
import array
import ctypes
import sys
import math as _math
import os
import threading
import warnings

try:
    import numpy as np
except ImportError:  # torch tensors still work; NumPy results need it
    np = None

from . import _lib

__all__ = ["Model", "logmel", "score_file", "backends", "Error", "LibraryNotFound",
           "library_available"]
__version__ = "0.1.0"

LibraryNotFound = _lib.LibraryNotFound


class Error(RuntimeError):
    """A failure inside libssae (the message is the library's)."""


def library_available():
    """True when libssae could be loaded (see ssae._lib for where it is looked for)."""
    return _lib.available()


def _check(rc, err):
    if rc != _lib.OK:
        msg = err.value.decode("utf-8", "replace")
        if rc == _lib.EARG:
            raise ValueError(msg)
        if rc == _lib.EIO:
            raise OSError(msg)
        raise Error(msg)


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _host_vector(n, like=None):
    """A float32 vector of n for results that have no input to follow:
    NumPy when present, else a torch tensor, else array.array. Returns it
    and its address."""
    if np is not None and not (like is not None and _is_torch(like)):
        a = np.empty(n, dtype=np.float32)
        return a, a.ctypes.data
    try:
        import torch
        t = torch.empty(n, dtype=torch.float32)
        return t, t.data_ptr()
    except ImportError:
        a = array.array("f", bytes(4 * n))
        return a, (a.buffer_info()[0] if n else 0)


_cuda_copy_warned = False


def _warn_cuda_copy():
    global _cuda_copy_warned
    if not _cuda_copy_warned:
        _cuda_copy_warned = True
        warnings.warn("this libssae has no device-pointer entry points: CUDA tensors are "
                      "copied to the host and back", RuntimeWarning, stacklevel=4)


class _Arg:
    """One input array as the C API needs it: a float32 C-contiguous host
    buffer, and how to give results back in the caller's kind and device."""

    def __init__(self, x, what, ndims):
        if _is_torch(x):
            import torch
            if not isinstance(x, torch.Tensor):
                raise TypeError("%s: expected a NumPy array or a torch tensor, got %s"
                                % (what, type(x).__name__))
            if x.dtype != torch.float32:
                raise TypeError("%s: dtype %s, expected torch.float32" % (what, x.dtype))
            if x.dim() not in ndims:
                raise ValueError("%s: %d dimensions (shape %s), expected %s"
                                 % (what, x.dim(), tuple(x.shape), _dims_text(ndims)))
            if not x.is_contiguous():
                raise ValueError("%s: not contiguous (strides %s); pass x.contiguous()"
                                 % (what, tuple(x.stride())))
            self.torch = True
            self.device = x.device
            x = x.detach()
            self.cuda = None
            if x.device.type != "cpu":
                if x.device.type != "cuda":
                    raise ValueError("%s: tensors on %s are not supported (cpu or cuda)"
                                     % (what, x.device))
                if _lib.load().ssae_has_cuda_tensors:
                    # kept on the device; to_host() when the backend cannot read it
                    self.cuda = x
                    self.host = None
                    self.shape = tuple(x.shape)
                    self.ptr = None
                    return
                _warn_cuda_copy()
                x = x.cpu()
            self.host = x
            self.shape = tuple(x.shape)
            self.ptr = x.data_ptr()
        elif np is not None and isinstance(x, np.ndarray):
            if x.dtype != np.float32:
                raise TypeError("%s: dtype %s, expected float32" % (what, x.dtype))
            if x.ndim not in ndims:
                raise ValueError("%s: %d dimensions (shape %s), expected %s"
                                 % (what, x.ndim, x.shape, _dims_text(ndims)))
            if not x.flags.c_contiguous:
                raise ValueError("%s: not C-contiguous (strides %s); pass "
                                 "numpy.ascontiguousarray(x)" % (what, x.strides))
            self.torch = False
            self.cuda = None
            self.host = x
            self.shape = x.shape
            self.ptr = x.ctypes.data
        else:
            raise TypeError("%s: expected a NumPy array or a torch tensor, got %s"
                            % (what, type(x).__name__))

    def to_host(self):
        """Copies a kept CUDA tensor to the host (the backend in use reads
        no device memory)."""
        if self.cuda is not None:
            self.host = self.cuda.cpu()
            self.ptr = self.host.data_ptr()
            self.cuda = None

    def empty(self, shape):
        """An output buffer (host) and its pointer."""
        if self.torch:
            import torch
            t = torch.empty(shape, dtype=torch.float32)
            return t, t.data_ptr()
        a = np.empty(shape, dtype=np.float32)
        return a, a.ctypes.data

    def result(self, out):
        if self.torch and self.device.type != "cpu":
            return out.to(self.device)
        return out


def _dims_text(ndims):
    return " or ".join("%d" % d for d in sorted(ndims))


def _fp(addr):
    return addr


def _parse_setting(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    if v in ("true", "false"):
        return v == "true"
    return v


_FEATURE_KEYS = ("sample_rate", "n_fft", "hop_length", "window", "center", "pad_mode",
                 "n_mels", "fmin", "fmax", "mel_scale", "mel_norm", "power", "log", "frames")


def backends():
    """{name: available} for every backend of this libssae, CPU last."""
    lib = _lib.load()
    n = lib.ssae_api_backends(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.ssae_api_backends(buf, n + 1)
    out = {}
    for line in buf.value.decode().splitlines():
        name, _, ok = line.partition("\t")
        out[name] = ok == "1"
    return out


def _device_scope(device):
    """A context in which CUDA device `device` is current, where the
    library's CUDA backend starts (as CUDA's own libraries do); None keeps
    the current one."""
    import contextlib
    if device is None:
        return contextlib.nullcontext()
    try:
        import torch
    except ImportError:
        raise ValueError("device=%r: selecting a GPU from Python needs torch (without it, "
                         "CUDA_VISIBLE_DEVICES chooses the GPU)" % (device,)) from None
    try:
        d = (torch.device("cuda", device) if isinstance(device, int) and
             not isinstance(device, bool) else torch.device(device))
    except (RuntimeError, TypeError, ValueError):
        d = None
    if d is None or d.type != "cuda":
        raise ValueError("device %r: expected a CUDA device index, 'cuda:N' or a "
                         "torch.device('cuda', N)" % (device,))
    if d.index is None:  # torch.device("cuda"): the current one
        return contextlib.nullcontext()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not 0 <= d.index < count:
        raise ValueError("device %r: this host has %d CUDA device%s" %
                         (device, count, "" if count == 1 else "s"))
    from ._torch_net import _on_device
    return _on_device(d)


class Model:
    """An ssae model on one backend.

    Model(path=None, backend="auto", math="fp32", device=None): path None
    is the model built into the library; backend "auto" takes CUDA when
    present and its self-test against the CPU passes, else the CPU; "cpu"
    or "cuda" ask for one (an Error when it cannot start). device: the GPU
    the CUDA backend runs on (an index, "cuda:N" or a torch.device; selecting
    one needs torch); None: the current device (torch.cuda.current_device(),
    0 unless the program selected another). CUDA tensors of another device
    than the model's are refused with a ValueError naming both. math
    "3xtf32" runs CUDA's throughput kernel on the tensor cores in 3xTF32
    (fp32-level accuracy: relative error within 1e-6 of float64; about
    1.4x the windows per second of "fp32" on an H100, from a few thousand
    windows per call); the CPU computes as it does with either.

    Attributes: n_mels, frames, latent_dim, slice_latent_dim, window_size
    (frames * n_mels), threshold (None when the model has none), features
    (the feature settings, SPEC section 1, as a dict), backend (the backend
    in use now; "cpu" after a fallback), note (why "auto" passed over a
    faster backend, "" when it did not).

    Calls are serialised per object (a lock): share one between threads or
    make one per thread.
    """

    def __init__(self, path=None, backend="auto", math="fp32", device=None):
        lib = _lib.load()
        if backend not in ("auto", "cpu", "cuda"):
            raise ValueError("backend %r: expected 'auto', 'cpu' or 'cuda'" % (backend,))
        if math not in ("fp32", "3xtf32"):
            raise ValueError("math %r: expected 'fp32' or '3xtf32'" % (math,))
        if device is not None and backend == "cpu":
            raise ValueError("device=%r is for the CUDA backend, not backend='cpu'" % (device,))
        err = _lib.errbuf()
        p = None if path is None else str(path).encode()
        with _device_scope(device):
            h = lib.ssae_api_model_open(p, backend.encode(), err)
        if not h:
            msg = err.value.decode("utf-8", "replace")
            raise (OSError if path is not None and "cuda" not in msg.lower() else Error)(msg)
        if lib.ssae_api_model_set_math(h, math.encode(), err) != 0:
            lib.ssae_api_model_free(h)
            raise ValueError(err.value.decode("utf-8", "replace"))
        self.math = math
        self._lib = lib
        self._h = h
        self._lock = threading.Lock()
        self._err = _lib.errbuf()  # under _lock
        self._warned = False
        dims = (ctypes.c_int * 4)()
        lib.ssae_api_model_dims(h, dims)
        self.n_mels, self.frames, self.latent_dim, self.slice_latent_dim = list(dims)
        self.window_size = self.n_mels * self.frames
        t = lib.ssae_api_model_threshold(h)
        self.threshold = None if _math.isnan(t) else t
        self.features = {k: _parse_setting(self._text(lib.ssae_api_model_feature, k))
                         for k in _FEATURE_KEYS}
        self.path = path

    def _text(self, fn, key):
        buf = ctypes.create_string_buffer(256)
        if fn(self._h, key.encode(), buf, 256) != 0:
            return None
        return buf.value.decode()

    def metadata(self, key):
        """A metadata entry of the model file (provenance, ...), or None."""
        return self._text(self._lib.ssae_api_model_meta, key)

    def metadata_all(self):
        """Every metadata entry of the model file, as a dict of strings."""
        self._live()
        n = self._lib.ssae_api_model_meta_keys(self._h, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self._lib.ssae_api_model_meta_keys(self._h, buf, n + 1)
        return {k: self.metadata(k) for k in buf.value.decode().splitlines()}

    @property
    def backend(self):
        return self._lib.ssae_api_model_backend(self._h).decode()

    @property
    def note(self):
        return self._lib.ssae_api_model_note(self._h).decode()

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.ssae_api_model_free(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __repr__(self):
        return ("ssae.Model(%r, n_mels=%d, frames=%d, latent_dim=%d, slice_latent_dim=%d, "
                "backend=%r)" % (self.path, self.n_mels, self.frames, self.latent_dim,
                                 self.slice_latent_dim, self.backend))

    def _live(self):
        if not self._h:
            raise ValueError("the model is closed")

    def _after(self):
        if not self._warned and self._lib.ssae_api_model_fell_back(self._h):
            self._warned = True
            warnings.warn(self._lib.ssae_api_model_fallback_msg(self._h).decode(),
                          RuntimeWarning, stacklevel=3)

    def _window_shape(self, s):
        """(n, frames * n_mels) or (n, frames, n_mels)."""
        return (len(s) == 2 and s[1] == self.window_size) or \
            (len(s) == 3 and s[1] == self.frames and s[2] == self.n_mels)

    def _windows(self, windows, what):
        a = _Arg(windows, what, (2, 3))
        s = a.shape
        if not self._window_shape(s):
            raise ValueError("%s: shape %s, expected (n, %d) or (n, %d, %d)"
                             % (what, tuple(s), self.window_size, self.frames, self.n_mels))
        return a

    def _run_cuda(self, x, recon):
        """(scores, reconstructions or None) of windows x in device memory,
        on the current stream of x's device; None when the backend in use
        reads no device memory (the caller copies to the host)."""
        import torch
        from ._torch_net import _on_device, _stream
        if not x.is_contiguous():
            x = x.contiguous()  # the kernels read windows a row apart
        if x.data_ptr() % 16:
            x = x.clone()  # the kernels read float4s (a view at an odd offset)
        n = x.shape[0]
        with _on_device(x.device):
            scores = torch.empty(n, dtype=torch.float32, device=x.device)
            y = torch.empty_like(x) if recon else None
            stream = _stream(x.get_device())
            err = _lib.errbuf()
            with self._lock:
                rc = self._lib.ssae_api_model_score_cuda(
                    self._h, _fp(x.data_ptr()), n, _fp(scores.data_ptr()),
                    _fp(y.data_ptr()) if recon else None, stream or None, err)
                self._after()
        if rc == _lib.ENODEV:
            return None
        _check(rc, err)
        return scores, y

    def _run(self, windows, recon, what):
        self._live()
        a = self._windows(windows, what)
        if a.cuda is not None:
            out = self._run_cuda(a.cuda, recon)
            if out is not None:
                return out
            a.to_host()
        n = a.shape[0]
        scores, sp = a.empty((n,))
        y, yp = a.empty(a.shape) if recon else (None, None)
        err = _lib.errbuf()
        with self._lock:
            rc = self._lib.ssae_api_model_score(self._h, _fp(a.ptr), n, _fp(sp),
                                                _fp(yp) if recon else None, err)
            self._after()
        _check(rc, err)
        return a.result(scores), (a.result(y) if recon else None)

    def _score_cuda_lean(self, x, torch):
        """score() of a CUDA tensor that needs nothing done to it (float32,
        contiguous, aligned, on the current device, the right shape): one
        allocation and one library call, no checks that cannot fail here
        (at batch 1 the general path's Python costs more than the kernel).
        None when the general path must run."""
        if (x.dtype is not torch.float32 or not x.is_contiguous() or x.data_ptr() % 16 or
                not self._h):
            return None
        s = x.shape
        if not self._window_shape(s):
            return None
        dev = x.get_device()
        if dev != torch.cuda.current_device():
            return None
        from ._torch_net import _stream
        stream = _stream(dev)
        n = s[0]
        scores = torch.empty(n, dtype=torch.float32, device=x.device)
        with self._lock:
            rc = self._lib.ssae_api_model_score_cuda(self._h, x.data_ptr(), n,
                                                     scores.data_ptr(), None, stream or None,
                                                     self._err)
            if rc == 0:
                return scores
            self._after()
        if rc == _lib.ENODEV:
            return None  # the CPU serves now: the general path copies
        _check(rc, self._err)

    def score(self, windows):
        """Window scores (mean squared reconstruction error per window)."""
        torch = sys.modules.get("torch")
        if (torch is not None and type(windows) is torch.Tensor and windows.is_cuda and
                self._lib.ssae_has_cuda_tensors):
            r = self._score_cuda_lean(windows, torch)
            if r is not None:
                return r
        return self._run(windows, False, "windows")[0]

    def reconstruct(self, windows):
        """The model's output for each window (same shape as windows)."""
        return self._run(windows, True, "windows")[1]

    def score_reconstruct(self, windows):
        """(scores, reconstructions) in one pass."""
        return self._run(windows, True, "windows")

    def score_frames(self, frames):
        """Scores of every window of a run of consecutive log-mel frames
        ((T, n_mels) -> (T - frames + 1,); none when T < frames). Each frame
        is encoded once."""
        self._live()
        a = _Arg(frames, "frames", (2,))
        if a.shape[1] != self.n_mels:
            raise ValueError("frames: shape %s, expected (T, %d)" % (tuple(a.shape), self.n_mels))
        n = max(a.shape[0] - self.frames + 1, 0)
        if a.cuda is not None:
            # window t is frames t .. t+F-1: laid out on the device, as the
            # library does for a GPU backend
            if n == 0:
                import torch
                return torch.empty(0, dtype=torch.float32, device=a.cuda.device)
            # The windows laid out (reshape alone gives a view whose rows
            # overlap, a frame apart, which the kernels cannot read).
            w = a.cuda.unfold(0, self.frames, 1).transpose(1, 2).reshape(
                n, self.window_size).contiguous()
            out = self._run_cuda(w, False)
            if out is not None:
                return out[0]
            a.to_host()
        scores, sp = a.empty((n,))
        err = _lib.errbuf()
        with self._lock:
            rc = self._lib.ssae_api_model_score_frames(self._h, _fp(a.ptr), a.shape[0],
                                                       _fp(sp), err)
            self._after()
        _check(rc, err)
        return a.result(scores)

    def params(self, like=None):
        """The parameters as one flat float32 vector in state_dict order
        (NumPy; a torch tensor when like is one or NumPy is missing)."""
        self._live()
        dims = (ctypes.c_int * 4)(self.n_mels, self.frames, self.latent_dim,
                                  self.slice_latent_dim)
        n = self._lib.ssae_api_dims_param_count(dims)
        out, addr = _host_vector(n, like)
        err = _lib.errbuf()
        _check(self._lib.ssae_api_model_params(self._h, addr, n, err), err)
        return out

    def fail_next(self):
        """Test hook: the next call fails on the current backend as a device
        error would; the library falls back to the CPU (one warning)."""
        self._live()
        self._lib.ssae_api_model_fail_next(self._h)


def _settings_text(settings):
    lines = []
    for k, v in settings.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, float):
            v = repr(v)
        lines.append("%s=%s" % (k, v))
    return "\n".join(lines)


def logmel(samples, sample_rate=16000, n_fft=1024, hop_length=512, n_mels=64, fmin=0.0,
           fmax=None, center=True, pad_mode="reflect", mel_scale="slaney", mel_norm="slaney",
           power=2.0, model=None):
    """Log-mel frames (T, n_mels) of 1-D float32 samples at sample_rate,
    exactly what `ssae features` writes for the same samples (SPEC section
    1; no resampling here). model: take every setting from an ssae.Model,
    or from the model file at that path, instead (the keyword arguments are
    then ignored)."""
    lib = _lib.load()
    a = _Arg(samples, "samples", (1,))
    a.to_host()  # the log-mel front end runs on the CPU
    if model is not None:
        if isinstance(model, (str, bytes, os.PathLike)):
            model = _cached_model(model)
        elif not isinstance(model, Model):
            raise TypeError("model: expected an ssae.Model or a model file's path, got %s"
                            % type(model).__name__)
        settings = {k: v for k, v in model.features.items() if k not in ("window", "log",
                                                                         "frames")}
    else:
        settings = dict(sample_rate=sample_rate, n_fft=n_fft, hop_length=hop_length,
                        n_mels=n_mels, fmin=fmin, fmax=fmax, center=center, pad_mode=pad_mode,
                        mel_scale=mel_scale, mel_norm=mel_norm, power=power)
    out = ctypes.POINTER(ctypes.c_float)()
    nf = ctypes.c_size_t()
    nm = ctypes.c_int()
    err = _lib.errbuf()
    rc = lib.ssae_api_logmel(_settings_text(settings).encode(), _fp(a.ptr), a.shape[0],
                             ctypes.byref(out), ctypes.byref(nf), ctypes.byref(nm), err)
    _check(rc, err)
    try:
        arr, addr = a.empty((nf.value, nm.value))
        if nf.value * nm.value:
            ctypes.memmove(addr, out, 4 * nf.value * nm.value)
    finally:
        lib.ssae_api_free(out)
    return a.result(arr)


_default_models = {}


def _cached_model(path):
    """The ssae.Model of a file's path (None: the built-in model), loaded
    once per process."""
    key = None if path is None else os.fsdecode(path)
    if key not in _default_models:
        _default_models[key] = Model(key)
    return _default_models[key]


def score_file(path, model=None, channel=0):
    """(file score, window scores: a NumPy array, or a torch tensor without
    NumPy) of an audio file, as
    `ssae score` computes them: channel (an index, or "mix"), resampled to
    the model's rate, the model's features, every window. model: an
    ssae.Model, a model file's path, or None for the built-in model."""
    if model is None or not isinstance(model, Model):
        model = _cached_model(model)
    if channel == "mix":
        ch = -1
    elif hasattr(channel, "__index__") and not isinstance(channel, bool) \
            and channel.__index__() >= 0:
        ch = channel.__index__()
    else:
        raise ValueError("channel %r: expected an index >= 0 or 'mix'" % (channel,))
    model._live()
    fs = ctypes.c_double()
    out = ctypes.POINTER(ctypes.c_float)()
    n = ctypes.c_size_t()
    err = _lib.errbuf()
    with model._lock:
        rc = model._lib.ssae_api_score_file(model._h, str(path).encode(), ch, ctypes.byref(fs),
                                            ctypes.byref(out), ctypes.byref(n), err)
        model._after()
    _check(rc, err)
    try:
        w, addr = _host_vector(n.value)
        if n.value:
            ctypes.memmove(addr, out, 4 * n.value)
    finally:
        model._lib.ssae_api_free(out)
    return fs.value, w
