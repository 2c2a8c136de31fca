"""What a step does differently on a CUDA GPU, modelled for fake CPU tensors.

An estimate runs the step on fake *CPU* tensors: fake ``cuda`` tensors abort
the process in backward on a PyTorch built without CUDA, and CPU kernels make
other choices than CUDA ones. :class:`CudaKernels` (a ``TorchFunctionMode``)
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
* **cuBLAS workspace**: the first matrix multiply on a thread takes a
  workspace from the caching allocator and keeps it
  (``CublasHandlePool.cpp``); the forward and autograd's backward thread each
  have one.

The optimizer's CUDA default (``foreach=True``) is set by the estimator.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["CudaKernels", "CUDA_CONTEXT", "workspace_bytes", "sdpa_backend"]

MiB = 1 << 20

#: Device memory outside PyTorch's allocator once a CUDA step has run (context,
#: cuBLAS/cuDNN handles, loaded kernels), by GPU family. H200: measured with
#: torch 2.11 (benchmarks/results/2026-11-29-h200-run3: 750-810 MiB; the
#: median 790 MiB is used). Other cards: not measured by us; the same figure
#: is used and the estimate says so.
CUDA_CONTEXT: dict[str, int] = {"H200": 790 * MiB, "default": 790 * MiB}


def workspace_bytes(capability: tuple[int, int]) -> int:
    """cuBLAS workspace the caching allocator hands to one handle.

    PyTorch's default ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:8`` (32 MiB) on
    compute capability 9.0 and newer, ``:4096:2:16:8`` (8 MiB + 128 KiB) before
    (``CublasHandlePool.cpp``). Measured on an H200, torch 2.11: 65.0 MiB for a
    training step = two handles (forward, backward thread) + 1 MiB cuBLASLt.
    """
    return 32 * MiB if capability >= (9, 0) else 8 * MiB + 128 * 1024


LT_WORKSPACE = 1 * MiB

_LOW = {
    F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
    torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.baddbmm, torch.Tensor.baddbmm,
    torch.addmm, torch.Tensor.addmm, torch.addbmm, torch.Tensor.addbmm, torch.mv, torch.Tensor.mv,
    torch.addmv, torch.addr, torch.einsum, torch.chain_matmul,
    F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d, F.prelu,
    torch.conv1d, torch.conv2d, torch.conv3d, torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu,
    torch.lstm_cell, torch.gru_cell, torch.rnn_tanh_cell, torch.rnn_relu_cell,
    F.scaled_dot_product_attention,
}
_FP32 = {
    F.layer_norm, F.group_norm, torch.layer_norm, torch.group_norm, torch.exp, torch.Tensor.exp, torch.log,
    torch.Tensor.log, torch.log1p, torch.expm1, torch.rsqrt, torch.Tensor.rsqrt, torch.reciprocal, torch.pow,
    torch.Tensor.pow, torch.Tensor.__pow__, F.softplus, F.cosine_similarity, F.nll_loss, F.cross_entropy,
    F.kl_div, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.mse_loss, F.binary_cross_entropy_with_logits,
    F.margin_ranking_loss, F.soft_margin_loss, F.multi_margin_loss, F.cosine_embedding_loss,
    F.hinge_embedding_loss, F.poisson_nll_loss, F.triplet_margin_loss, torch.cdist, torch.dist,
    torch.logsumexp, torch.Tensor.logsumexp, F.interpolate,
}
_FP32_OPT_DTYPE = {
    F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, torch.Tensor.softmax, torch.Tensor.log_softmax,
    torch.sum, torch.Tensor.sum, torch.prod, torch.Tensor.prod, torch.cumsum, torch.Tensor.cumsum,
    torch.cumprod, torch.Tensor.cumprod,
}
_LOW_DTYPES = (torch.float16, torch.bfloat16)


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any, dropout_p: float,
                 capability: tuple[int, int], enable_gqa: bool = False) -> str:
    """The backend ``scaled_dot_product_attention`` takes on CUDA:
    ``"flash"``, ``"efficient"`` or ``"math"`` (``sdp_utils.cpp``, default priority).

    Flash: compute capability ≥ 8.0, fp16/bf16, no ``attn_mask``, head size ≤ 256
    and a multiple of 8, 4-D inputs. Memory-efficient: compute capability ≥ 5.0,
    fp32/fp16/bf16, head size a multiple of 8 (4 for fp32), masks allowed.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    d, dv = q.shape[-1], v.shape[-1]
    same = q.dtype == k.dtype == v.dtype
    gqa_ok = q.shape[1] == k.shape[1] or enable_gqa
    if (same and gqa_ok and capability >= (8, 0) and q.dtype in _LOW_DTYPES and attn_mask is None
            and d == dv and d <= 256 and d % 8 == 0):
        return "flash"
    align = 4 if q.dtype == torch.float32 else 8
    if (same and q.shape[1] == k.shape[1] and capability >= (5, 0)
            and q.dtype in (torch.float32, *_LOW_DTYPES) and d % align == 0 and dv % align == 0):
        return "efficient"
    return "math"


class CudaKernels(TorchFunctionMode):
    """Make CUDA's memory-relevant choices while a step runs on fake CPU tensors.

    Args:
        capability: the target's compute capability, e.g. ``(9, 0)``.
        autocast: the dtype of an autocast region to model (``torch.bfloat16``
            or ``torch.float16``), or ``None``; switched on by :meth:`autocast`.
        keep: a list the cuBLAS workspaces are appended to (they live as long
            as the list: the allocator keeps them for the process).
    """

    def __init__(self, capability: tuple[int, int], keep: list[torch.Tensor]) -> None:
        super().__init__()
        self.capability = capability
        self.keep = keep
        self.dtype: torch.dtype | None = None
        self._cache: dict[int, torch.Tensor] = {}
        self._handles: set[str] = set()
        self.backends: dict[str, int] = {}  # backend -> calls (shown in the estimate's notes)

    @contextlib.contextmanager
    def autocast(self, dtype: torch.dtype) -> Iterator[None]:
        """CUDA autocast for the forward (nesting restores the outer setting)."""
        outer, self.dtype = self.dtype, dtype
        try:
            yield
        finally:
            self.dtype = outer
            if outer is None:
                self._cache.clear()  # autocast's weight-cast cache ends with the region

    def _workspace(self) -> None:
        thread = "backward" if torch._C._current_autograd_node() is not None else "forward"
        if thread in self._handles:
            return
        self._handles.add(thread)
        n = workspace_bytes(self.capability) + (LT_WORKSPACE if not self.keep else 0)
        self.keep.append(torch.empty(n, dtype=torch.uint8))

    def _cast(self, x: Any, dtype: torch.dtype) -> Any:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dtype or x.dtype == torch.float64:
            return x
        if x.is_leaf and x.requires_grad:  # autocast's cached_cast: a weight is cast once per region
            hit = self._cache.get(id(x))
            if hit is None or hit.dtype != dtype:
                hit = self._cache[id(x)] = x.to(dtype)
            return hit
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        low = self.dtype
        if low is not None:
            if func in _LOW:
                args = tuple(self._cast(a, low) if not isinstance(a, (list, tuple)) else type(a)(self._cast(x, low) for x in a)
                             for a in args)
                kwargs = {k: self._cast(v, low) for k, v in kwargs.items()}
            elif func in _FP32:
                args = tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype in _LOW_DTYPES else a for a in args)
                kwargs = {k: v.float() if isinstance(v, torch.Tensor) and v.dtype in _LOW_DTYPES else v for k, v in kwargs.items()}
            elif func in _FP32_OPT_DTYPE and args and isinstance(args[0], torch.Tensor) and args[0].dtype in _LOW_DTYPES:
                if kwargs.get("dtype") is None and not (len(args) > 2 and func in (F.softmax, F.log_softmax)):
                    kwargs["dtype"] = torch.float32
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        if func in (F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.bmm,
                    torch.Tensor.mm, torch.Tensor.bmm, torch.baddbmm, torch.addmm, torch.Tensor.addmm, torch.einsum):
            self._workspace()
        return func(*args, **kwargs)

    def _sdpa(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
        backend = sdpa_backend(query, key, value, attn_mask, dropout_p, self.capability, enable_gqa)
        self.backends[backend] = self.backends.get(backend, 0) + 1
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
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
        if enable_gqa:
            kw["enable_gqa"] = True
        return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, **kw)[0]
