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
- CUDA tensors, no gradient wanted: ssae.Model's inference kernels
  (small_batch up to 1,024 windows, warp_3xtf32 above: fp32 accuracy) in
  place on the current stream, their folded weights made on the device
  from the parameters' current values, again only when their bits
  changed.

The parameters' values are read at every call (on the CPU compared with
those the kernels hold, 3 us): a change made in place through .data, which
PyTorch's version counters do not see, or by a CUDA graph's replay, is used
at the next call.

reconstruction_loss(x) is mse_loss(model(x), x) with the forward, the
loss and the backward fused into one pass (the trainer's step): the same
loss and gradients, the fastest way to train the module.
ReconstructionLoss(model) is that loss as a module of its own, for wrappers
that run a module's forward: DistributedDataParallel(ReconstructionLoss(model))
averages the fused pass's gradients over the processes.

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
import threading
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _lib

# Loaded now, outside any compiled region (torch.compile traces forward,
# which asks whether the library is there).
_lib.available()

__all__ = ["SpectralShapeAutoencoder", "ReconstructionLoss", "TENSOR_NAMES"]

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


def _distributed_processes():
    """The processes of torch.distributed's default group, 1 without one."""
    d = getattr(torch, "distributed", None)
    try:
        if d is not None and d.is_available() and d.is_initialized():
            return d.get_world_size()
    except (RuntimeError, ValueError):
        pass
    return 1


from ._torch_net import KernelError, _Net


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
        # TENSOR_NAMES' order from the modules' own dictionaries: a tenth of
        # the time of attribute lookups through nn.Module.__getattr__ (5 us a
        # call), and named_parameters would walk the module tree
        m = self._modules
        se, bm, sd = (m["slice_encoder"]._modules, m["bottleneck_mlp"]._modules,
                      m["slice_decoder"]._modules)
        e_ln, e_lin, b_ln, b_lin, d_lin = se["0"], se["1"], bm["0"], bm["1"], sd["0"]
        try:
            a, b, c, d, e = (e_ln._parameters, e_lin._parameters, b_ln._parameters,
                             b_lin._parameters, d_lin._parameters)
            return [a["weight"], a["bias"], b["weight"], b["bias"],
                    self._parameters["global_basis"], c["weight"], c["bias"], d["weight"],
                    d["bias"], e["weight"], e["bias"]]
        except KeyError:  # a parametrized tensor (torch.nn.utils.parametrize): computed
            return [e_ln.weight, e_ln.bias, e_lin.weight, e_lin.bias, self.global_basis,
                    b_ln.weight, b_ln.bias, b_lin.weight, b_lin.bias, d_lin.weight,
                    d_lin.bias]

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
        f32 = torch.float32
        if self._kernel_off is not None or x.dtype is not f32:
            return False
        dev = x.device
        for p in params:
            if p.dtype is not f32 or p.device != dev:
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
        backward together (one library call on CUDA and on the CPU; no
        reconstruction written, no forward run again, no loss graph for
        autograd to walk), so that

            loss = model.reconstruction_loss(x); loss.backward()

        gives the same loss and parameter gradients as the plain module's
        step, in less time. Otherwise (no gradient wanted, x wanting its
        own gradient, torch.compile tracing, an empty batch, plain
        PyTorch after a fallback) it is exactly mse_loss(self(x), x).
        Forward hooks do not see the fused pass."""
        params = self._params()
        self._check_input(x, params)
        x2 = x.reshape(-1, self.frames * self.n_mels)
        if self._fuses_loss(x, x2, params):
            try:
                return _ReconLoss.apply(x2, _Net.get(self._dims(), x.get_device()), *params)
            except KernelError as e:
                self._kernel_failed(e)
        return F.mse_loss(self(x2), x2)

    def reconstruction_backward(self, x):
        """The same as

            loss = model.reconstruction_loss(x); loss.backward(); loss = loss.detach()

        (the same loss, the same gradients added into each parameter's
        .grad, bit for bit) without autograd: the fused pass's parameter
        gradients go straight into .grad (set where it is None, added
        where it is not, as backward does). At small batches autograd's
        engine is most of a fused step (about 200 us of 380 at 512 windows
        on an H100 host); this skips it. Returns the loss, detached.
        Autograd's hooks on parameters do not run, and DistributedDataParallel
        averages gradients in them: with a torch.distributed group of more
        than one process this says so once (RuntimeWarning); train there
        through DistributedDataParallel(ReconstructionLoss(model)). Where
        the pass cannot fuse (as reconstruction_loss) it runs the three
        statements above."""
        nproc = _distributed_processes()
        if nproc > 1:
            _warn_once("distributed", "reconstruction_backward puts gradients into .grad "
                       "without autograd: DistributedDataParallel does not average them over "
                       "the %d processes of the torch.distributed group (each process keeps "
                       "its own); train through DistributedDataParallel("
                       "ssae.torch.ReconstructionLoss(model)) instead" % nproc)
        params = self._params()
        self._check_input(x, params)
        x2 = x.reshape(-1, self.frames * self.n_mels)
        if self._fuses_loss(x, x2, params):
            net = _Net.get(self._dims(), x.get_device())
            try:
                loss, dp = net.loss(x2, params)
            except KernelError as e:
                self._kernel_failed(e)
            else:
                with torch.no_grad():
                    for p, g in zip(params, net._grads(dp)):
                        if not p.requires_grad:
                            continue
                        if p.grad is None:
                            p.grad = g
                        else:
                            p.grad.add_(g)
                return loss
        loss = F.mse_loss(self(x2), x2)
        loss.backward()
        return loss.detach()

    def _fuses_loss(self, x, x2, params):
        """Whether the reconstruction loss of x runs as one fused pass: a
        batch, gradients wanted for parameters and not for x, not traced,
        on a kernel that has it."""
        return (x2.shape[0] and not x.requires_grad and torch.is_grad_enabled() and
                not _compiling() and any(p.requires_grad for p in params) and
                self._use_kernel(x, params) and
                (not x.is_cuda or _lib.load().ssae_has_cuda_loss))

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


class ReconstructionLoss(nn.Module):
    """A drop-in module's fused reconstruction loss as a module: forward(x)
    is model.reconstruction_loss(x), and the parameters are model's (under
    "model."). For wrappers that run a module's forward, above all
    DistributedDataParallel, which averages gradients over the processes in
    the autograd hooks that its forward arms:

        loss_fn = DistributedDataParallel(ReconstructionLoss(model))
        for x in batches:
            opt.zero_grad(); loss_fn(x).backward(); opt.step()

    Calling model.reconstruction_loss directly skips DDP's forward, and its
    gradients are then not averaged."""

    def __init__(self, model):
        super().__init__()
        if not isinstance(model, SpectralShapeAutoencoder):
            raise TypeError("ReconstructionLoss: model is a %s, not an "
                            "ssae.torch.SpectralShapeAutoencoder" % type(model).__name__)
        self.model = model

    def forward(self, x):
        return self.model.reconstruction_loss(x)
