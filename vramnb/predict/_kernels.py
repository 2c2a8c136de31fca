"""Memory that CUDA kernels take and no dispatcher sees, modelled for fake CPU tensors.

An estimate's fake step sees every ATen operator's outputs, but not what a CUDA
kernel allocates inside itself through the caching allocator, nor the saved
buffers of kernels the CPU never runs. Measured on an H200 (torch 2.11, cuDNN 9,
op-level run ``benchmarks/results/2026-12-01-h200-run13-zoo-ops``: each operator
between two linear maps, allocated bytes before, during and after it):

* **temporaries inside a kernel** (:data:`TRANSIENT`): the softmax backward holds a
  temporary of its gradient's size; ``_safe_softmax`` (attention's math path) a
  boolean mask of its input's size; cuDNN convolutions a workspace of about their
  input plus output (layout copies for tensor cores), except pointwise and
  depthwise forwards; a reduction that splits each output across thread blocks
  (a bias gradient ``grad.sum(0)``) a staging buffer sized by ``Reduce.cuh`` from the
  card's multiprocessors (:func:`reduction_staging_bytes`; run 16). Modelled as an
  allocation alive for the operator only;
* **cuDNN's RNN** (:class:`CudnnRNN`): one kernel for the whole sequence, which
  keeps a *reserve* for backward (``D·(L·k + L − 1)·B·T·H`` elements of the
  compute dtype + 256 B; ``k`` = 5 for LSTM, 6 for GRU, 1 for tanh/ReLU RNN: exact
  on all 27 measured cases) and a workspace during forward and backward; under
  autocast it runs in fp16 on a fresh flat fp16 copy of the weights
  (``autocast_mode.cpp: _cudnn_rnn_cast_reflatten``), whatever the autocast dtype.
  On the CPU the same layer runs step by step and keeps other tensors;
* **cuDNN's fused attention** (:class:`CudnnAttention`), which an H200 takes for
  every 16-bit ``scaled_dot_product_attention``: output and log-sum-exp; keys and
  values of grouped-query attention are kept unexpanded; backward takes an fp32
  accumulator of the query's size, plus expanded key and value gradients for
  grouped-query attention;
* **cuBLAS workspaces** (:class:`Workspaces`): the first matrix multiply on a
  thread takes one from the caching allocator and keeps it (``CublasHandlePool.cpp``).

:class:`Workspaces` is the dispatch mode that applies the first and last, and
records which libraries the step used (:attr:`Workspaces.libraries`), which
decide the memory outside PyTorch (:func:`vramnb.predict._gpus.outside_pytorch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Workspaces", "CudnnRNN", "CudnnAttention", "TRANSIENT", "workspace_bytes", "rnn_reserve_bytes",
           "reduction_staging_bytes"]

MiB = 1 << 20
LT_WORKSPACE = 1 * MiB
_LOW = (torch.float16, torch.bfloat16)


def workspace_bytes(capability: tuple[int, int]) -> int:
    """cuBLAS workspace the caching allocator hands to one handle.

    PyTorch's default ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:8`` (32 MiB) on
    compute capability 9.0 and newer, ``:4096:2:16:8`` (8 MiB + 128 KiB) before
    (``CublasHandlePool.cpp``). Measured on an H200, torch 2.11: 65.0 MiB for a
    training step = two handles (forward, backward thread) + 1 MiB cuBLASLt.
    """
    return 32 * MiB if capability >= (9, 0) else 8 * MiB + 128 * 1024


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _conv_workspace(func: Any, args: tuple, kwargs: dict | None, out: Any, ws: Any = None) -> int:
    """cuDNN convolution workspace (measured, H200/cuDNN 9, NCHW): input + output bytes;
    none for a pointwise or depthwise forward, nor for their backward in fp32. 1-D convolutions
    too (wav2vec2's feature encoder: 310 MiB for 200 MiB in, 100 MiB out; run 15)."""
    if func is torch.ops.aten.convolution.default:
        x, w, groups = args[0], args[1], args[8]
        y = out
    else:  # convolution_backward(grad_output, input, weight, ...)
        y, x, w, groups = args[0], args[1], args[2], args[9]
    if not isinstance(x, torch.Tensor) or x.dim() < 3:  # 1-D convolutions run as cuDNN's 2-D ones
        return 0
    pointwise = all(s == 1 for s in w.shape[2:])
    depthwise = groups > 1 and groups == x.shape[1]
    if pointwise or depthwise:
        if func is torch.ops.aten.convolution.default or x.dtype not in _LOW:
            return 0
    return _nbytes(x) + _nbytes(y)


def _last_pow2(n: int) -> int:
    return max(1, 1 << (max(n, 1).bit_length() - 1))


def reduction_staging_bytes(x: torch.Tensor, dims: Any, acc_size: int, multiprocessors: tuple[int, int]) -> tuple[int, int]:
    """The staging buffer and semaphores (bytes) a CUDA reduction of ``x`` over
    ``dims`` allocates when it splits each output across thread blocks, else ``(0, 0)``.

    PyTorch's ``aten/src/ATen/native/cuda/Reduce.cuh`` (``setReduceConfig``,
    ``ReduceConfig::global_memory_size``), replayed on the shapes and strides: the
    dimensions ordered and coalesced as ``TensorIterator`` does (reduced ones first,
    each group fastest first), the block shape, vectorisation along the outputs, and
    ``ctas_per_output`` from the card's multiprocessors. A bias gradient
    ``grad.sum(0)`` of a ``[25216, 1024]`` tensor takes 132.0 MiB on an H200
    (measured, run 15: 132.0 MiB), whatever its dtype.

    Args:
        x: the reduced tensor (its shape, strides, storage offset).
        dims: the reduced dimensions (``None`` or empty: all).
        acc_size: bytes of the accumulator type (4 for 16- and 32-bit floats).
        multiprocessors: (streaming multiprocessors, resident threads per multiprocessor).
    """
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return 0, 0
    nd = x.dim()
    reduced = {d % nd for d in ([dims] if isinstance(dims, int) else dims)} if dims else set(range(nd))
    items = sorted(((x.shape[d], x.stride(d), d in reduced) for d in range(nd) if x.shape[d] != 1),
                   key=lambda t: (not t[2], t[1]))
    if not items:
        return 0, 0
    dimsc = [list(items[0])]
    for size, stride, red in items[1:]:  # TensorIterator's coalescing
        if red == dimsc[-1][2] and stride == dimsc[-1][1] * dimsc[-1][0]:
            dimsc[-1][0] *= size
        else:
            dimsc.append([size, stride, red])
    nred = sum(1 for d in dimsc if d[2])
    outputs = math.prod(d[0] for d in dimsc if not d[2])
    per_output = x.numel() // outputs
    fastest = nred == len(dimsc) or dimsc[0][1] < dimsc[nred][1]
    dim0, dim1 = (per_output, outputs) if fastest else (outputs, per_output)
    moving = dimsc[0][1] if fastest else dimsc[nred][1]
    vec = 1
    if moving == 1:
        if fastest and dim0 >= 128 and nred == 1:
            dim0 //= 4  # vectorised along the input (input_vec_size = vt0 = 4)
        elif not fastest:
            vec = 4  # get_output_vec_size
            for n in [x.storage_offset(), dimsc[nred][0]] + [d[1] for j, d in enumerate(dimsc) if j != nred]:
                while n % vec:
                    vec //= 2
            dim0 //= vec
    limit = 512 // vec  # MAX_NUM_THREADS / output_vec_size
    d0 = _last_pow2(dim0) if dim0 < limit else limit
    d1 = _last_pow2(dim1) if dim1 < limit else limit
    width = min(d0, 32)
    height = min(d1, limit // width)
    width = min(d0, limit // height)
    step_in = step_out = 1
    if fastest:
        step_in *= width
    else:
        step_out *= width
    if -(-per_output // step_in) >= min(height * 16, 256):
        step_in *= height
        split_warps = True
    else:
        step_out *= height
        split_warps = False
    sms, threads = multiprocessors
    target = sms * (threads // (width * height))
    grid = -(-(outputs // vec) // step_out)
    per_thread = -(-per_output // step_in)
    if not (split_warps and per_thread >= 256 and grid <= target):
        return 0, 0
    ctas = max(min(-(-target // grid), -(-per_thread // 16)), -(-per_thread // 256))
    if ctas <= 1:
        return 0, 0
    size = acc_size * outputs * ctas * (1 if fastest else width * vec)
    return size, 4 * grid


def _acc_size(x: Any, dtype: Any = None) -> int:
    dt = dtype if isinstance(dtype, torch.dtype) else (x.dtype if isinstance(x, torch.Tensor) else torch.float32)
    return 8 if dt in (torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool) else 4


def _reduction(dims_at: int | None) -> Callable[..., tuple[int, int]]:
    def rule(func: Any, args: tuple, kwargs: dict | None, out: Any, ws: Any) -> tuple[int, int]:
        x = args[0]
        dims = args[dims_at] if dims_at is not None and len(args) > dims_at else None
        return reduction_staging_bytes(x, dims, _acc_size(x, (kwargs or {}).get("dtype")), ws.multiprocessors)
    return rule


#: op -> (bytes the CUDA kernel holds while it runs, as a function of (op, args, kwargs,
#: output, the Workspaces mode): an int or a tuple of allocations), with the evidence
TRANSIENT: dict[Any, tuple[Callable[..., Any], str]] = {
    torch.ops.aten._softmax_backward_data.default: (
        lambda f, a, k, o, ws: _nbytes(a[0]), "a temporary of the gradient's size (measured: 256 and 512 MiB)"),
    torch.ops.aten.convolution.default: (_conv_workspace, "cuDNN workspace"),
    torch.ops.aten.convolution_backward.default: (_conv_workspace, "cuDNN workspace"),
}
_REDUCTIONS = {"sum.dim_IntList": 1, "sum.default": None, "mean.dim": 1, "mean.default": None, "amax.default": 1,
               "amin.default": 1, "linalg_vector_norm.default": 2, "prod.dim_int": 1, "nansum.default": 1}
for _name, _at in _REDUCTIONS.items():
    _pkt, _, _ov = _name.partition(".")
    if hasattr(torch.ops.aten, _pkt) and hasattr(getattr(torch.ops.aten, _pkt), _ov):
        TRANSIENT[getattr(getattr(torch.ops.aten, _pkt), _ov)] = (
            _reduction(_at), "Reduce.cuh's staging buffer for outputs split across thread blocks (measured: 132.0 MiB "
                             "for a [25216, 1024] bias gradient on an H200)")
if hasattr(torch.ops.aten, "_safe_softmax"):
    TRANSIENT[torch.ops.aten._safe_softmax.default] = (
        lambda f, a, k, o, ws: a[0].numel(), "a boolean mask of the input's size (measured: 128 MiB)")

# the last two (linear, matmul) reach here undecomposed under inference_mode
_MATMULS = frozenset(getattr(torch.ops.aten, n) for n in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv",
                                                         "_addmm_activation", "linear", "matmul"))
_CUDNN_OPS = frozenset((torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default))


class Workspaces(TorchDispatchMode):
    """cuBLAS workspaces and kernel temporaries (see the module's docstring). A
    dispatch mode, so that backward's operators are seen too.

    Args:
        capability: the target's compute capability.
        keep: the list the kept workspace tensors live in.
        multiprocessors: the target's (multiprocessors, threads per multiprocessor).
        register: called with each new tensor made here (the storage tracker's
            ``add_tensor``: modes above this one do not see tensors made here).

    Attributes:
        libraries: ``"cublas:forward"``, ``"cublas:backward"`` (the threads that ran
            a matrix multiply), ``"cudnn"`` (convolution, RNN or cuDNN attention).
    """

    def __init__(self, capability: tuple[int, int], keep: list[torch.Tensor], register: Any,
                 multiprocessors: tuple[int, int] = (132, 2048)) -> None:
        super().__init__()
        self.capability, self.keep, self.register = capability, keep, register
        self.multiprocessors = multiprocessors
        self.libraries: set[str] = set()

    def hold(self, nbytes: int) -> torch.Tensor | None:
        """A temporary of ``nbytes`` (fake, uint8), counted until the caller drops it."""
        if nbytes <= 0:
            return None
        t = torch.empty(nbytes, dtype=torch.uint8)
        self.register(t)
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket in _MATMULS:
            thread = "backward" if torch._C._current_autograd_node() is not None else "forward"
            if f"cublas:{thread}" not in self.libraries:
                self.libraries.add(f"cublas:{thread}")
                n = workspace_bytes(self.capability) + (LT_WORKSPACE if not self.keep else 0)
                ws = torch.empty(n, dtype=torch.uint8)
                self.keep.append(ws)
                self.register(ws)
        out = func(*args, **(kwargs or {}))
        rule = TRANSIENT.get(func)
        if rule is not None:
            if func in _CUDNN_OPS:
                self.libraries.add("cudnn")
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor):
                    self.register(o)  # the outputs first (as the kernel had them), then its temporary
            sizes = rule[0](func, args, kwargs, out, self)
            tmps = [self.hold(n) for n in (sizes if isinstance(sizes, tuple) else (sizes,))]
            del tmps  # alive while the kernel ran: beside its inputs and outputs, freed before the next operator
        return out


# -- cuDNN RNN -----------------------------------------------------------------------------
_RNN_K = {"lstm": 5, "gru": 6, "rnn_tanh": 1, "rnn_relu": 1}


def rnn_reserve_bytes(mode: str, layers: int, directions: int, batch: int, steps: int, hidden: int,
                      dtype: torch.dtype) -> int:
    """cuDNN's training reserve for ``torch.nn.{LSTM,GRU,RNN}`` (bytes): what the forward
    keeps for backward. Fitted exactly on 27 measured layers (H200, cuDNN 9: 1-2 layers,
    one or two directions, fp32 and fp16): ``D·(L·k + L − 1)·B·T·H`` elements + 256 B."""
    size = torch.empty((), dtype=dtype).element_size()
    return directions * (layers * _RNN_K[mode] + layers - 1) * batch * steps * hidden * size + 256


#: workspace cuDNN's RNN kernels took during forward and backward, in units of B·T·H·D elements
#: of the compute dtype (measured 7.4-9.1 in fp32, 8.5-24.5 in fp16; the fp32 figure is used)
RNN_WORKSPACE_UNITS = 9


class CudnnRNN(torch.autograd.Function):
    """The memory of ``_cudnn_rnn`` and its backward on fake tensors (shapes only)."""

    @staticmethod
    def forward(ctx: Any, ws: Workspaces, mode: str, layers: int, bidirectional: bool, batch_first: bool,
                hidden: int, train: bool, x: torch.Tensor, hx: torch.Tensor, cx: torch.Tensor | None,
                *weights: torch.Tensor) -> Any:
        d = 2 if bidirectional else 1
        b, t = (x.shape[0], x.shape[1]) if batch_first else (x.shape[1], x.shape[0])
        width = d * hx.shape[-1]
        out = x.new_empty((t, b, width)).transpose(0, 1) if batch_first else x.new_empty((t, b, width))
        hy = hx.new_empty(hx.shape)
        cy = cx.new_empty(cx.shape) if cx is not None else None
        reserve = x.new_empty(rnn_reserve_bytes(mode, layers, d, b, t, hidden, x.dtype) if train else 0,
                              dtype=torch.uint8)
        tmp = ws.hold(RNN_WORKSPACE_UNITS * d * b * t * hidden * x.element_size())
        del tmp
        ctx.save_for_backward(x, hx, cx if cx is not None else hx.new_empty(0), out, reserve, *weights)
        ctx.shape = (d, b, t, hidden)
        ctx.ws, ctx.has_cx = ws, cx is not None
        return (out, hy, cy) if cx is not None else (out, hy)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        x, hx, cx, _out, _reserve, *weights = ctx.saved_tensors
        d, b, t, hidden = ctx.shape
        tmp = ctx.ws.hold(RNN_WORKSPACE_UNITS * d * b * t * hidden * x.element_size())
        dx, dhx = torch.empty_like(x), torch.empty_like(hx)
        dcx = torch.empty_like(cx) if ctx.has_cx else None
        dw = [torch.empty_like(w) for w in weights]
        del tmp
        return (None,) * 7 + (dx, dhx, dcx, *dw)


def cudnn_rnn(ws: Workspaces, mode: str, x: torch.Tensor, hx: Any, params: list[torch.Tensor], num_layers: int,
              bidirectional: bool, batch_first: bool, train: bool = True) -> tuple[torch.Tensor, ...]:
    """``aten::lstm/gru/rnn_*`` (``.input``) as CUDA runs it: one cuDNN call. Under autocast
    it runs in fp16 on a new flat fp16 copy of the weights (whatever the autocast dtype)."""
    ws.libraries.add("cudnn")
    h, c = (hx[0], hx[1]) if isinstance(hx, (list, tuple)) and len(hx) == 2 else (
        hx[0] if isinstance(hx, (list, tuple)) else hx, None)
    hidden = c.shape[-1] if c is not None else h.shape[-1]  # the cell's size (an LSTM's proj_size shrinks h)
    train = bool(train) and torch.is_grad_enabled()
    if torch.is_autocast_enabled("cpu"):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
            flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float16)
            views, offset = [], 0
            for p in params:  # the fp16 copy is one buffer; each weight a view into it (cast, then copied)
                views.append(flat[offset:offset + p.numel()].view(p.shape).copy_(p))
                offset += p.numel()
            params = views
            x, h = x.half(), h.half()
            c = c.half() if c is not None else None
    return CudnnRNN.apply(ws, mode, num_layers, bidirectional, batch_first, hidden, train, x, h, c, *params)


# -- cuDNN attention -----------------------------------------------------------------------
def _matching_layout(q: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An empty tensor of ``shape`` whose dimensions are laid out in the order of
    ``q``'s strides: ``alloc_with_matching_layout`` (``aten/src/ATen/native/transformers/
    sdp_utils.h``), how cuDNN attention allocates its output. A query made contiguous
    in ``[B, H, L, D]`` gives an output that the caller's ``transpose(1, 2)`` leaves
    non-contiguous, so a following ``.contiguous()`` copies it (Whisper, run 15)."""
    order = sorted(range(len(shape)), key=lambda i: q.stride(i))  # stable, as std::stable_sort
    strides, step = [0] * len(shape), 1
    for i in order:
        strides[i] = step
        step *= shape[i]
    return torch.empty_strided(shape, strides, dtype=q.dtype, device=q.device)


def _count_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backward: bool) -> None:
    """The fused kernel's arithmetic and traffic, for the step-time model (PyTorch's own
    ``sdpa_flop_count``/``sdpa_backward_flop_count``; grouped keys expanded to the query's heads)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from ._step_time import count_kernel

    b, h, tq, d = q.shape
    ks, vs = (b, h, k.shape[2], k.shape[3]), (b, h, v.shape[2], v.shape[3])
    out = (b, h, tq, v.shape[3])
    flops = sdpa_backward_flop_count(out, q.shape, ks, vs) if backward else sdpa_flop_count(q.shape, ks, vs)
    moved = (q.numel() + k.numel() + v.numel() + q.numel() // d * v.shape[3]) * q.element_size()
    count_kernel(int(flops), moved * (2 if backward else 1), q.dtype,
                 "_scaled_dot_product_cudnn_attention" + ("_backward" if backward else ""))


class CudnnAttention(torch.autograd.Function):
    """The memory of ``_scaled_dot_product_cudnn_attention`` and its backward."""

    @staticmethod
    def forward(ctx: Any, ws: Workspaces, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        b, h, tq, _ = q.shape
        _count_attention(q, k, v, backward=False)
        out = _matching_layout(q, (b, h, tq, v.shape[-1]))
        lse = q.new_empty((b, h, tq, 1), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse, *([mask] if mask is not None else []))
        ctx.ws = ws
        return out

    @staticmethod
    def backward(ctx: Any, gout: torch.Tensor) -> Any:
        q, k, v = ctx.saved_tensors[:3]
        _count_attention(q, k, v, backward=True)
        extra = q.numel() * 4  # dq accumulated in fp32
        if k.shape[1] != q.shape[1]:  # grouped-query: key/value gradients per query head, then summed
            extra += 2 * q.shape[0] * q.shape[1] * k.shape[2] * k.shape[3] * k.element_size()
        tmp = ctx.ws.hold(extra)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        del tmp
        return None, dq, dk, dv, None


def cudnn_attention(ws: Workspaces, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any) -> torch.Tensor:
    """``scaled_dot_product_attention`` as cuDNN's fused kernel holds it (16-bit, sm90)."""
    ws.libraries.add("cudnn")
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:  # made additive in the query's dtype
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill_(mask.logical_not(), -math.inf)
    return CudnnAttention.apply(ws, q, k, v, mask if isinstance(mask, torch.Tensor) else None)
