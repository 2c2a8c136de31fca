"""Which objects hold device memory: variables, output history, tracebacks.

Walks a namespace (a notebook's ``user_ns``) and finds the tensor storages each
name keeps alive on one device: tensors (and their ``.grad``), modules
(parameters, buffers, gradients), optimizers (state and the parameters they
hold), containers and plain objects a few levels deep. A storage shared by
several names (a view, tied weights, a model also held by an optimizer) is
counted once in the total, and shown as *shared* on the smaller holders.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._render import Rendered, Table
from ._tracker import storage_key, storage_of
from ._units import format_bytes

__all__ = ["Holder", "HoldersReport", "storages_held", "find_holders"]

_MAX_DEPTH = 3
_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, str, bytes)


def _on_device(t: torch.Tensor, device: torch.device) -> bool:
    try:
        d = t.device
    except Exception:
        return False
    return d.type == device.type and (device.index is None or d.index in (None, device.index))


def storages_held(obj: Any, device: torch.device, depth: int = _MAX_DEPTH) -> dict[int, int]:
    """``{storage key: bytes}`` of the storages on ``device`` that ``obj`` keeps alive.

    Follows tensors (and a leaf tensor's ``.grad``), ``nn.Module`` parameters,
    buffers and gradients, ``torch.optim.Optimizer`` state and parameters,
    mappings, sequences and sets, and the ``__dict__`` of plain objects, up to
    ``depth`` levels of nesting.
    """
    out: dict[int, int] = {}
    for t in _tensors(obj, depth, set()):
        if _on_device(t, device):
            st = storage_of(t)
            if st is not None:
                out[storage_key(st)] = st.nbytes()
    return out


def _tensors(obj: Any, depth: int, seen: set[int]) -> Iterator[torch.Tensor]:
    if id(obj) in seen or isinstance(obj, _SKIP_TYPES) or obj is None:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
        try:
            g = obj.grad if obj.is_leaf else None
        except Exception:
            g = None
        if g is not None:
            yield g
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
    if depth <= 0:
        return
    if isinstance(obj, Mapping):
        items: Iterable[Any] = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif hasattr(obj, "__dict__") and not _is_tooling(obj):
        try:
            items = list(vars(obj).values())
        except TypeError:
            return
    else:
        return
    for item in items:
        yield from _tensors(item, depth - 1, seen)


_TOOLING = ("IPython.", "ipykernel.", "vramnb.", "traitlets.", "jupyter_client.", "zmq.", "tornado.", "asyncio.")


def _is_tooling(obj: Any) -> bool:
    """Objects of the notebook machinery itself (the shell, kernels, vramnb):
    never followed, since they reach the whole namespace."""
    if isinstance(obj, types.FrameType):
        return True
    mod = getattr(type(obj), "__module__", "") or ""
    return mod.startswith(_TOOLING) or mod in ("IPython", "vramnb", "ipykernel")


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
    if isinstance(obj, torch.Tensor):
        return f"{tuple(obj.shape)} {str(obj.dtype).replace('torch.', '')}"
    if isinstance(obj, torch.nn.Module):
        ps = storages_held(list(obj.parameters()), device, 1)
        grads = storages_held([p.grad for p in obj.parameters() if p.grad is not None], device, 1)
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
    return ""


@dataclass
class Holder:
    """One name and the memory it keeps alive on the device.

    Attributes:
        name: the variable (or ``Out``, ``_``, ``last exception``...).
        kind: ``Tensor``, ``Module``, ``Optimizer``, ``list``...
        nbytes: bytes of all storages it keeps alive.
        unique: bytes no larger holder listed before it also keeps alive.
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
        reserved, total_memory, free, non_pytorch: device state where known.
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
            state.append(f"free {format_bytes(self.free)} of {format_bytes(self.total_memory)}")
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
    hidden: Mapping[str, Any] | None = None,
    skip: Iterable[str] = (),
    limit: int | None = None,
) -> list[Holder]:
    """Rank the names in ``namespace`` (and the out-of-sight ``hidden`` holders)
    by the device memory they keep alive.

    Args:
        namespace: name → object (a notebook's ``user_ns``).
        device: the device whose storages count.
        hidden: extra out-of-sight holders, e.g. ``{"Out": shell.user_ns["Out"]}``.
        skip: names in ``namespace`` to ignore (IPython's own variables).
        limit: keep only the largest ``limit`` rows.

    Returns:
        :class:`Holder` rows, largest first; a storage is *unique* to the first
        (largest) holder that keeps it.
    """
    skip = set(skip)
    found: list[tuple[str, Any, dict[int, int], bool]] = []
    for name, obj in list(namespace.items()):
        if name in skip or name.startswith("_"):
            continue
        held = storages_held(obj, device)
        if held:
            found.append((name, obj, held, False))
    for name, obj in (hidden or {}).items():
        held = storages_held(obj, device)
        if held:
            found.append((f"({name})", obj, held, True))
    # Visible names claim shared storages first; among them modules before
    # optimizers (so an optimizer's own share is its state) before the rest.
    rank = {"Module": 0, "Optimizer": 1}
    found.sort(key=lambda r: (r[3], rank.get(_kind(r[1]), 2), -sum(r[2].values())))
    claimed: set[int] = set()
    rows = []
    for name, obj, held, is_hidden in found:
        unique = sum(n for k, n in held.items() if k not in claimed)
        claimed.update(held)
        rows.append(Holder(name, _kind(obj), sum(held.values()), unique, _detail(obj, device), is_hidden))
    rows.sort(key=lambda h: -h.nbytes)
    return rows[:limit] if limit else rows

