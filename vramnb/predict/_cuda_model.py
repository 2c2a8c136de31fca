"""What a step does differently on a CUDA GPU, modelled for fake CPU tensors.

An estimate runs the step on fake *CPU* tensors: fake ``cuda`` tensors abort
the process in backward on a PyTorch built without CUDA (a step that makes one
is refused first: :class:`vramnb.predict._fake.HostDevicesOnly`), and CPU kernels make
other choices than CUDA ones. :class:`CudaPolicy` (kernels registered at the dispatcher while it runs)
makes the CUDA choices that change memory:

* **attention**: ``F.scaled_dot_product_attention`` runs the backend CUDA
  would pick (``sdp_utils.cpp``'s priority: flash, memory-efficient, math) by
  calling that backend's ATen operator, whose fake kernel allocates what the
  CUDA kernel returns (output, log-sum-exp) instead of the full attention
  matrix the math fallback materialises;
* **autocast**: the CUDA autocast policy of ``aten/src/ATen/autocast_mode.cpp``
  (matmuls and convolutions in 16 bits; softmax, log-softmax, layer and group
  norm, losses, sums in fp32), which differs from CPU autocast's lists; a
  weight's 16-bit copy is cached for the forward as autocast does;
* **the step's own** ``torch.autocast("cuda", ...)`` (and ``torch.cuda.amp.autocast``):
  a region of CUDA's policy on the fake CPU tensors, as the estimate's own
  ``precision`` recipe is (without this, CUDA autocast never touches a CPU
  tensor, and on a machine without CUDA it disables itself with a warning);
* **dropout**: CUDA's fused kernel, which keeps a 1-byte mask for backward
  (CPU's keeps a noise tensor of the input's size and dtype);
* **recurrent layers**: ``nn.LSTM``/``nn.GRU``/``nn.RNN`` run as one cuDNN
  kernel with its reserve (:func:`vramnb.predict._kernels.cudnn_rnn`), not step by step;
* **memory inside kernels** (softmax backward, cuDNN convolutions, cuBLAS
  workspaces): :class:`vramnb.predict._kernels.Workspaces`.

The optimizer's CUDA default (``foreach=True``) is set by the estimator.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._interrupt import held_back
from ._kernels import Workspaces, cudnn_attention, cudnn_rnn

__all__ = ["CudaPolicy", "CUDA_CONTEXT", "LIBRARY_MEMORY", "outside_pytorch", "sdpa_backend"]

MiB = 1 << 20

#: Device memory outside PyTorch's allocator once CUDA is initialised (the context and
#: the runtime), by GPU family. H200: measured with torch 2.11 and CUDA 13, a fresh process
#: with the GPU otherwise idle (benchmarks/results/2026-12-01-h200-run13-zoo-ops, context.json:
#: 619 MiB). Other cards: not measured by us; the same figure is used and the estimate says so.
CUDA_CONTEXT: dict[str, int] = {"H200": 619 * MiB, "default": 619 * MiB}

#: More outside PyTorch once a library has run in the process (same run): cuBLAS's handle and
#: kernels, per thread that ran a matrix multiply (forward +66 MiB, autograd's backward thread
#: +64 MiB), and cuDNN's (convolution, batch norm, RNN or attention: +18 MiB). The workloads
#: measured: 619 (init), 685 (a matmul), 749 (matmul forward and backward), 637 (a convolution,
#: an LSTM, 16-bit attention), 751 (a GPT-2 step), 767 (a ResNet-18 step in bf16) MiB.
LIBRARY_MEMORY: dict[str, int] = {"cublas:forward": 66 * MiB, "cublas:backward": 64 * MiB, "cudnn": 18 * MiB}

#: A training step that uses both libraries (what a card holds outside PyTorch when no step is known).
TYPICAL_STEP_OUTSIDE = CUDA_CONTEXT["default"] + sum(LIBRARY_MEMORY.values())


def outside_pytorch(context: int, libraries: Any) -> int:
    """Device memory outside PyTorch's allocator (bytes) for a process that ran ``libraries``
    (:attr:`vramnb.predict._kernels.Workspaces.libraries`) on a card whose context is ``context``."""
    return context + sum(LIBRARY_MEMORY.get(lib, 0) for lib in libraries)



# CUDA autocast policy, aten/src/ATen/autocast_mode.cpp (PyTorch 2.4-2.11), by op name
_LOWER = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp", "upsample_nearest1d",
    "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
_FP32_SET_OPT_DTYPE = ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                       "linalg_matrix_norm", "sum")
_PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
            "scatter_add", "tensordot", "cat", "stack", "index_copy")
_LOW_DTYPES = (torch.float16, torch.bfloat16)
_RNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_SDPA_CODES = {"math": 0, "flash": 1, "efficient": 2}


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any, dropout_p: float,
                 capability: tuple[int, int], enable_gqa: bool = False) -> str:
    """The backend ``scaled_dot_product_attention`` takes on CUDA:
    ``"flash"``, ``"efficient"`` or ``"math"`` (``sdp_utils.cpp``, default priority).

    Flash: compute capability ≥ 8.0, fp16/bf16, no ``attn_mask``, head size ≤ 256
    and a multiple of 8, 4-D inputs. Memory-efficient: compute capability ≥ 5.0,
    fp32/fp16/bf16, head size a multiple of 8 (4 for fp32), masks allowed.

    A mask that requires grad: never cuDNN (``check_attn_mask_shape``); with dropout, ``"math"``
    (measured: Swin's trained bias without dropout ran memory-efficient, T5's with dropout the math path).
    Compute capability 9.0 and newer, 16-bit: ``"cudnn"``: an H200 with torch 2.11
    took cuDNN's fused attention for every 16-bit case, masks, dropout and
    grouped-query heads included (``benchmarks/sdpa_choices.py``, results/2026-11-29-h200-run9-sdpa,
    and the op-level cases of results/2026-12-01-h200-run13-zoo-ops); modelled by
    :class:`vramnb.predict._kernels.CudnnAttention`. fp32 with grouped-query heads
    takes the math path, as here.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    trained_mask = isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad and torch.is_grad_enabled()
    if trained_mask and dropout_p > 0:
        # a trained mask (T5's position bias) with dropout: an H200 ran T5's self-attention on the math path,
        # in fp32 and bf16 (runs 14, 15)
        return "math"
    d, dv = q.shape[-1], v.shape[-1]
    same = q.dtype == k.dtype == v.dtype
    gqa_ok = q.shape[1] == k.shape[1] or enable_gqa
    if (same and gqa_ok and capability >= (9, 0) and q.dtype in _LOW_DTYPES and d == dv and d <= 256 and d % 8 == 0
            and not trained_mask):  # cuDNN refuses a mask that requires grad (sdp_utils_cpp.h check_attn_mask_shape)
        return "cudnn"  # an H200 took cuDNN's attention for every 16-bit case, masks and dropout included (run 13)
    if (same and gqa_ok and capability >= (8, 0) and q.dtype in _LOW_DTYPES and attn_mask is None
            and d == dv and d <= 256 and d % 8 == 0):
        return "flash"
    align = 4 if q.dtype == torch.float32 else 8
    if (same and q.shape[1] == k.shape[1] and capability >= (5, 0)
            and q.dtype in (torch.float32, *_LOW_DTYPES) and d % align == 0 and dv % align == 0):
        return "efficient"
    return "math"


class CudaPolicy:
    """Make CUDA's memory-relevant choices while a step runs on fake CPU tensors.

    A context manager. While it is active it registers, with
    ``torch.library``, kernels of its own at two dispatcher keys, and removes
    them on exit (the previous kernels come back):

    * ``AutocastCPU`` for every op of CPU's or CUDA's autocast lists: CPU
      autocast then follows CUDA's policy, including inside modules
      implemented in C++ or Python and in activation checkpointing's
      recomputation (which re-enters autocast);
    * ``CompositeImplicitAutograd`` of ``scaled_dot_product_attention``: the
      backend CUDA would pick runs (:func:`sdpa_backend`), through its ATen
      operator, whose fake kernel allocates what the CUDA kernel returns.

    The kernels act for the thread that entered the policy; in other threads
    of the process (the user's own, training while an estimate runs) they call
    the kernel PyTorch had there, so that those threads' ``torch.autocast`` and
    attention run exactly as without vramnb.

    Args:
        capability: the target's compute capability, e.g. ``(9, 0)``.
        workspaces: the estimate's :class:`~vramnb.predict._kernels.Workspaces`, which holds the
            modelled kernels' temporaries (cuDNN's RNN and attention) and records the libraries used.
    """

    def __init__(self, capability: tuple[int, int], workspaces: Workspaces) -> None:
        self.capability = capability
        self.workspaces = workspaces
        self.backends: dict[str, int] = {}  # backend -> calls (shown in the estimate's notes)
        self.cudnn_causal = 0  # cuDNN attention calls with is_causal (the accuracy classifier's decoders)
        self._cache: dict[int, torch.Tensor] = {}
        self._lib: Any = None
        self._owner: int | None = None
        self._autocast_patch: Any = None
        self._rnn_patch: Any = None
        self.user_autocast = 0  # the step's own CUDA autocast regions entered (shown in the estimate's notes)

    def _mine(self) -> bool:
        return threading.get_ident() == self._owner

    # -- registration ---------------------------------------------------------------
    def __enter__(self) -> CudaPolicy:
        """Register the policy's kernels and patches as one step: an interrupt (Ctrl-C) that arrives while
        they register is held back until all are in place, then everything registered is taken out again
        before it is raised (a half-registered library kept alive by the traceback IPython stores would
        leave PyTorch's AutocastCPU kernels replaced for the user's own ``torch.autocast("cpu")``)."""
        try:
            with held_back():
                self._register()
        except BaseException:  # an interrupt (held back, or raised inside), or a registration that failed
            self.__exit__(None, None, None)
            raise
        return self

    def _register(self) -> None:
        import warnings

        self._owner = threading.get_ident()
        self._lib = torch.library.Library("aten", "IMPL")  # owned at once: __exit__ takes out what is in
        policies = {n: self._lower for n in _LOWER}
        policies.update({n: self._fp32 for n in _FP32})
        policies.update({n: self._fp32_opt for n in _FP32_SET_OPT_DTYPE})
        policies.update({n: self._promote for n in _PROMOTE})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            for name in _cpu_autocast_ops():
                base, _, overload = name.partition(".")
                if base not in policies:  # on CPU's list, not on CUDA's: runs as is
                    self._impl(name, _passthrough(_op(base, overload)), "AutocastCPU")
            for base, policy in policies.items():
                packet = getattr(torch.ops.aten, base, None)
                if packet is None:
                    continue
                for overload in packet.overloads():
                    op = getattr(packet, overload)
                    self._impl(f"{base}.{overload}" if overload != "default" else base, policy(op), "AutocastCPU")
            self._impl("scaled_dot_product_attention", self._sdpa, "CompositeImplicitAutograd")
            self._impl("dropout", self._dropout, "CompositeImplicitAutograd")
        self._autocast_patch = _patch_user_autocast(self)
        self._rnn_patch = self._patch_rnns()

    def _impl(self, name: str, kernel: Callable[..., Any], key: str) -> None:
        """Register ``kernel`` for ``aten::name`` at ``key`` for the policy's own thread. The registration is
        process-wide: every other thread (the user's own, training while the estimate runs) gets the kernel
        PyTorch had there (``torch.library.get_kernel``; where that is autocast's fallthrough, the call goes
        on below autocast), so that its ``torch.autocast`` and attention run as they would without vramnb."""
        mine = self._mine
        other = _original(name, key)
        if other is None:  # an overload Python lists that the dispatcher does not have: no call reaches it
            self._lib.impl(name, kernel, key)
            return

        def dispatched(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            return kernel(*args, **kwargs) if mine() else other(keyset, *args, **kwargs)

        self._lib.impl(name, dispatched, key, with_keyset=True)

    def __exit__(self, *exc: Any) -> None:
        with held_back():  # taken out whole: an interrupt here is raised once all is put back
            self._cache.clear()
            if self._autocast_patch is not None:
                self._autocast_patch()
                self._autocast_patch = None
            if self._rnn_patch is not None:
                self._rnn_patch()
                self._rnn_patch = None
            if self._lib is not None:
                self._lib._destroy()
                self._lib = None

    @contextlib.contextmanager
    def autocast(self, dtype: torch.dtype) -> Iterator[None]:
        """A CUDA autocast region on the fake CPU tensors; weight casts cached
        within it, as ``torch.autocast`` caches them."""
        try:
            with torch.autocast("cpu", dtype=dtype):
                yield
        finally:
            self._cache.clear()

    # -- policies (autocast_mode.h) ---------------------------------------------------
    def _cast(self, x: Any, dtype: torch.dtype) -> Any:
        if isinstance(x, (list, tuple)):
            return type(x)(self._cast(v, dtype) for v in x)
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype in (dtype, torch.float64):
            return x
        if x.is_leaf and x.requires_grad and torch._C._current_autograd_node() is None:
            hit = self._cache.get(id(x))  # cached_cast: a weight is cast once per region
            if hit is None or hit.dtype != dtype:
                hit = self._cache[id(x)] = x.to(dtype)
            return hit
        return x.to(dtype)

    def _lower(self, op: Any) -> Any:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            low = torch.get_autocast_dtype("cpu")
            with _no_autocast():
                if not self._mine():
                    return op(*args, **kwargs)
                return op(*self._cast(args, low), **{k: self._cast(v, low) for k, v in kwargs.items()})
        return kernel

    def _fp32(self, op: Any) -> Any:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            with _no_autocast():
                if not self._mine():
                    return op(*args, **kwargs)
                return op(*[_up(a) for a in args], **{k: _up(v) for k, v in kwargs.items()})
        return kernel

    def _fp32_opt(self, op: Any) -> Any:
        names = [a.name for a in op._schema.arguments]
        at = names.index("dtype") if "dtype" in names else None  # position of the dtype argument

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with _no_autocast():
                first = args[0] if args else None
                if at is not None and self._mine() and isinstance(first, torch.Tensor) and first.dtype in _LOW_DTYPES:
                    if len(args) > at:  # given by position: only an unset (None) dtype becomes fp32
                        if args[at] is None:
                            args = (*args[:at], torch.float32, *args[at + 1:])
                    elif kwargs.get("dtype") is None:
                        kwargs["dtype"] = torch.float32
                return op(*args, **kwargs)
        return kernel

    def _promote(self, op: Any) -> Any:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            flat = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else [a])
                    if isinstance(t, torch.Tensor) and t.is_floating_point()]
            with _no_autocast():
                if flat and self._mine():
                    wide = functools.reduce(torch.promote_types, [t.dtype for t in flat])
                    args = tuple(self._cast(a, wide) for a in args)
                    kwargs = {k: self._cast(v, wide) for k, v in kwargs.items()}
                return op(*args, **kwargs)
        return kernel

    def _dropout(self, input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        """``aten::dropout`` as on CUDA (``Dropout.cpp: is_fused_kernel_acceptable``):
        the fused ``native_dropout``, which saves a 1-byte mask for backward, where
        the CPU path multiplies by a noise tensor of the input's dtype and saves it."""
        if not train or p == 0 or input.numel() == 0:
            return input
        if p == 1:
            return input * 0
        if not self._mine():  # another thread: CPU's own path
            noise = torch.empty_like(input).bernoulli_(1 - p).div_(1 - p)
            return input * noise
        return torch.ops.aten.native_dropout(input, p, train)[0]

    # -- recurrent layers ---------------------------------------------------------------
    def _patch_rnns(self) -> Callable[[], None]:
        """``nn.LSTM``/``GRU``/``RNN`` call ``torch._VF.<mode>``: in the policy's thread, a
        sequence (not packed) of a dtype cuDNN takes runs as cuDNN's one kernel."""
        from torch import _VF

        originals = {mode: getattr(_VF, mode) for mode in _RNN_MODES}

        def patched(mode: str) -> Any:
            plain = originals[mode]

            def vf(*args: Any) -> Any:
                packed = len(args) > 3 and isinstance(args[3], (list, tuple))
                x = args[0]
                if (not self._mine() or packed or not isinstance(x, torch.Tensor) or x.dim() != 3
                        or x.dtype not in (torch.float32, *_LOW_DTYPES)):
                    return plain(*args)
                hx, params, _bias, layers, _dropout, train, bidirectional, batch_first = args[1:9]
                self.backends["cudnn rnn"] = self.backends.get("cudnn rnn", 0) + 1
                return cudnn_rnn(self.workspaces, mode, x, hx, list(params), layers, bidirectional, batch_first,
                                 train=train)
            return vf

        for mode in _RNN_MODES:
            setattr(_VF, mode, patched(mode))

        def undo() -> None:
            for mode in _RNN_MODES:
                _VF.__dict__.pop(mode, None)
        return undo

    # -- attention -------------------------------------------------------------------
    def _sdpa(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
        if not self._mine():  # another thread of the process: the plain (math) path
            return torch.ops.aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                **({"enable_gqa": True} if enable_gqa else {}))[0]
        backend = sdpa_backend(query, key, value, attn_mask, dropout_p, self.capability, enable_gqa)
        self.backends[backend] = self.backends.get(backend, 0) + 1
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if backend == "cudnn":
            self.cudnn_causal += bool(is_causal)
            return cudnn_attention(self.workspaces, query, key, value, attn_mask)
        if backend == "flash":
            if key.shape[1] != query.shape[1]:  # GQA: the flash kernel takes expanded keys and values
                rep = query.shape[1] // key.shape[1]
                key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
            return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
                                                                      False, scale=scale)[0]
        if backend == "efficient":
            bias = attn_mask
            if isinstance(bias, torch.Tensor) and bias.dtype == torch.bool:
                bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(bias.logical_not(), -math.inf)
            if isinstance(bias, torch.Tensor):
                bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
            return torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, bias, grad, dropout_p,
                                                                          is_causal, scale=scale)[0]
        kw: dict[str, Any] = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal, "scale": scale}
        if enable_gqa and key.shape[1] != query.shape[1]:
            rep = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
        return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, **kw)[0]


def _patch_user_autocast(policy: CudaPolicy) -> Callable[[], None]:
    """Make the step's own ``torch.autocast("cuda", dtype)`` regions (in the policy's thread)
    regions of CUDA's policy on the fake CPU tensors: ``torch.autocast`` (``torch.amp.autocast``,
    and ``torch.cuda.amp.autocast``, its subclass) is entered for ``"cpu"``, where the policy's
    kernels are registered, with CUDA's default dtype (fp16) when none is given. Code that takes
    the device from a tensor (``torch.autocast(x.device.type, enabled=False)``) already names
    ``"cpu"``. The weight-cast cache is emptied when the outermost region exits, as autocast's own
    is. Returns the function that puts ``autocast`` back."""
    cls = torch.amp.autocast_mode.autocast
    init, exit_ = cls.__init__, cls.__exit__

    def __init__(self: Any, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: Any = None) -> None:
        if device_type == "cuda" and policy._mine():
            if dtype is None:
                dtype = torch.float16  # CUDA autocast's default (torch.get_autocast_dtype("cuda"))
            device_type = "cpu"
            policy.user_autocast += 1
        init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def __exit__(self: Any, *exc: Any) -> Any:
        out = exit_(self, *exc)
        if policy._mine() and not torch.is_autocast_enabled("cpu"):
            policy._cache.clear()
        return out

    cls.__init__, cls.__exit__ = __init__, __exit__  # type: ignore[method-assign]

    def undo() -> None:
        cls.__init__, cls.__exit__ = init, exit_  # type: ignore[method-assign]
    return undo


def _no_autocast() -> Any:
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU))


def _up(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(_up(v) for v in x)
    return x.float() if isinstance(x, torch.Tensor) and x.dtype in _LOW_DTYPES else x


_MISSING: set[str] = set()  # overloads Python lists that the dispatcher does not have (asking raises, slowly)


def _original(name: str, key: str) -> Callable[..., Any] | None:
    """What PyTorch runs now for ``aten::name`` at ``key``, as ``f(keyset, *args, **kwargs)`` (the kernel
    registered there, ``torch.library.get_kernel``; for autocast's fallthrough, the call going on below
    autocast); None for an overload the dispatcher does not have. Read before the policy registers its own
    (estimates run one at a time: ``_estimate._ONE_AT_A_TIME``)."""
    if name in _MISSING:
        return None
    try:
        has = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key)
    except RuntimeError:
        _MISSING.add(name)
        return None
    if key == "CompositeImplicitAutograd" or has:  # an alias key's kernel is the one computed for any backend
        kernel = torch.library.get_kernel(f"aten::{name}", "CPU" if key == "CompositeImplicitAutograd" else key)

        def call(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            return kernel.call_boxed(keyset, *args, **kwargs)
    else:  # autocast's fallthrough: straight on to the kernels below it
        base, _, overload = name.partition(".")
        op, here = _op(base, overload or "default"), getattr(torch._C.DispatchKey, key)

        def call(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            return op.redispatch(keyset.remove(here), *args, **kwargs)
    return call


def _op(base: str, overload: str) -> Any:
    packet = getattr(torch.ops.aten, base)
    return getattr(packet, overload or "default")


def _passthrough(op: Any) -> Any:
    """An op on CPU autocast's lists but not on CUDA's: it runs as CUDA runs it, without a
    cast of its own. A composite op (``cross_entropy_loss``) runs its decomposition with
    autocast on, so that the ops inside it get CUDA's policy (``nll_loss`` in fp32: a copy of
    the log-probabilities); an op with a kernel of its own runs with autocast off."""
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if composite:
            return op.decompose(*args, **kwargs)
        with _no_autocast():
            return op(*args, **kwargs)
    return kernel


@functools.lru_cache(maxsize=1)
def _cpu_autocast_ops() -> tuple[str, ...]:
    """Ops with a CPU autocast kernel in this PyTorch ("base.overload" names)."""
    names = torch._C._dispatch_get_all_op_names()
    return tuple(n.split("::", 1)[1] for n in names
                 if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCPU"))
