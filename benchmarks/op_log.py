"""Every ATen operator of a step, with what decides its kernel and what it allocates.

The op-level conformance of the predictions issue (12): the same logger runs in a real
CUDA step (:class:`OpLog` with ``cuda=True``: the caching allocator's readings around each
operator: allocated before, peak during, allocated after) and in an estimate's fake step
(:func:`logged_estimate`, below the estimate's dispatcher kernels, so it sees the operators
CUDA's modelled choices run). ``compare.py`` lines the two up.

A row: ``op`` (``aten::mm``), ``in`` (tensor arguments as ``dtype[shape]`` with ``!`` when
not contiguous, other arguments as they are), ``out`` (each output tensor's dtype, shape and
storage bytes), ``bwd`` (ran in autograd's backward), and on CUDA ``before``/``peak``/``after``
(bytes; ``peak - max(before, after)`` is memory the operator used and gave back: workspaces
and internal temporaries the dispatcher never sees).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SHORT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8"}


def _arg(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        s = f"{_SHORT.get(a.dtype, str(a.dtype))}{list(a.shape)}"
        return s if a.is_contiguous() or a.dim() < 2 else s + "!"
    if isinstance(a, (list, tuple)):
        return [_arg(x) for x in a][:16]
    if isinstance(a, (bool, int, float, str)) or a is None:
        return a
    if isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(a)
    return type(a).__name__


def _outs(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        try:
            nbytes = out.untyped_storage().nbytes()
        except Exception:  # noqa: BLE001 - sparse or other storage-less tensors
            nbytes = -1
        return [[_SHORT.get(out.dtype, str(out.dtype)), list(out.shape), nbytes]]
    if isinstance(out, (list, tuple)):
        return [o for x in out for o in _outs(x)]
    return []


class OpLog(TorchDispatchMode):
    """Log each operator (see the module's docstring). ``step`` labels the rows."""

    def __init__(self, cuda: bool = False) -> None:
        super().__init__()
        self.cuda = cuda
        self.rows: list[dict[str, Any]] = []
        self.step = 0

    def record(self, func: Any, args: Any, kwargs: Any, out: Any, before: int | None = None) -> None:
        row: dict[str, Any] = {"op": str(func.overloadpacket._qualified_op_name) + (
            "" if func._overloadname == "default" else "." + func._overloadname),
            "in": [_arg(a) for a in args] + ([{k: _arg(v) for k, v in kwargs.items()}] if kwargs else []),
            "out": _outs(out), "bwd": torch._C._current_autograd_node() is not None, "step": self.step}
        if before is not None:
            row.update(before=before, peak=torch.cuda.max_memory_allocated(), after=torch.cuda.memory_allocated())
        self.rows.append(row)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        before = None
        if self.cuda:
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        out = func(*args, **kwargs)
        if not func._schema.name.startswith("prim::"):
            self.record(func, args, kwargs, out, before)
        return out


@contextlib.contextmanager
def logged_estimate(log: OpLog) -> Any:
    """While active, every :func:`vramnb.estimate` logs its fake step's operators into ``log``
    (rows labelled with the step index), seen just above the fake mode: after CUDA's modelled
    choices (attention backend, autocast, fused dropout) have been made."""
    from vramnb.predict import _estimate as E

    base, one_step = E.KernelFixes, E._one_step

    class Logged(base):  # type: ignore[misc, valid-type]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if not func._schema.name.startswith("prim::"):
                log.record(func, args, kwargs or {}, out)
            return out

    def stepped(plan: Any, depth: Any, x: Any, i: int) -> Any:
        log.step = i
        return one_step(plan, depth, x, i)

    E.KernelFixes, E._one_step = Logged, stepped
    try:
        yield log
    finally:
        E.KernelFixes, E._one_step = base, one_step
