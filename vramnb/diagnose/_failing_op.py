"""What the failing allocation is, for the advice that acts on it: the operator that asked (CPU),
its result's shape, whether bf16 autocast would run it in lower precision, and the module call
(the model and its input) it happened in.

* :func:`op_spec` records, where the storage tracker's dispatch mode sees an operator fail on the
  CPU, the operator's name and its arguments' shapes, strides, dtypes and devices (no tensor, no
  reference to the user's objects);
* :func:`read_op` replays that operator on fake tensors of those shapes (``FakeTensorMode``: no
  memory, no user code) once the error has unwound: the shape of the result that was the request,
  and its dtype under ``torch.autocast(device, dtype=torch.bfloat16)`` (PyTorch itself says
  which operators autocast lowers on that device: ``mm``/``addmm``/convolutions are, an
  ``embedding`` of a float32 weight, ``sort`` or a copy are not); an operator that only follows its
  input's precision (``relu``, ``add``) is lowered where that input is not a parameter;
* :func:`forward_call` finds, among the failing frames, the outermost call of a notebook module
  (``Module._call_impl``: the model and the tensor it was given) and the innermost module call's
  input: the failure happened inside a forward only where such a frame is on the stack.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["op_spec", "read_op", "forward_call", "given_addresses"]

_LEAVES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")


def op_spec(func: Any, args: Any, kwargs: Any) -> tuple[str, str, Any, Any] | None:
    """``(namespace::name, overload, args, kwargs)`` of an operator call, each tensor as
    ``("T", shape, stride, dtype name, device type, is a parameter)``; ``None`` where an argument
    is neither a tensor nor a plain value (nothing is replayed then)."""
    try:
        schema = func._schema

        def spec(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                if v.layout != torch.strided:
                    raise ValueError
                return ("T", tuple(v.shape), tuple(v.stride()), str(v.dtype).split(".")[-1], v.device.type,
                        type(v) is torch.nn.Parameter, _address(v))
            if type(v) in (list, tuple):
                return type(v)(spec(x) for x in v)
            if type(v) in _LEAVES:
                return v
            raise ValueError

        return schema.name, schema.overload_name or "default", spec(tuple(args)), \
            {k: spec(v) for k, v in (kwargs or {}).items()}
    except Exception:  # noqa: BLE001 - nothing recorded rather than a broken post-mortem
        return None


def _address(t: Any) -> int:
    """The data address of a plain tensor's storage (0: none read), to tell the model's own input apart."""
    try:
        return int(t.untyped_storage().data_ptr()) if type(t) in (torch.Tensor, torch.nn.Parameter) else 0
    except Exception:  # noqa: BLE001
        return 0


def _resolve(name: str, overload: str) -> Any:
    ns, op = name.split("::")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _replay(spec: tuple[str, str, Any, Any], autocast: str | None, lower: int = 0,
            given: frozenset[int] = frozenset()) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The ``(shape, dtype)`` of each tensor the operator returns, run on fake tensors; under
    bf16 autocast on device type ``autocast`` where given; ``lower``: 1, floating inputs that are
    not parameters made bfloat16 first (what a lowered operator before it would have given); 2,
    the parameters too (what autocast gives a convolution or a linear it casts, which reach the
    dispatcher as ``convolution``/``addmm`` with both operands cast). Tensors whose storage address
    is in ``given`` (what the model was given: no operation of its forward made them) stay float32
    at ``lower`` 1."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    func = _resolve(spec[0], spec[1])
    with FakeTensorMode():
        def make(v: Any) -> Any:
            if type(v) is tuple and len(v) == 7 and v[0] == "T":
                dtype = getattr(torch, v[3])
                if dtype == torch.float32 and (lower == 2 or (lower == 1 and not v[5] and v[6] not in given)):
                    dtype = torch.bfloat16
                return torch.empty_strided(v[1], v[2], dtype=dtype, device=v[4])
            if type(v) in (list, tuple):
                return type(v)(make(x) for x in v)
            return v

        args, kwargs = make(spec[2]), {k: make(v) for k, v in spec[3].items()}
        with torch.no_grad():
            if autocast is not None:
                with torch.autocast(autocast, dtype=torch.bfloat16, cache_enabled=False):
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [(tuple(o.shape), o.dtype) for o in outs if isinstance(o, torch.Tensor)]


def read_op(spec: tuple[str, str, Any, Any] | None, requested: int | None, device: str,
            given: frozenset[int] = frozenset()) -> tuple[str, tuple[int, ...] | None, bool | None, str]:
    """``(operator, shape of its result of exactly ``requested`` bytes (``None``: none is), lowered,
    how)`` for the recorded operator: ``lowered`` is whether that result would be in bfloat16
    under bf16 autocast on ``device`` (``None``: not known), ``how`` says why
    (``"runs it in bfloat16"``, ``"computes in its inputs' precision..."``, or ``""``). ``given``: storage
    addresses of what the model was given (:func:`forward_call`): an input among them is no lowered
    operation's output, so an operator that follows its input's precision keeps float32 on it."""
    if spec is None:
        return "", None, None, ""
    name = f"{spec[0].split('::')[-1]}" + ("" if spec[1] == "default" else f".{spec[1]}")
    try:
        plain = _replay(spec, None)
    except Exception:  # noqa: BLE001 - an operator fake tensors cannot run: nothing known
        return name, None, None, ""
    sizes = [(s, d) for s, d in plain if _numel(s) * _itemsize(d) == requested]
    if not sizes:
        return name, None, None, ""
    index = plain.index(sizes[0])
    shape = sizes[0][0]
    if sizes[0][1] != torch.float32:  # int64 indices, a bool mask: autocast leaves them
        return name, shape, False, ""
    kind = device.split(":")[0]
    try:
        cast = _replay(spec, kind)
        if cast[index][1] in (torch.bfloat16, torch.float16):
            return name, shape, True, "runs it in bfloat16"
    except Exception:  # noqa: BLE001 - autocast on a device this build lacks: not known
        return name, shape, None, ""
    follow = None
    for lower in (1, 2):  # its own inputs in bf16; where their dtypes must match (a convolution), all of them
        try:
            follow = _replay(spec, kind, lower=lower, given=given)
            break
        except Exception:  # noqa: BLE001 - mixed dtypes refused: try them all lowered
            continue
    if follow is not None and follow[index][1] in (torch.bfloat16, torch.float16):
        return name, shape, True, ("computes in its inputs' precision, and under autocast those are bfloat16 where "
                                   "they come from (or are cast for) an operation autocast lowers")
    return name, shape, False, ""


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _first_tensor(args: Any, kwargs: Any) -> Any:
    for v in list(args if type(args) is tuple else ()) + list(dict.values(kwargs) if type(kwargs) is dict else ()):
        if type(v) in (torch.Tensor, torch.nn.Parameter):
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
