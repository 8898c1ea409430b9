"""The drop-in module's handle on libssae (ssae.torch): one ssae_api_net
per model dimensions and device (_Net), with what its calls need from torch
(the current stream, the device, the parameters as one vector, torch's
OpenMP team for the CPU). The module and its autograd Functions are in
ssae/torch.py; this file holds no autograd."""
import contextlib
import ctypes
import os
import re
import threading

import torch

from . import _lib


class KernelError(RuntimeError):
    """A libssae kernel call failed."""


# The CPU training forward keeps the activations for the backward up to
# this size (about 7,900 windows at the default dimensions, 4.2 KB each);
# above it the backward computes them again, cheaper than writing and
# reading them through memory.
KEEP_ACTIVATIONS_BYTES = 32 << 20

_team_lock = threading.Lock()
_team_addr = False  # not looked for yet


def _omp_team():
    """The address of GOMP_parallel in the OpenMP runtime that torch's CPU
    operators run on, or None (another parallel backend, no such runtime
    found, or SSAE_TORCH_TEAM=0). The drop-in module's CPU training calls
    run on that team: torch leaves its threads spinning between operators,
    and ssae's own threads woken beside them would compete for the same
    cores (a step took 8x longer so on 16 cores)."""
    global _team_addr
    if _team_addr is not False:
        return _team_addr
    with _team_lock:
        if _team_addr is False:
            _team_addr = _find_omp_team()
    return _team_addr


def _find_omp_team():
    if os.environ.get("SSAE_TORCH_TEAM", "1") == "0":
        return None
    try:
        if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            return None
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "/lib" in line and
                    re.search(r"/lib(gomp|iomp5)[^/]*\.so", line)}
    except (OSError, RuntimeError, AttributeError):
        return None
    # torch's own copy first (wheels bundle a renamed libgomp)
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    for path in sorted(libs, key=lambda p: not p.startswith(tdir)):
        try:
            fn = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            return ctypes.cast(fn.GOMP_parallel, ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
    return None


# Parameters to one flat vector in one call into torch's C++ (a Python loop
# of views costs microseconds an operator, as much as the kernels at batch
# 512); the plain loop where this torch has no such helper.
try:
    from torch._utils import _flatten_dense_tensors as _flatten
except ImportError:
    def _flatten(ts):
        return torch.cat([t.detach().reshape(-1) for t in ts])


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(index):
    """The handle of the current stream of CUDA device index (the raw
    pointer straight from torch where it offers it: a Stream object costs
    more than the kernel launch at small batches)."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _on_device(device):
    """torch.cuda.device(device) when it is not the current device already
    (entering that context costs more than the kernel call at batch 1)."""
    if device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


class _Net:
    """One ssae_api_net per model dimensions, shared by the modules of those
    dimensions; calls are serialised. The parameters' values go with every
    call: on the CPU the net compares them with those it holds (_params), on
    CUDA they are one flat vector made on the device for the call, or, for
    the evaluation forward, gathered by the library from where they lie
    (_forward_cuda_parts). Nothing
    is keyed by the tensors or their version counters: changes made through
    .data, or by a CUDA graph's replay, leave no trace there, and a module
    must never compute with values it no longer has."""

    # One net per (dimensions, device): a CUDA net's scratch and inference
    # model live on one device (-1: the CPU's net), so the replicas of a
    # module on several GPUs (DataParallel, a process per GPU) each run on
    # their own device. _armed: dimensions whose next call is to fail (the
    # test hook) where no net of them exists yet.
    _cache = {}
    _cache_lock = threading.Lock()
    _armed = set()

    def __init__(self, dims):
        self.lib = _lib.load()
        self.dims = (ctypes.c_int * 4)(*dims)
        self.win = dims[0] * dims[1]
        self.n_params = self.lib.ssae_api_dims_param_count(self.dims)
        # the parameters' shapes in TENSOR_NAMES' order (the flat gradient
        # back to them: _grads)
        M, Fr, L, S = dims
        self._shapes = [(M,), (M,), (S, M), (S,), (L, Fr * S), (L,), (L,), (L, L), (L,),
                        (M, S), (M,)]
        self._sizes = [a * b for a, b in (sh if len(sh) == 2 else sh + (1,)
                                          for sh in self._shapes)]
        assert sum(self._sizes) == self.n_params
        self._views = [sh if len(sh) == 2 else None for sh in self._shapes]
        err = _lib.errbuf()
        self.h = self.lib.ssae_api_net_new(self.dims, 0, err)
        if not self.h:
            raise KernelError(err.value.decode("utf-8", "replace"))
        self.lock = threading.Lock()
        self._counts = (ctypes.c_size_t * len(self._sizes))(*self._sizes)
        self._ptrs = None  # (the tensors' addresses, their ctypes array)

    @classmethod
    def get(cls, dims, device=-1):
        """The net of these dimensions for tensors of device (a CUDA device
        index, or -1 for the CPU: x.get_device())."""
        with cls._cache_lock:
            net = cls._cache.get((dims, device))
            if net is None:
                net = cls._cache[(dims, device)] = _Net(dims)
            if dims in cls._armed:
                cls._armed.discard(dims)
                net.fail_next()
            return net

    @classmethod
    def fail_next_call(cls, dims):
        """Test hook: the next kernel call on these dimensions fails, on
        whichever device it comes (every net of them armed, or the first
        one made)."""
        with cls._cache_lock:
            nets = [n for (d, _), n in cls._cache.items() if d == dims]
            for n in nets:
                n.fail_next()
            if not nets:
                cls._armed.add(dims)

    def __del__(self):
        h, self.h = getattr(self, "h", None), None
        if h:
            self.lib.ssae_api_net_free(h)

    @property
    def has_cuda(self):
        return self.lib.ssae_has_cuda_tensors

    def _use_team(self):
        """The CPU training calls on torch's OpenMP team (_omp_team), with
        torch's thread count of the moment; under self.lock."""
        team = _omp_team()
        setting = (team, torch.get_num_threads() if team else 0)
        if setting != getattr(self, "_team", None):
            self.lib.ssae_api_net_set_team(self.h, setting[0], setting[1])
            self._team = setting

    def _check(self, rc, err):
        if rc != 0:
            raise KernelError(err.value.decode("utf-8", "replace"))

    def _params(self, params):
        """The net holds these values: ssae_api_net_set_params_parts, which
        does nothing when they are the bits it has (a 3 us comparison at
        the default dimensions), on the tensors where they lie; under
        self.lock."""
        err = _lib.errbuf()
        ptrs = self._part_ptrs(params)
        if ptrs is not None:
            rc = self.lib.ssae_api_net_set_params_parts(self.h, ptrs, self._counts,
                                                        len(self._sizes), err)
        else:  # a tensor not contiguous (its .data replaced by a view)
            flat = torch.cat([p.detach().reshape(-1) for p in params])
            one = (ctypes.c_void_p * 1)(flat.data_ptr())
            rc = self.lib.ssae_api_net_set_params_parts(
                self.h, one, (ctypes.c_size_t * 1)(flat.numel()), 1, err)
        self._check(rc, err)

    def _grads(self, dp):
        """The flat gradient dp as views shaped as the parameters (one split
        into torch's C++ and a view per matrix, the shapes known from the
        dimensions: a quarter less time than unflatten_dense_tensors, which
        asks every parameter its shape)."""
        parts = dp.split_with_sizes(self._sizes)
        return [g if v is None else g.view(v) for g, v in zip(parts, self._views)]

    def forward(self, x, params):
        """y = f(x): float64 inside on the CPU; on CUDA the net's forward
        (for the default dimensions the inference kernels, their folded
        weights made again on the device only when the parameters' bits
        changed)."""
        if x.is_cuda:
            return self._forward_cuda(x, params)
        y = torch.empty_like(x)
        err = _lib.errbuf()
        with self.lock:
            self._params(params)
            rc = self.lib.ssae_api_net_forward(self.h, _lib.fptr(x.data_ptr()), x.shape[0],
                                               _lib.fptr(y.data_ptr()), err)
        self._check(rc, err)
        return y

    def _take_act(self, n_act):
        """A buffer for n_act floats of activations: the one the last
        backward gave back when it is large enough (a fresh allocation of
        this size would be new pages to fault in at every step)."""
        buf, self._act_free = getattr(self, "_act_free", None), None
        if buf is None or buf.numel() < n_act:
            buf = torch.empty(n_act, dtype=torch.float32)
        return buf[:n_act]

    def give_back_act(self, act):
        """The backward is done with act: its buffer serves the next
        training forward (the larger one is kept)."""
        base = act._base if act._base is not None else act
        cur = getattr(self, "_act_free", None)
        if cur is None or cur.numel() < base.numel():
            self._act_free = base

    def forward_train(self, x, params):
        """(y, activations for backward, or None where the backward is to
        recompute them): the CPU training forward."""
        n = x.shape[0]
        y = torch.empty_like(x)
        err = _lib.errbuf()
        with self.lock:
            self._params(params)
            self._use_team()
            n_act = self.lib.ssae_api_net_act_floats(self.h, n)
            if n_act * 4 > KEEP_ACTIVATIONS_BYTES:
                act, n_act, ap = None, 0, None
            else:
                act = self._take_act(n_act)
                ap = _lib.fptr(act.data_ptr())
            rc = self.lib.ssae_api_net_forward_train(
                self.h, _lib.fptr(x.data_ptr()), n, _lib.fptr(y.data_ptr()), ap, n_act, err)
        self._check(rc, err)
        return y, act

    def backward(self, x, dy, params, want_dx, act=None):
        """(dx or None, parameter gradients) for the upstream gradient dy;
        act: what forward_train kept (CPU), else the forward runs again
        (inside the kernels on CUDA; act: the flat parameters the forward
        used, when given)."""
        if x.is_cuda:
            return self._backward_cuda(x, dy, params, want_dx, act)
        dx, dp = self._backward_flat(x, dy, params, want_dx, act)
        return dx, self._grads(dp)

    def _backward_flat(self, x, dy, params, want_dx, act):
        """The CPU backward: (dx or None, the flat parameter gradient)."""
        dp = torch.empty(self.n_params, dtype=torch.float32)
        dx = torch.empty_like(x) if want_dx else None
        dxp = _lib.fptr(dx.data_ptr()) if want_dx else None
        err = _lib.errbuf()
        with self.lock:
            self._params(params)
            self._use_team()
            if act is not None:
                rc = self.lib.ssae_api_net_backward_saved(
                    self.h, _lib.fptr(act.data_ptr()), act.numel(), x.shape[0],
                    _lib.fptr(dy.data_ptr()), _lib.fptr(dp.data_ptr()), dxp, err)
                self.give_back_act(act)
            else:
                rc = self.lib.ssae_api_net_backward(
                    self.h, _lib.fptr(x.data_ptr()), x.shape[0], _lib.fptr(dy.data_ptr()),
                    _lib.fptr(dp.data_ptr()), dxp, err)
        self._check(rc, err)
        return dx, dp

    def loss(self, x, params):
        """(the mean squared reconstruction error of x over every value, as
        a 0-dim tensor on x's device; its flat parameter gradient), x taken
        as a constant. CUDA: one library call (ssae_api_net_loss_cuda, the
        trainer's own step); CPU: one library call too (ssae_api_net_loss:
        each chunk's forward, squared errors and backward in one pass)."""
        if x.is_cuda:
            return self._loss_cuda(x, params)
        dp = torch.empty(self.n_params, dtype=torch.float32)
        loss = ctypes.c_double()
        err = _lib.errbuf()
        with self.lock:
            self._params(params)
            self._use_team()
            rc = self.lib.ssae_api_net_loss(self.h, _lib.fptr(x.data_ptr()), x.shape[0],
                                            ctypes.byref(loss), _lib.fptr(dp.data_ptr()), err)
        self._check(rc, err)
        return torch.tensor(loss.value, dtype=torch.float32), dp

    # CUDA: the parameters as one flat vector on the device, every call (the
    # optimiser changes them in place); all work queued on the current
    # stream of the input's device, where torch also queues what comes
    # before (producers) and after (consumers); temporaries are freed into
    # that stream's pool, so their reuse waits for these kernels.

    def _flat_cuda(self, params):
        """The parameters as one vector on their device, made on the current
        stream for this call (one kernel)."""
        with torch.no_grad():
            return _flatten(params)

    def _part_ptrs(self, params):
        """The parameters' addresses as a ctypes array (the one of the last
        call when they are the same), or None when one is not contiguous;
        under self.lock."""
        addrs = tuple(p.data_ptr() if p.is_contiguous() else -1 for p in params)
        if -1 in addrs:
            return None
        if self._ptrs is None or self._ptrs[0] != addrs:
            self._ptrs = (addrs, (ctypes.c_void_p * len(addrs))(*addrs))
        return self._ptrs[1]

    def _forward_cuda(self, x, params, flat=None):
        """y on the trainer's kernel, from the parameters' flat vector (made
        here when not given), or, without one, from the parameters where
        they lie (ssae_api_net_forward_cuda_parts: the library gathers
        them; no concatenation)."""
        if flat is None and self.lib.ssae_has_cuda_parts:
            y = self._forward_cuda_parts(x, params)
            if y is not None:
                return y
        with _on_device(x.device):
            stream = _stream(x.get_device())
            y = torch.empty_like(x)
            err = _lib.errbuf()
            with self.lock:
                if flat is None:
                    flat = self._flat_cuda(params)
                rc = self.lib.ssae_api_net_forward_cuda(self.h, flat.data_ptr(), x.data_ptr(),
                                                        x.shape[0], y.data_ptr(), stream or None,
                                                        err)
        self._check(rc, err)
        return y

    def _forward_cuda_parts(self, x, params):
        """y from the parameters where they lie; None when one of them is
        not contiguous (the caller then makes the flat vector)."""
        with _on_device(x.device):
            stream = _stream(x.get_device())
            y = torch.empty_like(x)
            err = _lib.errbuf()
            with self.lock:
                ptrs = self._part_ptrs(params)
                if ptrs is None:
                    return None
                rc = self.lib.ssae_api_net_forward_cuda_parts(
                    self.h, ptrs, self._counts, len(self._sizes), x.data_ptr(), x.shape[0],
                    y.data_ptr(), stream or None, err)
        self._check(rc, err)
        return y

    def _backward_cuda(self, x, dy, params, want_dx, flat=None):
        """(dx or None, parameter gradients) on the trainer's kernels, from
        the flat vector the forward used when given."""
        with _on_device(x.device):
            stream = _stream(x.get_device())
            dp = torch.empty(self.n_params, dtype=torch.float32, device=x.device)
            dx = torch.empty_like(x) if want_dx else None
            err = _lib.errbuf()
            with self.lock:
                if flat is None:
                    flat = self._flat_cuda(params)
                rc = self.lib.ssae_api_net_backward_cuda(
                    self.h, flat.data_ptr(), x.data_ptr(), x.shape[0], dy.data_ptr(),
                    dp.data_ptr(), dx.data_ptr() if want_dx else None, stream or None, err)
        self._check(rc, err)
        return dx, self._grads(dp)

    def _loss_cuda(self, x, params):
        with _on_device(x.device):
            stream = _stream(x.get_device())
            dp = torch.empty(self.n_params, dtype=torch.float32, device=x.device)
            loss = torch.empty((), dtype=torch.float32, device=x.device)
            err = _lib.errbuf()
            with self.lock:
                flat = self._flat_cuda(params)
                rc = self.lib.ssae_api_net_loss_cuda(self.h, flat.data_ptr(), x.data_ptr(),
                                                     x.shape[0], loss.data_ptr(),
                                                     dp.data_ptr(), stream or None, err)
        self._check(rc, err)
        return loss, dp

    def forward_train_cuda(self, x, params):
        """(y, the flat parameter vector it was computed with: the backward's,
        so that one concatenation serves the step); under no_grad."""
        flat = _flatten(params)
        return self._forward_cuda(x, params, flat), flat

    def fail_next(self):
        self.lib.ssae_api_net_fail_next(self.h)
