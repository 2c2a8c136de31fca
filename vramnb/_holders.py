"""Which objects hold device memory: variables, output history, tracebacks.

Walks a namespace (a notebook's ``user_ns``) and finds the tensor storages each
name keeps alive on one device: tensors (and their ``.grad``), modules
(parameters, buffers, gradients), optimizers (state and the parameters they
hold), dicts, sequences and sets, and the ``__dict__`` of plain objects, a
few levels deep, and the autograd graphs of results that require grad (never
running saved-tensor hooks: see :mod:`vramnb._graph`). A storage shared by
several names (a view, tied weights, a model also held by an optimizer, a leaf
also kept by a graph, one memory reached through two storage objects such as
``torch.from_numpy(t.numpy())``) is counted once in the total and is "not shared" for
none of them: "not shared" is what deleting that name alone frees. Nothing here can fail because of a strange user
object: whatever raises while being inspected is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._graph import MAX_DEPTH, held_tensors
from ._render import Rendered, Table
from ._storages import data_range, same_memory, storages_of_tensor
from ._units import format_bytes

__all__ = ["Holder", "HoldersReport", "storages_held", "find_holders"]

_MAX_DEPTH = MAX_DEPTH


def _on_device(st: torch.UntypedStorage, device: torch.device) -> bool:
    d = st.device
    return d.type == device.type and (device.index is None or d.index in (None, device.index))


def storages_held(obj: Any, device: torch.device, depth: int = _MAX_DEPTH,
                  ranges: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """``{storage key: bytes}`` of the storages on ``device`` that ``obj`` keeps alive.

    Follows tensors (a leaf tensor's ``.grad``; for a result that requires
    grad, its autograd graph: the tensors saved for backward, read without
    running saved-tensor hooks, what those hooks packed, and the leaves it
    accumulates into with their gradients), bare storages, the parts of sparse
    tensors and of wrapper subclasses, ``nn.Module`` parameters, buffers and
    gradients, ``torch.optim.Optimizer`` state and parameters, dicts, lists,
    tuples and sets, and the ``__dict__`` of plain objects, up to ``depth``
    levels of nesting (see :func:`vramnb._graph.held_tensors`). Fake and meta
    tensors hold no device memory and are skipped. ``ranges``, if given, gets each
    storage's data range (:func:`vramnb._storages.data_range`), to find storages
    over the same bytes.
    """
    out: dict[int, int] = {}
    for t in held_tensors(obj, depth, {}):
        for key, st in storages_of_tensor(t):
            if _on_device(st, device):
                out[key] = st.nbytes()
                if ranges is not None and key not in ranges:
                    r = data_range(st)
                    if r is not None:
                        ranges[key] = r
    return out


def _same_bytes_once(helds: list[dict[int, int]], ranges: dict[int, tuple[int, int]]) -> None:
    """Rename, in place, storages over another one's bytes to that one (one
    memory reached through two ``StorageImpl`` objects counts once)."""
    alias = same_memory(ranges)
    if not alias:
        return
    for held in helds:
        for k in [k for k in held if k in alias]:
            del held[k]
            held[alias[k]] = ranges[alias[k]][1]


def _own(tensors: Iterable[Any], device: torch.device) -> dict[int, int]:
    """The storages of exactly these tensors (not their gradients or graphs)."""
    out: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        for key, st in storages_of_tensor(t):
            if _on_device(st, device):
                out[key] = st.nbytes()
    return out


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
            ps = _own(params, device)  # the parameters alone: their gradients are the next part
            grads = _own((p.grad for p in params), device)
            bufs = _own(obj.buffers(), device)
            parts = [f"parameters {format_bytes(sum(ps.values()))}"]
            if grads:
                parts.append(f"gradients {format_bytes(sum(grads.values()))}")
            if bufs:
                parts.append(f"buffers {format_bytes(sum(bufs.values()))}")
            known = ps.keys() | grads.keys() | bufs.keys()
            other = sum(n for k, n in storages_held(obj, device).items() if k not in known)
            if other:
                parts.append(f"other attributes {format_bytes(other)}")
            return " · ".join(parts)
        if isinstance(obj, torch.optim.Optimizer):
            state = [v for s in obj.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
            return f"state {format_bytes(sum(_own(state, device).values()))}"
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
        unique: bytes that deleting this name alone would free (kept alive by
            no other name or hidden holder).
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
        out_of_sight: bytes only the out-of-sight rows keep alive (``%vram free`` releases them).
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
    out_of_sight: int = 0

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
        if self.out_of_sight:
            t.note(f"rows in parentheses keep {format_bytes(self.out_of_sight)} alive out of sight "
                   "(no name above holds it): `%vram free` releases it", warn=True)
        if self.method:
            t.note(f"measured by the {self.method}")
        return t

    def to_records(self) -> list[dict[str, Any]]:
        return [vars(h).copy() for h in self.holders]


class HolderRows(list):  # type: ignore[type-arg]
    """The :class:`Holder` rows of :func:`find_holders`, with ``total``: the
    bytes all of them keep alive together, each storage counted once; and
    ``out_of_sight``: the bytes only out-of-sight holders keep alive (what
    ``%vram free`` gives back), each storage counted once."""

    total: int = 0
    out_of_sight: int = 0


def find_holders(
    namespace: Mapping[str, Any],
    device: torch.device,
    *,
    hidden: Mapping[str, tuple[str, Any]] | None = None,
    skip: Iterable[str] = (),
    limit: int | None = None,
) -> HolderRows:
    """Rank the names in ``namespace`` (and the out-of-sight ``hidden`` holders)
    by the device memory they keep alive.

    Args:
        namespace: name → object (a notebook's ``user_ns``).
        device: the device whose storages count.
        hidden: out-of-sight holders, name → (kind shown, object), e.g.
            ``{"Out": ("output history", [...])}``.
        skip: names in ``namespace`` not to list (IPython's own variables);
            what they keep alive still counts as kept by another name.
        limit: keep only the largest ``limit`` rows.

    Returns:
        :class:`Holder` rows, largest first (a :class:`HolderRows` whose
        ``total`` is the bytes of all listed rows together). A row's
        ``unique`` ("not shared") is what deleting that name alone frees: the
        storages it keeps alive that no other name, listed or skipped, and no
        hidden holder keeps alive (storages reachable from it and from no
        other root; a leaf only another variable's graph keeps is that
        variable's).
    """
    skip = set(skip)
    ranges: dict[int, tuple[int, int]] = {}
    found: list[tuple[str, str, Any, dict[int, int], bool]] = []
    others: list[dict[int, int]] = []  # what the skipped names keep: never listed, but they keep memory alive
    for name, obj in list(namespace.items()):
        if obj is namespace:
            continue
        held = storages_held(obj, device, ranges=ranges)
        if not held:
            continue
        if name in skip:
            others.append(held)
        else:
            found.append((name, _kind(obj), obj, held, False))
    for name, (kind, obj) in (hidden or {}).items():
        held = storages_held(obj, device, ranges=ranges)
        if held:
            found.append((f"({name})", kind, obj, held, True))
    _same_bytes_once([r[3] for r in found] + others, ranges)
    holders_of: dict[int, int] = {}  # storage key -> how many roots keep it
    for held in [r[3] for r in found] + others:
        for k in held:
            holders_of[k] = holders_of.get(k, 0) + 1
    rows = HolderRows()
    union: dict[int, int] = {}
    for name, kind, obj, held, is_hidden in found:
        unique = sum(n for k, n in held.items() if holders_of[k] == 1)
        union.update(held)
        rows.append(Holder(name, kind, sum(held.values()), unique, "" if is_hidden else _detail(obj, device), is_hidden))
    seen: dict[int, int] = {}  # storage key -> how many listed names (not out-of-sight rows) keep it
    for _, _, _, held, is_hidden in found:
        for k in held:
            seen[k] = seen.get(k, 0) + (0 if is_hidden else 1)
    rows.out_of_sight = sum(n for k, n in union.items() if seen[k] == 0
                            and any(k in r[3] for r in found if r[4]))
    rows.sort(key=lambda h: -h.nbytes)
    rows.total = sum(union.values())
    if limit:
        del rows[limit:]
    return rows
