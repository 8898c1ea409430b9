"""ssae.torch: the SPEC's SpectralShapeAutoencoder as a drop-in nn.Module
whose forward and backward run on libssae's kernels.

    from ssae.torch import SpectralShapeAutoencoder
    model = SpectralShapeAutoencoder()             # same constructor as the SPEC module
    model = SpectralShapeAutoencoder.from_file("model.safetensors")
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss = torch.nn.functional.mse_loss(model(x), x); loss.backward(); opt.step()
    model.save("trained.safetensors")

Parameter names, shapes and state_dict are the SPEC module's (section 2),
so state_dicts load either way. Where the forward runs:
- CPU tensors, no gradient wanted (eval, torch.no_grad): ssae's CPU
  forward (float64 inside, SPEC accuracy);
- CPU tensors in training: a torch.autograd.Function whose forward runs the
  trainer's kernels and keeps their activations, and whose backward
  (ssae's vector-Jacobian kernels) starts from them instead of running the
  forward again; it gives the gradients of every parameter and, when it
  requires them, of the input;
- CUDA tensors in training: the CUDA trainer's fused kernels on the
  tensors' own memory and the parameters where they lie, on the current
  stream, with the input gradient and per-block parameter partials summed
  in a fixed order (libssae's device-pointer entry points);
- CUDA tensors, no gradient wanted: the same kernel the first time a set
  of parameters comes, then (the same parameters again: an evaluation
  loop) the inference kernels of ssae.Model on a model made from them,
  in place on the current stream.

reconstruction_loss(x) is mse_loss(model(x), x) with the forward, the
loss and the backward fused into one pass (the trainer's step): the same
loss and gradients, the fastest way to train the module.

Plain PyTorch (the SPEC module's own operations) runs instead, with one
RuntimeWarning:
- when libssae cannot be loaded (per process);
- when a kernel fails (per module; the module then stays on PyTorch);
- for CUDA tensors while the library lacks its device-pointer entry points
  (per process).
Dtypes other than float32 run plain PyTorch without a warning (the kernels
are float32). With torch >= 2.4 the kernel is also registered as the custom
op ssae::autoencoder with a fake (meta) implementation, used while
torch.compile traces the module, so that the compiled graph keeps it (its
backward runs the forward again: the activations stay inside the op).
"""
import contextlib
import os
import re
import threading
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _lib

# Loaded now, outside any compiled region (torch.compile traces forward,
# which asks whether the library is there).
_lib.available()

__all__ = ["SpectralShapeAutoencoder", "TENSOR_NAMES"]

TENSOR_NAMES = [
    "slice_encoder.0.weight", "slice_encoder.0.bias",
    "slice_encoder.1.weight", "slice_encoder.1.bias",
    "global_basis",
    "bottleneck_mlp.0.weight", "bottleneck_mlp.0.bias",
    "bottleneck_mlp.1.weight", "bottleneck_mlp.1.bias",
    "slice_decoder.0.weight", "slice_decoder.0.bias",
]

_warned = set()
_warn_lock = threading.Lock()


def _warn_once(key, msg):
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(msg, RuntimeWarning, stacklevel=4)


class KernelError(RuntimeError):
    """A libssae kernel call failed."""


class _ParamKey:
    """Which parameter values a net holds: the tensors themselves (kept
    alive, so that no other tensor can take their memory and match), their
    storage and their version counters (bumped by every in-place change,
    the optimiser's included)."""

    __slots__ = ("tensors", "state")

    def __init__(self, params):
        self.tensors = list(params)
        self.state = tuple((p.data_ptr(), p._version) for p in params)

    def __eq__(self, other):
        return (isinstance(other, _ParamKey) and self.state == other.state and
                len(self.tensors) == len(other.tensors) and
                all(a is b for a, b in zip(self.tensors, other.tensors)))


# The CPU training forward keeps the activations for the backward up to
# this size (about 4,800 windows at the default dimensions, 7 KB each);
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
    import ctypes
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
    dimensions; calls are serialised. On the CPU it keeps the parameters it
    was last given and the key (_ParamKey) they came from; on CUDA the
    parameters go with every call, as a flat vector kept by the same key."""

    # One net per (dimensions, device): a CUDA net's scratch and inference
    # model live on one device (-1: the CPU's net), so the replicas of a
    # module on several GPUs (DataParallel, a process per GPU) each run on
    # their own device. _armed: dimensions whose next call is to fail (the
    # test hook) where no net of them exists yet.
    _cache = {}
    _cache_lock = threading.Lock()
    _armed = set()

    def __init__(self, dims):
        import ctypes
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
        self.key = None
        # The evaluation forward on CUDA through the inference kernels: a
        # model made from the parameters (_infer: key, device, handle), made
        # once the same parameters come a second time in a row (_seen);
        # _infer_off: why it cannot be (the training kernel then serves).
        self._infer = None
        self._seen = None
        self._infer_off = None
        self._fail_armed = False

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
        inf, self._infer = getattr(self, "_infer", None), None
        if inf is not None:
            self.lib.ssae_api_model_free(inf[2])

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
        self._fail_armed = False  # every net call consumes the test hook
        if rc != 0:
            raise KernelError(err.value.decode("utf-8", "replace"))

    def _params(self, params):
        key = _ParamKey(params)
        if key == self.key:
            return
        flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
        err = _lib.errbuf()
        self.key = None
        self._check(self.lib.ssae_api_net_set_params(self.h, _lib.fptr(flat.data_ptr()),
                                                     flat.numel(), err), err)
        self.key = key

    def _grads(self, dp):
        """The flat gradient dp as views shaped as the parameters (one split
        into torch's C++ and a view per matrix, the shapes known from the
        dimensions: a quarter less time than unflatten_dense_tensors, which
        asks every parameter its shape)."""
        parts = dp.split_with_sizes(self._sizes)
        return [g if v is None else g.view(v) for g, v in zip(parts, self._views)]

    def forward(self, x, params, infer=True):
        """y = f(x): float64 inside on the CPU; on CUDA the inference
        kernels once the same parameters come again (infer), else the
        trainer's kernel."""
        if x.is_cuda:
            y = self._infer_cuda(x, params) if infer else None
            return y if y is not None else self._forward_cuda(x, params)
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
        trainer's own step); CPU: the training forward keeping its
        activations, the error's gradient, the backward from them."""
        if x.is_cuda:
            return self._loss_cuda(x, params)
        y, act = self.forward_train(x, params)
        d = y.sub_(x)
        loss = d.pow(2).mean()
        dy = d.mul_(2.0 / d.numel())
        _, dp = self._backward_flat(x, dy, params, False, act)
        return loss, dp

    # CUDA: the parameters as one flat vector on the device, every call (the
    # optimiser changes them in place); all work queued on the current
    # stream of the input's device, where torch also queues what comes
    # before (producers) and after (consumers); temporaries are freed into
    # that stream's pool, so their reuse waits for these kernels.

    def _flat_cuda(self, params, stream):
        """The parameters as one vector on their device: made on stream,
        kept while the parameters (storage, version) and the stream stay
        the same (an evaluation loop then queues no copy per call)."""
        key = (stream, _ParamKey(params))
        cached = getattr(self, "_cuda_flat", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        with torch.no_grad():
            flat = _flatten(params)
        self._cuda_flat = (key, flat)
        return flat

    def _infer_model(self, x, params):
        """The inference model for these parameters on x's device, or None
        (first sight of them, or the inference path is off)."""
        if self._infer_off is not None:
            return None
        key, dev = _ParamKey(params), x.get_device()
        inf = self._infer
        if inf is not None and inf[0] == key and inf[1] == dev:
            return inf[2]
        if self._seen != key:
            # Parameters that change at every call (a no_grad forward inside
            # a training loop) would make a model per call: wait for them to
            # come twice.
            self._seen = key
            return None
        flat = torch.cat([p.detach().reshape(-1) for p in params]).cpu()
        err = _lib.errbuf()
        with _on_device(x.device):
            h = self.lib.ssae_api_model_from_params(self.dims, _lib.fptr(flat.data_ptr()),
                                                    flat.numel(), b"cuda", err)
        if not h:
            self._infer_off = err.value.decode("utf-8", "replace")
            return None
        if inf is not None:
            self.lib.ssae_api_model_free(inf[2])
        self._infer = (key, dev, h)
        return h

    def _infer_cuda(self, x, params):
        """y from the inference kernels (ssae's kernel table, as
        ssae.Model.reconstruct on CUDA tensors), on the current stream; None
        when they cannot serve this call."""
        if x.data_ptr() % 16 or self._fail_armed:
            return None  # an armed test hook is the trainer kernel's to fire
        with self.lock:
            h = self._infer_model(x, params)
            if h is None:
                return None
            n = x.shape[0]
            with _on_device(x.device):
                stream = _stream(x.get_device())
                scores = torch.empty(n, dtype=torch.float32, device=x.device)
                y = torch.empty_like(x)
                err = _lib.errbuf()
                rc = self.lib.ssae_api_model_score_cuda(h, x.data_ptr(), n, scores.data_ptr(),
                                                        y.data_ptr(), stream or None, err)
            if rc != 0:
                # Another device than the model's, or the device failed (the
                # model fell back to the CPU): the trainer's kernel serves,
                # and reports its own failures.
                self._infer_off = err.value.decode("utf-8", "replace")
                return None
        return y

    def _forward_cuda(self, x, params, flat=None):
        """y on the trainer's kernel, from the parameters' flat vector (made
        here when not given)."""
        with _on_device(x.device):
            stream = _stream(x.get_device())
            y = torch.empty_like(x)
            err = _lib.errbuf()
            with self.lock:
                if flat is None:
                    flat = self._flat_cuda(params, stream)
                rc = self.lib.ssae_api_net_forward_cuda(self.h, flat.data_ptr(), x.data_ptr(),
                                                        x.shape[0], y.data_ptr(), stream or None,
                                                        err)
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
                    flat = self._flat_cuda(params, stream)
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
                flat = self._flat_cuda(params, stream)
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
        self._fail_armed = True
        self.lib.ssae_api_net_fail_next(self.h)


def reference_forward(x, params, dims):
    """The SPEC module's forward in plain PyTorch, from the flat list of
    parameter tensors (state_dict order): the fallback, and what the
    kernels are checked against."""
    n_mels, frames, latent, slice_latent = dims
    ln1w, ln1b, ew, eb, gb, ln2w, ln2b, bw, bb, dw, db = params
    s = F.gelu(F.linear(F.layer_norm(x.view(-1, frames, n_mels), (n_mels,), ln1w, ln1b), ew, eb))
    s = s.reshape(-1, frames * slice_latent)
    nb = F.normalize(gb, p=2, dim=1)
    z = F.gelu(F.linear(F.layer_norm(s @ nb.T, (latent,), ln2w, ln2b), bw, bb))
    r = (z @ nb).view(-1, frames, slice_latent)
    return F.linear(r, dw, db).reshape(-1, frames * n_mels)


class _Fallback(Exception):
    pass


def _backward(net, x, dy, params, want_dx, dims, on_failure, act=None):
    """(dx, parameter gradients) from ssae's backward (from the kept
    activations act when given); when it fails, on_failure(error) and the
    same from PyTorch autograd on the reference forward."""
    dy = dy.contiguous()
    try:
        if net is None:
            raise KernelError(_lib._load_error or "libssae not loaded")
        return net.backward(x, dy, params, want_dx, act)
    except KernelError as e:
        on_failure(e)
    with torch.enable_grad():
        xs = x.detach().requires_grad_(want_dx)
        ps = [p.detach().requires_grad_(True) for p in params]
        y = reference_forward(xs, ps, dims)
        out = torch.autograd.grad(y, ([xs] if want_dx else []) + ps, dy)
    return (out[0] if want_dx else None), list(out[1:] if want_dx else out)


class _Autoencoder(torch.autograd.Function):
    """y = f(x; params) on ssae's kernels (x: (n, F*M) float32, CPU or
    CUDA), for training: on the CPU the forward keeps its activations for
    the backward; on CUDA the backward gets the forward's flat parameter
    vector (and recomputes the activations inside its kernel)."""

    @staticmethod
    def forward(ctx, x, net, owner, *params):
        if x.is_cuda:
            y, act = net.forward_train_cuda(x, params)
        else:
            y, act = net.forward_train(x, params)
        ctx.net, ctx.owner, ctx.act = net, owner, act
        ctx.save_for_backward(x, *params)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, *params = ctx.saved_tensors
        act, ctx.act = ctx.act, None  # a second backward through the graph recomputes
        dx, grads = _backward(ctx.net, x, dy, params, ctx.needs_input_grad[0],
                              ctx.owner._dims(), ctx.owner._kernel_failed, act)
        return (dx, None, None, *grads)


class _ReconLoss(torch.autograd.Function):
    """mse_loss(f(x; params), x) with its parameter gradients computed in
    the same pass (x a constant): the backward only scales them by the
    loss's upstream gradient."""

    @staticmethod
    def forward(ctx, x, net, *params):
        loss, dp = net.loss(x, params)
        ctx.net = net
        ctx.save_for_backward(dp)
        return loss

    @staticmethod
    def backward(ctx, g):
        dp, = ctx.saved_tensors
        return (None, None, *ctx.net._grads(dp * g))


def _custom_op_available():
    lib = getattr(torch, "library", None)
    return lib is not None and hasattr(lib, "custom_op") and hasattr(lib, "register_fake")


def _compiling():
    """True while torch.compile (dynamo) traces the caller."""
    c = getattr(torch, "compiler", None)
    f = getattr(c, "is_compiling", None)
    return bool(f()) if f is not None else False


def _op_net(dims, x):
    """The net for the custom op on x's device, or None (with one warning)
    when libssae is absent: the op then computes in plain PyTorch."""
    try:
        return _Net.get(dims, x.get_device())
    except (_lib.LibraryNotFound, KernelError) as e:
        _warn_once(("kernel-op", dims), "ssae kernel unavailable (%s); ssae::autoencoder "
                   "runs on plain PyTorch" % e)
        return None


_op = None
if _custom_op_available():
    # torch >= 2.4: ssae::autoencoder keeps the kernel in torch.compile
    # graphs (the fake implementation gives the output's shape); the
    # kernel handle is found again from the dimensions. A compiled graph
    # cannot fall back around the op, so the op itself does: any kernel
    # failure gives the plain PyTorch result (one warning per dimensions).
    from typing import List, Tuple

    @torch.library.custom_op("ssae::autoencoder", mutates_args=())
    def _op(x: torch.Tensor, params: List[torch.Tensor], dims: List[int]) -> torch.Tensor:
        net = _op_net(tuple(dims), x)
        if net is not None and (not x.is_cuda or net.has_cuda):
            try:
                return net.forward(x, params)
            except KernelError as e:
                _warn_once(("kernel-op", tuple(dims)), "ssae kernel failed (%s); "
                           "ssae::autoencoder runs on plain PyTorch" % e)
        with torch.no_grad():
            return reference_forward(x, params, tuple(dims))

    @_op.register_fake
    def _op_fake(x, params, dims):
        return torch.empty_like(x)

    # The backward is an op of its own: register_autograd's formula is
    # traced (torch.compile, opcheck) and may hold only PyTorch operations
    # and custom ops, not a call into libssae. It returns the input
    # gradient and the parameter gradients as one flat vector.
    @torch.library.custom_op("ssae::autoencoder_backward", mutates_args=())
    def _op_bwd(x: torch.Tensor, dy: torch.Tensor, params: List[torch.Tensor],
                dims: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        dims = tuple(dims)
        net = _op_net(dims, x)
        if net is not None and x.is_cuda and not net.has_cuda:
            net = None
        dx, grads = _backward(
            net, x, dy, params, True, dims,
            lambda e: _warn_once(("kernel-op", dims), "ssae backward kernel failed (%s); "
                                 "this step's gradients come from PyTorch" % e))
        return dx, torch.cat([g.reshape(-1) for g in grads])

    @_op_bwd.register_fake
    def _op_bwd_fake(x, dy, params, dims):
        return torch.empty_like(x), x.new_empty(sum(p.numel() for p in params))

    def _op_setup(ctx, inputs, output):
        x, params, dims = inputs
        ctx.save_for_backward(x, *params)
        ctx.dims = list(dims)

    def _op_backward(ctx, dy):
        x, *params = ctx.saved_tensors
        dx, dp = _op_bwd(x, dy.contiguous(), params, ctx.dims)
        grads, o = [], 0
        for p in params:
            grads.append(dp[o:o + p.numel()].view_as(p))
            o += p.numel()
        return (dx if ctx.needs_input_grad[0] else None), grads, None

    _op.register_autograd(_op_backward, setup_context=_op_setup)


class SpectralShapeAutoencoder(nn.Module):
    """The SPEC section 2 module on ssae's kernels (see the module's doc)."""

    def __init__(self, n_mels=64, frames=5, latent_dim=32, slice_latent_dim=64):
        super().__init__()
        self.n_mels, self.frames, self.slice_latent_dim = n_mels, frames, slice_latent_dim
        self.latent_dim = latent_dim
        self.combined_dim = frames * slice_latent_dim
        self.slice_encoder = nn.Sequential(nn.LayerNorm(n_mels), nn.Linear(n_mels, slice_latent_dim),
                                           nn.GELU())
        self.global_basis = nn.Parameter(torch.empty(latent_dim, self.combined_dim))
        nn.init.xavier_uniform_(self.global_basis)
        self.bottleneck_mlp = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, latent_dim),
                                            nn.GELU())
        self.slice_decoder = nn.Sequential(nn.Linear(slice_latent_dim, n_mels))
        # Model file metadata (features, threshold, provenance) kept by
        # from_file for save; not part of the state_dict.
        self.ssae_metadata = {}
        self._kernel_off = None  # why this module runs plain PyTorch, once it does

    def _dims(self):
        return (self.n_mels, self.frames, self.latent_dim, self.slice_latent_dim)

    def _params(self):
        if _compiling():  # what dynamo traces best
            sd = dict(self.named_parameters())
            return [sd[n] for n in TENSOR_NAMES]
        # TENSOR_NAMES' order, by attribute (named_parameters would cost a
        # walk of the module tree per call)
        se, bm, sd = (self.slice_encoder._modules, self.bottleneck_mlp._modules,
                      self.slice_decoder._modules)
        e_ln, e_lin, b_ln, b_lin, d_lin = se["0"], se["1"], bm["0"], bm["1"], sd["0"]
        return [e_ln.weight, e_ln.bias, e_lin.weight, e_lin.bias, self.global_basis,
                b_ln.weight, b_ln.bias, b_lin.weight, b_lin.bias, d_lin.weight, d_lin.bias]

    def _kernel_failed(self, e):
        if self._kernel_off is None:
            warnings.warn("ssae kernel failed (%s); this module runs on plain PyTorch from "
                          "now on" % e, RuntimeWarning, stacklevel=3)
        self._kernel_off = str(e)

    def _check_input(self, x, params):
        if not isinstance(x, torch.Tensor):
            raise TypeError("input: expected a torch tensor, got %s" % type(x).__name__)
        p0 = params[0]
        if x.device != p0.device:
            raise ValueError("input on %s, parameters on %s: move one (module.to(%s) or "
                             "x.to(%s))" % (x.device, p0.device, x.device, p0.device))
        if x.dtype != p0.dtype:
            raise TypeError("input dtype %s, parameters %s" % (x.dtype, p0.dtype))
        win = self.frames * self.n_mels
        if x.numel() % win or (x.dim() >= 1 and x.shape[-1] not in (win, self.n_mels)):
            raise ValueError("input shape %s: expected (n, %d) or (n, %d, %d)"
                             % (tuple(x.shape), win, self.frames, self.n_mels))
        if not x.is_contiguous():
            raise ValueError("input is not contiguous (strides %s); pass x.contiguous()"
                             % (tuple(x.stride()),))

    def _use_kernel(self, x, params):
        if self._kernel_off is not None or x.dtype != torch.float32:
            return False
        if any(p.dtype != torch.float32 or p.device != x.device for p in params):
            return False
        if x.device.type not in ("cpu", "cuda"):
            return False
        if not _lib.available():
            _warn_once("lib", "%s; SpectralShapeAutoencoder runs on plain PyTorch"
                       % _lib._load_error)
            return False
        if x.device.type == "cuda" and not _lib.load().ssae_has_cuda_tensors:
            _warn_once("cuda", "this libssae has no CUDA tensor entry points: "
                       "SpectralShapeAutoencoder runs on plain PyTorch for cuda tensors")
            return False
        return True

    def forward(self, x):
        params = self._params()
        self._check_input(x, params)
        x2 = x.reshape(-1, self.frames * self.n_mels)
        if _op is not None and _compiling():
            # traced: the op (which falls back by itself) stays in the graph
            if self._kernel_off is None and x.dtype == torch.float32:
                return _op(x2, params, list(self._dims()))
            return reference_forward(x2, params, self._dims())
        if self._use_kernel(x, params):
            try:
                net = _Net.get(self._dims(), x.get_device())
                if torch.is_grad_enabled() and (x.requires_grad or
                                                any(p.requires_grad for p in params)):
                    return _Autoencoder.apply(x2, net, self, *params)
                return net.forward(x2, params)
            except KernelError as e:
                self._kernel_failed(e)
        return reference_forward(x2, params, self._dims())

    def reconstruction_loss(self, x):
        """torch.nn.functional.mse_loss(self(x), x), the loss an autoencoder
        trains on (`ssae train`'s), in one pass of ssae's kernels when
        parameters want gradients: the forward, the squared error and the
        backward together (on CUDA one library call; no reconstruction
        written, no loss graph for autograd to walk), so that

            loss = model.reconstruction_loss(x); loss.backward()

        gives the same loss and parameter gradients as the plain module's
        step, in less time. Otherwise (no gradient wanted, x wanting its
        own gradient, torch.compile tracing, an empty batch, plain
        PyTorch after a fallback) it is exactly mse_loss(self(x), x).
        Forward hooks do not see the fused pass."""
        params = self._params()
        self._check_input(x, params)
        x2 = x.reshape(-1, self.frames * self.n_mels)
        if (x2.shape[0] and not x.requires_grad and torch.is_grad_enabled() and
                not _compiling() and any(p.requires_grad for p in params) and
                self._use_kernel(x, params) and
                (not x.is_cuda or _lib.load().ssae_has_cuda_loss)):
            try:
                return _ReconLoss.apply(x2, _Net.get(self._dims(), x.get_device()), *params)
            except KernelError as e:
                self._kernel_failed(e)
        return F.mse_loss(self(x2), x2)

    def fail_next(self):
        """Test hook: the next kernel call (forward or backward) fails; the
        module falls back to plain PyTorch (one warning)."""
        _Net.fail_next_call(self._dims())

    @property
    def uses_kernel(self):
        """False once this module has fallen back to plain PyTorch."""
        return self._kernel_off is None and _lib.available()

    # ---- model files -------------------------------------------------------

    @classmethod
    def from_file(cls, path):
        """Loads an ssae model file (validated by libssae) into a new module
        (float32, CPU, eval mode); its metadata lands in ssae_metadata."""
        from . import Model
        m = Model(path, backend="cpu")
        try:
            mod = cls(m.n_mels, m.frames, m.latent_dim, m.slice_latent_dim)
            flat = m.params(like=torch.empty(0))
            meta = m.metadata_all()
        finally:
            m.close()
        with torch.no_grad():
            o = 0
            for p in mod._params():
                p.copy_(flat[o:o + p.numel()].view_as(p))
                o += p.numel()
        mod.ssae_metadata = meta
        return mod.eval()

    def save(self, path, metadata=None):
        """Writes an ssae model file: the parameters (float32) and metadata
        (ssae_metadata updated by metadata: feature settings, threshold,
        provenance; dimensions come from the module)."""
        lib = _lib.load()
        import ctypes
        meta = dict(self.ssae_metadata)
        meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
        for k in ("n_mels", "frames", "latent_dim", "slice_latent_dim"):
            meta.pop(k, None)
        for k, v in meta.items():
            if "\n" in k or "=" in k or "\n" in v:
                raise ValueError("metadata %r: keys hold no '=' or newline, values no newline"
                                 % k)
        flat = torch.cat([p.detach().to("cpu", torch.float32).reshape(-1)
                          for p in self._params()]).contiguous()
        dims = (ctypes.c_int * 4)(*self._dims())
        text = "\n".join("%s=%s" % kv for kv in meta.items())
        err = _lib.errbuf()
        rc = lib.ssae_api_save(str(path).encode(), dims, _lib.fptr(flat.data_ptr()),
                               flat.numel(), text.encode(), err)
        if rc != 0:
            msg = err.value.decode("utf-8", "replace")
            raise OSError(msg) if rc == _lib.EIO else ValueError(msg)
