"""Finds and loads libssae through ctypes and declares the C API
(src/api/ssae_tensor_api.h).

Where the library is looked for, first hit wins:
1. the environment variable SSAE_LIBRARY (a path; when it names no loadable
   file the library counts as absent: the pure-PyTorch fallback and the
   tests use this);
2. next to the package (ssae/libssae.so*) and in the wheel's library folder
   (.ssae.mesonpy.libs/, where meson-python puts it);
3. the build tree or install prefix this copy of the package was configured
   for (ssae/_config.py, written by meson);
4. the system's library path (ctypes.util.find_library).
"""
import ctypes
import ctypes.util
import glob
import os
import threading

API_VERSION = 3
ERR_LEN = 512

OK, EARG, EIO, EBACKEND, ENOMEM, ENODEV = 0, -1, -2, -3, -4, -5

_lock = threading.Lock()
_lib = None
_load_error = None


class LibraryNotFound(ImportError):
    """libssae could not be found or loaded."""


def _candidates():
    env = os.environ.get("SSAE_LIBRARY")
    if env is not None:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here, os.path.join(os.path.dirname(here), ".ssae.mesonpy.libs")]
    try:
        from . import _config
        dirs += list(getattr(_config, "LIBDIRS", []))
    except ImportError:
        pass
    out = []
    for d in dirs:
        out += sorted(glob.glob(os.path.join(d, "libssae.so*")), key=len)
    found = ctypes.util.find_library("ssae")
    if found:
        out.append(found)
    return out


def _declare(lib):
    c_int, c_size_t, c_double, c_char_p, c_void_p = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_double, ctypes.c_char_p, ctypes.c_void_p)
    fp = c_void_p  # float buffers: addresses as Python ints
    fpp = ctypes.POINTER(ctypes.POINTER(ctypes.c_float))
    ip = ctypes.POINTER(ctypes.c_int)
    sigs = {
        "ssae_api_version": (c_int, []),
        "ssae_api_free": (None, [c_void_p]),
        "ssae_api_backends": (c_size_t, [c_char_p, c_size_t]),
        "ssae_api_model_open": (c_void_p, [c_char_p, c_char_p, c_char_p]),
        "ssae_api_model_free": (None, [c_void_p]),
        "ssae_api_model_from_params": (c_void_p, [ip, fp, c_size_t, c_char_p, c_char_p]),
        "ssae_api_model_set_math": (c_int, [c_void_p, c_char_p, c_char_p]),
        "ssae_api_model_dims": (None, [c_void_p, ip]),
        "ssae_api_model_threshold": (c_double, [c_void_p]),
        "ssae_api_model_feature": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
        "ssae_api_model_meta": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
        "ssae_api_model_meta_keys": (c_size_t, [c_void_p, c_char_p, c_size_t]),
        "ssae_api_model_params": (c_int, [c_void_p, fp, c_size_t, c_char_p]),
        "ssae_api_model_backend": (c_char_p, [c_void_p]),
        "ssae_api_model_note": (c_char_p, [c_void_p]),
        "ssae_api_model_fell_back": (c_int, [c_void_p]),
        "ssae_api_model_fallback_msg": (c_char_p, [c_void_p]),
        "ssae_api_model_score": (c_int, [c_void_p, fp, c_size_t, fp, fp, c_char_p]),
        "ssae_api_model_score_frames": (c_int, [c_void_p, fp, c_size_t, fp, c_char_p]),
        "ssae_api_score_file": (c_int, [c_void_p, c_char_p, c_int, ctypes.POINTER(c_double),
                                        fpp, ctypes.POINTER(c_size_t), c_char_p]),
        "ssae_api_model_fail_next": (None, [c_void_p]),
        "ssae_api_logmel": (c_int, [c_char_p, fp, c_size_t, fpp,
                                    ctypes.POINTER(c_size_t), ip, c_char_p]),
        "ssae_api_dims_param_count": (c_size_t, [ip]),
        "ssae_api_net_new": (c_void_p, [ip, c_int, c_char_p]),
        "ssae_api_net_free": (None, [c_void_p]),
        "ssae_api_net_set_params": (c_int, [c_void_p, fp, c_size_t, c_char_p]),
        "ssae_api_net_set_params_parts": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t,
                                                  c_char_p]),
        "ssae_api_net_forward": (c_int, [c_void_p, fp, c_size_t, fp, c_char_p]),
        "ssae_api_net_backward": (c_int, [c_void_p, fp, c_size_t, fp, fp, fp, c_char_p]),
        "ssae_api_net_act_floats": (c_size_t, [c_void_p, c_size_t]),
        "ssae_api_net_forward_train": (c_int, [c_void_p, fp, c_size_t, fp, fp, c_size_t,
                                               c_char_p]),
        "ssae_api_net_backward_saved": (c_int, [c_void_p, fp, c_size_t, c_size_t, fp, fp, fp,
                                                c_char_p]),
        "ssae_api_net_loss": (c_int, [c_void_p, fp, c_size_t, ctypes.POINTER(c_double), fp,
                                      c_char_p]),
        "ssae_api_net_set_team": (None, [c_void_p, c_void_p, c_int]),
        "ssae_api_net_fail_next": (None, [c_void_p]),
        "ssae_api_save": (c_int, [c_char_p, ip, fp, c_size_t, c_char_p, c_char_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    # Device-pointer entry points: present only in builds that have them
    # (ssae_tensor_api.h, SSAE_API_HAVE_CUDA_TENSORS).
    cuda = {
        "ssae_api_model_score_cuda": (c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_void_p,
                                              c_void_p, c_char_p]),
        "ssae_api_net_forward_cuda": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t,
                                              c_void_p, c_void_p, c_char_p]),
        "ssae_api_net_backward_cuda": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t,
                                               c_void_p, c_void_p, c_void_p, c_void_p,
                                               c_char_p]),
        "ssae_api_last_device_input": (c_void_p, []),
    }
    lib.ssae_has_cuda_tensors = all(hasattr(lib, n) for n in cuda)
    if lib.ssae_has_cuda_tensors:
        for name, (res, args) in cuda.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
    # The forward from the parameters where they lie (no flat vector made by
    # the caller; a later addition, as the loss below).
    lib.ssae_has_cuda_parts = (lib.ssae_has_cuda_tensors and
                               hasattr(lib, "ssae_api_net_forward_cuda_parts"))
    if lib.ssae_has_cuda_parts:
        f = lib.ssae_api_net_forward_cuda_parts
        f.restype = c_int
        f.argtypes = [c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p,
                      c_void_p, c_char_p]
    # The fused reconstruction loss (a later addition: a library without it
    # still serves everything else).
    lib.ssae_has_cuda_loss = lib.ssae_has_cuda_tensors and hasattr(lib, "ssae_api_net_loss_cuda")
    if lib.ssae_has_cuda_loss:
        f = lib.ssae_api_net_loss_cuda
        f.restype = c_int
        f.argtypes = [c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_void_p, c_void_p,
                      c_char_p]


def load():
    """The loaded library; raises LibraryNotFound."""
    global _lib, _load_error
    with _lock:
        if _lib is not None:
            return _lib
        if _load_error is not None:
            raise LibraryNotFound(_load_error)
        tried = []
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            try:
                version = lib.ssae_api_version()
                if version != API_VERSION:
                    tried.append("%s (C API version %d, this package needs %d)"
                                 % (path, version, API_VERSION))
                    continue
                _declare(lib)
            except AttributeError as e:
                tried.append("%s (not a libssae with the C API: %s)" % (path, e))
                continue
            _lib = lib
            return lib
        _load_error = "libssae not found: " + ("; ".join(tried) if tried else
                                                "no candidate (set SSAE_LIBRARY)")
        raise LibraryNotFound(_load_error)


def available():
    # Settled first without the lock: torch.compile traces callers of this
    # and cannot enter a lock (ssae.torch loads the library at import).
    if _lib is not None:
        return True
    if _load_error is not None:
        return False
    try:
        load()
        return True
    except LibraryNotFound:
        return False


def reset():
    """Forgets the loaded library so that the next load() searches again
    (tests that change SSAE_LIBRARY)."""
    global _lib, _load_error
    with _lock:
        _lib = None
        _load_error = None


def errbuf():
    return ctypes.create_string_buffer(ERR_LEN)


def fptr(address):
    """A buffer argument: its address (the C API's float pointers are
    declared c_void_p, so that no ctypes object is made per call)."""
    return address
