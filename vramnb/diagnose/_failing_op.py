"""What the failing allocation is, for the advice that acts on it: the operator that asked (CPU),
its result's shape, whether bf16 autocast would run it in lower precision, and the module call
(the model and its input) it happened in.

* :func:`record` makes, where the storage tracker's dispatch mode sees an operator's allocation fail
  on the CPU, the one record of it (:class:`FailedOp`): its name, its arguments' shapes, strides,
  dtypes, devices, bytes and storage addresses (no tensor, no reference to the user's objects), and,
  the first time they are read, its outputs' shapes from one run on ``meta`` tensors. The call's
  reading (:func:`vramnb.diagnose._op_call.call_reading`) and the autocast gate both read it;
* :func:`read_op` finds the output that was the request among the record's outputs and asks autocast
  itself, on fake tensors (``FakeTensorMode``: no memory, no user code) once the error has unwound,
  whether it would be lowered: its dtype under ``torch.autocast(device, dtype=torch.bfloat16)``
  (PyTorch itself says which operators autocast lowers on that device: ``mm``/``addmm``/convolutions
  are, an ``embedding`` of a float32 weight, ``sort`` or a copy are not); an operator that only follows
  its input's precision (``relu``, ``add``) is lowered where that input is not a parameter;
* :func:`forward_call` finds, among the failing frames, the outermost call of a notebook module
  (``Module._call_impl``: the model and the tensor it was given) and the innermost module call's
  input: the failure happened inside a forward only where such a frame is on the stack.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import torch

__all__ = ["FailedOp", "TensorSpec", "record", "read_op", "forward_call", "given_addresses"]

_LEAVES = (int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: operator namespaces whose kernels are PyTorch's own: another's (a ``torch.library`` custom op of the
#: user's, a library's) has a fake or meta kernel in Python that is their code, never run here
_TORCH_NAMESPACES = frozenset({"aten", "prims"})
_QUANTIZED = frozenset({torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4})


class TensorSpec(NamedTuple):
    """A strided tensor argument of the failing operator, as numbers (no reference to it).

    Attributes:
        shape, stride: in elements.
        dtype: its ``torch.dtype``.
        device: its device type (``"cpu"``).
        param: it is an ``nn.Parameter``.
        address: its storage's data address (0: not read), to tell the model's own input apart.
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str
    param: bool
    address: int


@dataclass(frozen=True, eq=False)
class FailedOp:
    """The ATen operator whose allocation failed, recorded once by the CPU storage tracker's
    dispatch mode where it raised (:func:`record`); bytes, numbers and strings only.

    Attributes:
        name: the overload, ``"aten::sort.stable"`` (``"aten::mm"`` for a default overload).
        packet: its name without namespace and overload, ``"sort"``.
        overload: the overload's name, ``"default"`` where it has none.
        inputs: ``(shape, dtype, layout, bytes)`` of each plain tensor argument (bytes: elements ×
            element size; a sparse tensor's indices and values; a compressed one's index arrays and
            values).
        args, kwargs: the arguments with each strided tensor as a :class:`TensorSpec` (``None``
            where one is something else: a sparse, nested or quantized tensor, a quantized dtype, a
            subclass, an object; the operator is not replayed then).
        outputs: ``(shape, dtype, bytes)`` of each tensor it returns, from one run on ``meta``
            tensors of the inputs' shapes, made the first time it is read (no memory, no user
            code); ``None`` where that cannot be run (a sparse input, no meta kernel, an operator
            outside PyTorch's own namespaces).
    """

    name: str
    packet: str
    overload: str
    inputs: tuple[tuple[tuple[int, ...], str, str, int], ...]
    args: tuple[Any, ...] | None
    kwargs: dict[str, Any] | None

    @cached_property
    def outputs(self) -> tuple[tuple[tuple[int, ...], str, int], ...] | None:
        try:
            return tuple((s, _dtype(d), math.prod(s) * d.itemsize) for s, d in _replay(self, None))
        except Exception:  # noqa: BLE001 - no meta kernel, an argument not rebuilt: the outputs stay unknown
            return None


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _nbytes(t: torch.Tensor) -> int:
    """Elements × element size of a plain tensor (the parts of a sparse one), read without running its code."""
    layout = t.layout
    if layout == torch.strided:
        return t.numel() * t.dtype.itemsize
    parts: tuple[torch.Tensor, ...]
    if layout == torch.sparse_coo:
        parts = (t._indices(), t._values())
    elif layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (t.crow_indices(), t.col_indices(), t.values())
    elif layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = (t.ccol_indices(), t.row_indices(), t.values())
    else:
        raise ValueError(f"no byte count for layout {layout}")
    return sum(p.numel() * p.dtype.itemsize for p in parts)


def _spec(v: Any) -> Any:
    """``v`` with each strided plain tensor as a :class:`TensorSpec`; raises on anything else."""
    tp = type(v)
    if tp in _PLAIN:
        if v.layout != torch.strided or v.is_nested:
            raise ValueError("not replayed: not a strided tensor")
        if v.is_quantized:
            raise ValueError("not replayed: a quantized tensor (meta tensors hold no quantizer)")
        return TensorSpec(tuple(v.shape), tuple(v.stride()), v.dtype, v.device.type, tp is torch.nn.Parameter,
                          _address(v))
    if tp in (list, tuple):
        return tp(_spec(x) for x in v)
    if tp is torch.dtype and v in _QUANTIZED:  # quantize_per_tensor(x, s, z, torch.qint8): its meta kernel
        raise ValueError("not replayed: a quantized result")  # returns x's dtype (torch 2.13): no true output
    if tp in _LEAVES:
        return v
    raise ValueError(f"not replayed: an argument of type {tp.__name__}")


def record(func: Any, args: Any, kwargs: Any) -> FailedOp | None:
    """The :class:`FailedOp` of ``func(*args, **kwargs)`` (an ``OpOverload``), read where it raised:
    only exact ``torch.Tensor``/``nn.Parameter`` arguments are read (a subclass's code never runs),
    and no reference to any argument is kept. ``None`` where the operator cannot be named."""
    try:
        schema = func._schema
        overload = schema.overload_name or "default"
        name = schema.name if overload == "default" else f"{schema.name}.{overload}"
        packet = schema.name.split("::")[-1]
    except Exception:  # noqa: BLE001 - the post-mortem must never fail
        return None
    inputs = []
    try:
        for a in list(args) + list(dict.values(kwargs or {})):
            for t in (a if type(a) in (list, tuple) else (a,)):
                if type(t) in _PLAIN:
                    inputs.append((tuple(t.shape), _dtype(t.dtype), str(t.layout).removeprefix("torch."), _nbytes(t)))
    except Exception:  # noqa: BLE001 - a nested tensor has no single shape: its inputs stay unlisted
        inputs = []
    spec_args: tuple[Any, ...] | None = None
    spec_kwargs: dict[str, Any] | None = None
    try:
        spec_args, spec_kwargs = _spec(tuple(args)), {k: _spec(v) for k, v in dict.items(kwargs or {})}
    except Exception:  # noqa: BLE001 - not replayed
        spec_args = spec_kwargs = None
    return FailedOp(name, packet, overload, tuple(inputs), spec_args, spec_kwargs)


def _address(t: Any) -> int:
    """The data address of a plain tensor's storage (0: none read), to tell the model's own input apart."""
    try:
        return int(t.untyped_storage().data_ptr()) if type(t) in _PLAIN else 0
    except Exception:  # noqa: BLE001
        return 0


def _resolve(name: str, overload: str) -> Any:
    ns, op = name.split("::")
    if ns not in _TORCH_NAMESPACES:
        raise ValueError(f"not replayed: {ns}:: is not PyTorch's own")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def rebuild(v: Any, device: str | None = None, lower: int = 0, given: frozenset[int] = frozenset()) -> Any:
    """``v`` (:func:`_spec`'s form) with each :class:`TensorSpec` an uninitialised strided tensor of its
    shape, strides and dtype, on ``device`` (``None``: its own device type; a ``torch.device`` argument
    moves too), under whatever fake mode is active; ``lower``: see :func:`_replay`."""
    if type(v) is TensorSpec:
        dtype = v.dtype
        if dtype == torch.float32 and (lower == 2 or (lower == 1 and not v.param and v.address not in given)):
            dtype = torch.bfloat16
        return torch.empty_strided(v.shape, v.stride, dtype=dtype, device=device or v.device)
    if type(v) in (list, tuple):
        return type(v)(rebuild(x, device, lower, given) for x in v)
    if device is not None and type(v) is torch.device:
        return torch.device(device)
    return v


def _replay(op: FailedOp, autocast: str | None, lower: int = 0,
            given: frozenset[int] = frozenset()) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The ``(shape, dtype)`` of each tensor the operator returns: without ``autocast``, run on
    ``meta`` tensors; with it, on fake tensors of the arguments' devices under bf16 autocast on
    device type ``autocast`` (``FakeTensorMode`` without its fallback to real kernels, which would
    allocate what failed). ``lower``: 1, floating inputs that are not parameters made bfloat16 first
    (what a lowered operator before it would have given); 2, the parameters too (what autocast gives
    a convolution or a linear it casts, which reach the dispatcher as ``convolution``/``addmm`` with
    both operands cast). Tensors whose storage address is in ``given`` (what the model was given: no
    operation of its forward made them) stay float32 at ``lower`` 1. No mode, ``__torch_function__``
    or kernel of the user's runs: modes are set aside, operators outside PyTorch's own namespaces
    refused."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _disable_current_modes

    if op.args is None or op.kwargs is None:
        raise ValueError("not replayed")
    func = _resolve(op.name.split(".")[0], op.overload)
    with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad():
        if autocast is None:
            args, kwargs = rebuild(op.args, "meta"), {k: rebuild(v, "meta") for k, v in op.kwargs.items()}
            out = func(*args, **kwargs)
        else:
            with FakeTensorMode(allow_fallback_kernels=False):
                args = rebuild(op.args, None, lower, given)
                kwargs = {k: rebuild(v, None, lower, given) for k, v in op.kwargs.items()}
                with torch.autocast(autocast, dtype=torch.bfloat16, cache_enabled=False):
                    out = func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [(tuple(o.shape), o.dtype) for o in outs if isinstance(o, torch.Tensor)]


def read_op(op: FailedOp | None, requested: int | None, device: str,
            given: frozenset[int] = frozenset()) -> tuple[str, tuple[int, ...] | None, bool | None, str]:
    """``(operator, shape of its result of exactly ``requested`` bytes (``None``: none is), lowered,
    how)`` for the recorded operator: ``lowered`` is whether that result would be in bfloat16
    under bf16 autocast on ``device`` (``None``: not known), ``how`` says why
    (``"runs it in bfloat16"``, ``"computes in its inputs' precision..."``, or ``""``). ``given``: storage
    addresses of what the model was given (:func:`forward_call`): an input among them is no lowered
    operation's output, so an operator that follows its input's precision keeps float32 on it. The
    results' shapes are the record's own (:attr:`FailedOp.outputs`); autocast's are replayed here, only
    where the request is a float32 result."""
    if op is None or op.args is None:
        return "", None, None, ""
    name = op.packet + ("" if op.overload == "default" else f".{op.overload}")
    plain = op.outputs
    if plain is None:  # an operator it could not run: nothing known
        return name, None, None, ""
    sizes = [o for o in plain if o[2] == requested]
    if not sizes:  # a buffer inside the operator: float32 under autocast where autocast runs the operator in float32
        return name, None, _runs_in_float32(op, plain, device.split(":")[0]), ""
    index = plain.index(sizes[0])
    shape = sizes[0][0]
    if sizes[0][1] != "float32":  # int64 indices, a bool mask: autocast leaves them
        return name, shape, False, ""
    kind = device.split(":")[0]
    try:
        cast = _replay(op, kind)
        if cast[index][1] in (torch.bfloat16, torch.float16):
            return name, shape, True, "runs it in bfloat16"
    except Exception:  # noqa: BLE001 - autocast on a device this build lacks: not known
        return name, shape, None, ""
    follow, at = None, 0
    for lower in (1, 2):  # its own inputs in bf16; where their dtypes must match (a convolution), all of them
        try:
            follow, at = _replay(op, kind, lower=lower, given=given), lower
            break
        except Exception:  # noqa: BLE001 - mixed dtypes refused: try them all lowered
            continue
    if follow is not None and at == 2 and follow[index][1] in (torch.bfloat16, torch.float16):
        # its operands must share a dtype (a convolution, a linear's addmm): autocast casts them all where it
        # lowers the call above it (conv2d, linear), which reaches the dispatcher as this operator
        return name, shape, True, "runs it in bfloat16 (autocast casts all its operands)"
    if follow is not None and follow[index][1] in (torch.bfloat16, torch.float16):
        # it computes in its inputs' precision (stack, cat, add): bfloat16 only where every input comes from an
        # operation autocast lowers, which the record does not show (a residual sum with a float32 embedding, a
        # LayerNorm's float32 output keep it float32): not known
        return name, shape, None, ""
    return name, shape, False, ""


def _runs_in_float32(op: FailedOp, plain: tuple[Any, ...], kind: str) -> bool | None:
    """``False`` where every result of the float32 operator stays float32 under bf16 autocast, its
    inputs given as recorded and given in bfloat16 alike (autocast's float32 list: ``mse_loss``,
    ``log_softmax``; its buffers then stay float32 too), else ``None`` (not known: a buffer's dtype
    is not a result's)."""
    if not plain or any(o[1] != "float32" for o in plain):
        return None
    try:
        for lower in (0, 1):
            if any(dtype != torch.float32 for _, dtype in _replay(op, kind, lower=lower)):
                return None
    except Exception:  # noqa: BLE001 - not replayed: not known
        return None
    return False


def _first_tensor(args: Any, kwargs: Any) -> Any:
    for v in list(args if type(args) is tuple else ()) + list(dict.values(kwargs) if type(kwargs) is dict else ()):
        if type(v) in _PLAIN:
            return v
    return None


def given_addresses(frames: list[Any]) -> frozenset[int]:
    """Storage addresses of the tensors the outermost module call on the stack was given."""
    from .._graph import frame_locals

    out: frozenset[int] = frozenset()
    for frame in frames:
        code = frame.f_code
        if code.co_name != "_call_impl" or not code.co_filename.endswith(_MODULE_FILE):
            continue
        loc = dict(frame_locals(frame))
        args, kwargs = loc.get("args"), loc.get("kwargs")
        loc.clear()
        vals = list(args if type(args) is tuple else ()) + list(dict.values(kwargs) if type(kwargs) is dict else ())
        found = frozenset(a for a in (_address(v) for v in vals) if a)
        out = found or out
    return out


def forward_call(frames: list[Any], namespace: Any) -> tuple[str, str, tuple[int, ...], tuple[int, ...]] | None:
    """``(model, its input's name, its input's shape, the innermost module's input's shape)`` where
    a module's forward is on the failing stack (``frames``, innermost first): ``model`` is the
    notebook name (in ``namespace``) of the outermost module called (else ``"the model"``), its input
    the first tensor it was given (named as the notebook names it, else ``"its input"``). ``None``
    where no module call is on the stack or none was given a tensor. Reads frames' locals only."""
    from .._graph import frame_locals

    outer = inner = None
    for frame in frames:
        code = frame.f_code
        if code.co_name != "_call_impl" or not code.co_filename.endswith(_MODULE_FILE):
            continue
        loc = dict(frame_locals(frame))
        me, x = loc.get("self"), _first_tensor(loc.get("args"), loc.get("kwargs"))
        loc.clear()
        if not issubclass(type(me), torch.nn.Module) or x is None:
            continue
        if inner is None:
            inner = tuple(x.shape)
        outer = (me, x)
    if outer is None or inner is None:
        return None
    me, x = outer
    model = label = None
    if type(namespace) is dict:
        for k, v in list(dict.items(namespace)):
            if not isinstance(k, str) or k.startswith("_"):
                continue
            if model is None and v is me:
                model = k
            elif label is None and v is x:
                label = k
    return model or "the model", label or "its input", tuple(x.shape), inner
