"""Which objects hold device memory: variables, output history, tracebacks.

Walks a namespace (a notebook's ``user_ns``) and finds the tensor storages each
name keeps alive on one device: tensors (and their ``.grad``), modules
(parameters, buffers, gradients), optimizers (state and the parameters they
hold), dicts, sequences and sets, and the ``__dict__`` of plain objects, a
few levels deep. A storage shared by several names (a view, tied weights, a
model also held by an optimizer) is counted once in the total, and shown as
shared on the later holders. Nothing here can fail because of a strange user
object: whatever raises while being inspected is skipped.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._render import Rendered, Table
from ._tracker import graph_tensors, storages_of_tensor
from ._units import format_bytes

__all__ = ["Holder", "HoldersReport", "storages_held", "find_holders"]

_MAX_DEPTH = 4
_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, str, bytes,
               bytearray, int, float, complex, bool, types.FrameType, types.CodeType)
_TOOLING = ("IPython.", "ipykernel.", "vramnb.", "traitlets.", "jupyter_client.", "zmq.", "tornado.", "asyncio.")


def _is_tooling(obj: Any) -> bool:
    """Objects of the notebook machinery itself (the shell, kernels, vramnb):
    never followed, since they reach the whole namespace."""
    mod = getattr(type(obj), "__module__", "") or ""
    return mod.startswith(_TOOLING) or mod in ("IPython", "vramnb", "ipykernel")


def _on_device(st: torch.UntypedStorage, device: torch.device) -> bool:
    d = st.device
    return d.type == device.type and (device.index is None or d.index in (None, device.index))


def storages_held(obj: Any, device: torch.device, depth: int = _MAX_DEPTH) -> dict[int, int]:
    """``{storage key: bytes}`` of the storages on ``device`` that ``obj`` keeps alive.

    Follows tensors (a leaf tensor's ``.grad``, the tensors saved for backward
    in the autograd graph of a result that requires grad, the parts of sparse
    tensors and of wrapper subclasses), ``nn.Module`` parameters, buffers and gradients,
    ``torch.optim.Optimizer`` state and parameters, dicts, lists, tuples and
    sets, and the ``__dict__`` of plain objects, up to ``depth`` levels of
    nesting. Fake and meta tensors hold no device memory and are skipped.
    """
    out: dict[int, int] = {}
    for t in _tensors(obj, depth, set()):
        for key, st in storages_of_tensor(t):
            if _on_device(st, device):
                out[key] = st.nbytes()
    return out


def _tensors(obj: Any, depth: int, seen: set[int]) -> Iterator[torch.Tensor]:
    try:
        if obj is None or id(obj) in seen or isinstance(obj, _SKIP_TYPES):
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            yield obj
            g = obj.grad if obj.is_leaf else None
            if g is not None:
                yield g
            if obj.grad_fn is not None:  # a result that requires grad keeps its graph's saved tensors alive
                yield from graph_tensors(obj.grad_fn, seen, grads=False)
            return
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                yield from _tensors(p, 0, seen)
            yield from obj.buffers()
            return
        if isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                for p in group["params"]:
                    yield from _tensors(p, 0, seen)
            for state in obj.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        yield v
            return
        if depth <= 0 or _is_tooling(obj):
            return
        if isinstance(obj, dict):  # not every Mapping: a shelf would load itself from disk
            items: Iterable[Any] = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = list(obj)
        else:
            d = object.__getattribute__(obj, "__dict__") if hasattr(type(obj), "__dict__") else None
            if not isinstance(d, dict):
                return
            items = list(d.values())
    except Exception:  # a user object that raises when inspected holds nothing we can see
        return
    for item in items:
        yield from _tensors(item, depth - 1, seen)


def _kind(obj: Any) -> str:
    if isinstance(obj, torch.nn.Parameter):
        return "Parameter"
    if isinstance(obj, torch.Tensor):
        return "Tensor"
    if isinstance(obj, torch.nn.Module):
        return "Module"
    if isinstance(obj, torch.optim.Optimizer):
        return "Optimizer"
    return type(obj).__name__


def _detail(obj: Any, device: torch.device) -> str:
    try:
        if isinstance(obj, torch.Tensor):
            layout = "" if obj.layout == torch.strided else f" {str(obj.layout).replace('torch.', '')}"
            return f"{tuple(obj.shape)} {str(obj.dtype).replace('torch.', '')}{layout}"
        if isinstance(obj, torch.nn.Module):
            params = list(obj.parameters())
            ps = storages_held(params, device, 1)
            grads = storages_held([p.grad for p in params if p.grad is not None], device, 1)
            bufs = storages_held(list(obj.buffers()), device, 1)
            parts = [f"parameters {format_bytes(sum(ps.values()))}"]
            if grads:
                parts.append(f"gradients {format_bytes(sum(grads.values()))}")
            if bufs:
                parts.append(f"buffers {format_bytes(sum(bufs.values()))}")
            return " · ".join(parts)
        if isinstance(obj, torch.optim.Optimizer):
            state = [v for s in obj.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
            return f"state {format_bytes(sum(storages_held(state, device, 1).values()))}"
    except Exception:
        return ""
    return ""


@dataclass
class Holder:
    """One name and the memory it keeps alive on the device.

    Attributes:
        name: the variable (or ``(Out)``, ``(_ __ ___)``, ``(last exception)``).
        kind: ``Tensor``, ``Module``, ``Optimizer``, ``list``...
        nbytes: bytes of all storages it keeps alive.
        unique: bytes no holder listed before it also keeps alive.
        detail: shape and dtype, or the parameter/gradient/state split.
        hidden: True for holders the user does not see (output history,
            the last exception's traceback).
    """

    name: str
    kind: str
    nbytes: int
    unique: int
    detail: str = ""
    hidden: bool = False


@dataclass
class HoldersReport(Rendered):
    """What holds memory on one device, largest first.

    Attributes:
        device: the device measured.
        holders: :class:`Holder` rows, largest first.
        total: bytes held by all of them together, each storage counted once.
        allocated: bytes allocated on the device now (all tensors, also those
            held by no name).
        reserved, total_memory, free, non_pytorch: device state where known
            (on CPU, ``total_memory`` and ``free`` are the host's RAM).
    """

    device: str
    holders: list[Holder] = field(default_factory=list)
    total: int = 0
    allocated: int | None = None
    reserved: int | None = None
    total_memory: int | None = None
    free: int | None = None
    non_pytorch: int | None = None
    method: str = ""

    def _table(self) -> Table:
        t = Table(f"vram · {self.device} · what holds the memory", ("name", "type", "holds", "not shared", "detail"))
        for h in self.holders:
            t.rows.append((h.name, h.kind, format_bytes(h.nbytes), format_bytes(h.unique), h.detail))
        state = []
        if self.allocated is not None:
            state.append(f"allocated {format_bytes(self.allocated)}")
        if self.reserved is not None:
            state.append(f"reserved {format_bytes(self.reserved)}")
        if self.non_pytorch is not None:
            state.append(f"non-PyTorch {format_bytes(self.non_pytorch)}")
        if self.free is not None and self.total_memory is not None:
            where = "host RAM " if self.device == "cpu" else ""
            state.append(f"{where}free {format_bytes(self.free)} of {format_bytes(self.total_memory)}")
        if not self.holders:
            t.note("no variable holds tensors on this device")
        t.note(f"named above: {format_bytes(self.total)} (shared storages counted once)")
        if state:
            t.note("device: " + " · ".join(state))
        if self.allocated is not None and self.allocated > self.total:
            t.note(
                f"{format_bytes(self.allocated - self.total)} allocated is held by no name listed "
                "(autograd graphs, objects outside the namespace, caches)"
            )
        if any(h.hidden and h.unique for h in self.holders):
            t.note("rows in parentheses are held out of sight: `%vram free` releases them", warn=True)
        if self.method:
            t.note(f"measured by the {self.method}")
        return t

    def to_records(self) -> list[dict[str, Any]]:
        return [vars(h).copy() for h in self.holders]


def find_holders(
    namespace: Mapping[str, Any],
    device: torch.device,
    *,
    hidden: Mapping[str, tuple[str, Any]] | None = None,
    skip: Iterable[str] = (),
    limit: int | None = None,
) -> list[Holder]:
    """Rank the names in ``namespace`` (and the out-of-sight ``hidden`` holders)
    by the device memory they keep alive.

    Args:
        namespace: name → object (a notebook's ``user_ns``).
        device: the device whose storages count.
        hidden: out-of-sight holders, name → (kind shown, object), e.g.
            ``{"Out": ("output history", [...])}``.
        skip: names in ``namespace`` to ignore (IPython's own variables).
        limit: keep only the largest ``limit`` rows.

    Returns:
        :class:`Holder` rows, largest first. A storage is *unique* to the first
        holder that claims it: visible names first, modules before optimizers
        (so an optimizer's own share is its state) before the rest, larger first.
    """
    skip = set(skip)
    found: list[tuple[str, str, Any, dict[int, int], bool]] = []
    for name, obj in list(namespace.items()):
        if name in skip or obj is namespace:
            continue
        held = storages_held(obj, device)
        if held:
            found.append((name, _kind(obj), obj, held, False))
    for name, (kind, obj) in (hidden or {}).items():
        held = storages_held(obj, device)
        if held:
            found.append((f"({name})", kind, obj, held, True))
    rank = {"Module": 0, "Optimizer": 1}
    found.sort(key=lambda r: (r[4], rank.get(r[1], 2), -sum(r[3].values())))
    claimed: set[int] = set()
    rows = []
    for name, kind, obj, held, is_hidden in found:
        unique = sum(n for k, n in held.items() if k not in claimed)
        claimed.update(held)
        rows.append(Holder(name, kind, sum(held.values()), unique, "" if is_hidden else _detail(obj, device), is_hidden))
    rows.sort(key=lambda h: -h.nbytes)
    return rows[:limit] if limit else rows
