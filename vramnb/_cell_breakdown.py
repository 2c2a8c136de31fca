"""``%%vram --breakdown``: label a cell's memory by the notebook objects it belongs to.

While the cell runs, every allocation is recorded (the CPU tracker, or the
CUDA allocator's trace) and the tensors autograd saves are noted (at each
backward and at the end, walking the graphs: no saved-tensor hook runs in the
cell, see :mod:`vramnb._saved`). Afterwards
each allocation is claimed, in this order, by: the parameters, buffers and
gradients of each ``nn.Module`` variable, the state of each
``torch.optim.Optimizer`` variable, the other tensor variables, activations
saved for backward, and what any other variable retains (a dict, a list, an
object's attributes: labelled ``"<type> <name>"``); the rest is workspace
(CUDA, backing no tensor), temporaries (allocated in the cell and held by no
variable) or other (there before). On CPU the cell sees every thread's
allocations, as the CUDA allocator's counters do. The counting
rules are those of :func:`vramnb.profile_step`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch

from ._optim_state import state_tensors
from ._attribution import Labels, SavedTensors, key_fn, keys_of, label_intervals, saved_in_live_graphs, sum_by_label, tensor_keys
from ._graph import MAX_DEPTH, held_tensors, is_tooling, module_attributes
from ._holder_entries import _grad_graphs
from ._timeline import CpuRecorder, CudaRecorder, Timeline
from .diagnose._autocast_cache import CACHE_ROW

__all__ = ["CellAttribution"]

GRAD_GRAPH_OF = "autograd graph of gradients of "  # backward(create_graph=True): the gradient's own graph
NO_NAME = "alive after the cell, not found under the names above"  # (hooks, closures, registries: the notes)
GRAD_OF = "gradient of "  # a named leaf tensor's .grad (without a graph of its own)
DIRECT = "\x00"  # the prefix of a name's claim on what it holds itself, graphs aside (never shown)
LAST_EXC = "last exception"  # the variables of the frames of the last error's traceback


def _objects(ns: Mapping[str, Any]) -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer],
                                             dict[str, torch.Tensor], dict[str, Any]]:
    mods, opts, tens, rest = {}, {}, {}, {}
    for name, obj in list(ns.items()):
        if name.startswith("_") or obj is ns:
            continue
        t = type(obj)  # not isinstance: that reads obj.__class__, which a proxy's property computes (user code)
        try:
            if issubclass(t, torch.nn.Module):
                mods[name] = obj
            elif issubclass(t, torch.optim.Optimizer):
                opts[name] = obj
            elif issubclass(t, torch.Tensor):
                tens[name] = obj
            elif not is_tooling(obj):
                rest[name] = obj
        except Exception:
            continue
    return mods, opts, tens, rest


def _at_point(claims: list[tuple[str, Any]], start_pairs: set[int], start: bool) -> list[tuple[str, Any]]:
    """``claims`` with only what each name held at the start (``start``) or at the end: the
    ``(point, keys)`` pairs read at the start are those whose id is in ``start_pairs``; interval
    sets (saved tensors, noted when saved) are kept."""
    out: list[tuple[str, Any]] = []
    for name, what in claims:
        if isinstance(what, (set, frozenset)):
            out.append((name, what))
        else:
            out.append((name, [pair for pair in what if (id(pair) in start_pairs) == start]))
    return out


class CellAttribution:
    """Records one cell and labels its memory; ``rows`` is set by :meth:`finish`:
    ``(label, bytes at start, bytes at end, bytes at the peak)``."""

    def __init__(self, namespace: Mapping[str, Any], device: torch.device, casts: Any = None) -> None:
        self.ns = namespace
        self.casts = casts  # a diagnose._autocast_cache.CastCache whose copies get a row of their own
        self.device = device
        self.cuda = device.type == "cuda"
        self.key = key_fn(device)
        self.rows: list[tuple[str, int, int, int]] = []
        self.recorder: Any = None
        self.backward_runs = 0  # autograd engine runs while the cell ran (backward, autograd.grad)
        self.failed: str | None = None  # why the breakdown is missing, where it could not be made
        # {name: bytes} of each named tensor's value from before the cell still alive at the peak and freed
        # right after it, before the next allocation (``z = layer(z)``: the old z lives until the new one is assigned)
        self.old_at_peak: dict[str, int] = {}

    def _claims_now(self, graphs: bool = False) -> list[tuple[str, set[int]]]:
        mods, opts, tens, rest = _objects(self.ns)
        key = self.key
        out: list[tuple[str, set[int]]] = []
        for name, m in mods.items():
            try:
                params = list(m.parameters())
                out.append((f"parameters of {name}", keys_of(params, key)))
                out.append((f"buffers of {name}", keys_of(m.buffers(), key)))
                out.append((f"gradients of {name}", keys_of((p.grad for p in params), key)))
                graph = keys_of(_grad_graphs(params), key)  # left by backward(create_graph=True)
                if graph:
                    out.append((f"{GRAD_GRAPH_OF}{name}", graph))
                attrs = keys_of(held_tensors(module_attributes(m), MAX_DEPTH - 1, {}), key)
                if attrs:  # caches, hook-collected lists: claimed after named tensors, as containers are
                    out.append((f"attributes of {name}", attrs))
                    direct = keys_of(held_tensors(module_attributes(m), MAX_DEPTH - 1, {}, graphs=False), key)
                    if direct:
                        out.append((f"{DIRECT}attributes of {name}", direct))
            except Exception:
                continue
        for name, o in opts.items():
            try:
                state = state_tensors(o)
                out.append((f"state of {name}", keys_of(state, key)))
            except Exception:
                continue
        if graphs:  # activations of graphs built before the cell (a forward run in an earlier cell)
            out.append(("activations", saved_in_live_graphs(key)))
        for name, t in tens.items():
            out.append((f"tensor {name}", keys_of([t], key)))
            try:
                g = t.grad if t.is_leaf else None
                if g is not None and g.grad_fn is not None:  # backward(create_graph=True) on a leaf
                    out.append((f"{GRAD_GRAPH_OF}{name}", keys_of([g, *_grad_graphs([t])], key)))
                elif g is not None:  # a leaf's gradient: the name holds it (`del name` or `name.grad = None`)
                    out.append((f"{GRAD_OF}{name}", keys_of([g], key)))
            except Exception:
                continue
        last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if isinstance(last, BaseException):  # a failed cell's frames, kept until the next error
            held = keys_of(held_tensors(last, MAX_DEPTH, {}), key)
            if held:
                out.append((LAST_EXC, held))
        for name, obj in rest.items():  # dicts, lists, objects' attributes: memory they retain is theirs
            try:
                held = keys_of(held_tensors(obj, MAX_DEPTH, {}), key)
                # what it holds itself, not through a graph's saved tensors: claimed before activations
                direct = keys_of(held_tensors(obj, MAX_DEPTH, {}, graphs=False), key) if held else set()
            except Exception:
                continue
            kind = "class" if issubclass(type(obj), type) else type(obj).__name__
            if held:
                out.append((f"{kind} {name}", held))
            if direct:
                out.append((f"{DIRECT}{kind} {name}", direct))
        return out

    @contextlib.contextmanager
    def recording(self, tracker: Any = None) -> Iterator[None]:
        """Record while the cell runs (``tracker``: the CPU tracker, on CPU)."""
        start_claims = self._claims_now(graphs=True)
        keys_start = tensor_keys(self.device) if self.cuda else None
        stack = contextlib.ExitStack()
        if self.cuda:
            self.recorder = CudaRecorder(self.device.index or 0)
            saved = SavedTensors(self.key, None, self.recorder)
        else:
            self.recorder = CpuRecorder(tracker)
            # a cell counts the whole process, as the CUDA allocator does: every thread's changes
            stack.enter_context(tracker.listening(self.recorder, all_threads=True))
            saved = SavedTensors(self.key, self.recorder.interval_of)
        # autocast's cached weight copies, noted at their cast as saved tensors are
        copies = SavedTensors(self.key, saved.interval_of, saved.recorder)
        if self.casts is not None:
            self.casts.locate = lambda t: copies.note(keys_of([t], self.key))
        self.recorder.mark("start")
        try:
            with stack, saved.observing_all_threads():
                try:
                    yield
                finally:
                    if tracker is not None:  # a failed operator's temporaries go while the recorder listens
                        tracker.settle()
        finally:
            if self.casts is not None:
                self.casts.locate = None
            self.recorder.mark("end")
            self.backward_runs = saved.runs
            tl = self.recorder.finish()
            try:
                end_claims = self._claims_now(graphs=True)  # graphs still alive: their saved tensors
                keys_end = tensor_keys(self.device) if self.cuda else None
                self._finish(tl, start_claims, end_claims, saved, keys_start, keys_end, copies)
            except MemoryError:  # out of memory (a process limit the cell ran into): the report goes on without it
                self.rows = []
                self.failed = "the breakdown by source could not be made: no memory was left to read the live objects"


    def _finish(self, tl: Timeline, start_claims: list[tuple[str, set[int]]], end_claims: list[tuple[str, set[int]]],
                saved: SavedTensors, keys_start: set[int] | None, keys_end: set[int] | None,
                copies: SavedTensors | None = None) -> None:
        start, end = tl.marks["start"], tl.marks["end"]
        merged: dict[str, list[tuple[int, set[int]]]] = {}
        at_start_mark: set[int] = set()  # ids of the (point, keys) pairs read at the start (the marks may be equal)
        for name, ks in start_claims:
            pair = (start, ks)
            merged.setdefault(name, []).append(pair)
            at_start_mark.add(id(pair))
        for name, ks in end_claims:
            merged.setdefault(name, []).append((end, ks))
        # modules and optimizers, then named tensors (an input saved for backward is
        # still the variable's), then activations of earlier graphs and of this cell
        owners = ("parameters of ", "buffers of ", "gradients of ", "state of ", GRAD_GRAPH_OF)
        claims: list[tuple[str, Any]] = [(n, p) for n, p in merged.items()
                                         if n.startswith(owners) and not n.startswith(GRAD_GRAPH_OF)]
        claims += [(n, p) for n, p in merged.items() if n.startswith("tensor ")]
        claims += [(n, p) for n, p in merged.items() if n.startswith(GRAD_GRAPH_OF)]
        # what other names hold themselves (a list's tensors, an object's attribute), graphs aside: theirs
        # even where a graph saved it too (the data set a model's first layer saved, as a named tensor's)
        rest = [n for n in merged if not n.startswith(owners + ("tensor ", "activations", DIRECT)) and n != LAST_EXC]
        claims += [(n, merged[DIRECT + n]) for n in rest if DIRECT + n in merged]
        claims.append(("activations", merged.get("activations", [])))
        claims.append(("activations", saved.claim(tl, after_forward="end", window_end="end")))
        if copies is not None:  # held by autocast's cache until its region exited, else temporaries
            claims.append((CACHE_ROW, copies.claim(tl, after_forward="end", window_end="end")))
        # what other names retain through graphs (a list of losses) is theirs, not temporaries;
        # the last exception's frames are out of sight: theirs is only what no name keeps
        # (what `%vram free` releases), so they claim last
        claims += [(n, merged[n]) for n in rest]
        if LAST_EXC in merged:
            claims.append((LAST_EXC, merged[LAST_EXC]))
        # one label per storage and point: a storage that moved between holders in the cell (`ys.append(y)`
        # then `y = ...`, `obj.X = X; del X`) is its start holder's at the start and its end holder's at the end
        def label(cl: list[tuple[str, Any]]) -> Labels:
            return cast(Labels, label_intervals(tl, cl, cuda=self.cuda, tensor_keys_start=keys_start,
                                                tensor_keys_end=keys_end))

        labels = label(claims)
        at_start, at_end = label(_at_point(claims, at_start_mark, True)), label(_at_point(claims, at_start_mark, False))
        for i in tl.live_at(end):  # still alive after the cell: not a temporary
            if at_end[i] == "temporaries":
                at_end[i] = NO_NAME
            if i in at_end.split and at_end.split[i][1] == "temporaries":
                at_end.split[i] = (at_end.split[i][0], NO_NAME)
        ends, starts = set(tl.live_at(end)), set(tl.live_at(start))
        for i in range(len(labels)):  # at the peak: where it ends up if it outlives the cell, else where it began
            src = at_end if i in ends else at_start if i in starts else None
            if src is not None:
                labels[i] = src[i]
                labels.split.pop(i, None)
                if i in src.split:
                    labels.split[i] = src.split[i]
        totals = tl.totals()
        peak = max(range(start, end + 1), key=lambda i: totals[i]) if end >= start else start
        order = list(dict.fromkeys([n for n, _ in claims] + ["workspace", "temporaries", NO_NAME, "other"]))
        at_s, at_e, at_p = sum_by_label(tl, at_start, start), sum_by_label(tl, at_end, end), sum_by_label(tl, labels, peak)
        live = tl.live_at(peak)
        # the first allocation after the peak: an old value freed before it was freed by the step that made the peak
        # (`z = layer(z)`: the new z, then the old one freed at the assignment), not by a later one
        after = min((iv.start for iv in tl.intervals if iv.start >= peak), default=end)
        for name, ks in start_claims:
            if name.startswith("tensor "):
                ivs = [tl.intervals[i] for i in live]
                old = {iv.key: iv.size for iv in ivs if iv.key in ks and iv.end is not None and iv.end < min(end, after)}
                if old:
                    self.old_at_peak[name[len("tensor "):]] = sum(old.values())
        self.rows = [(n, at_s.get(n, 0), at_e.get(n, 0), at_p.get(n, 0)) for n in order]
        self.rows = [r for r in self.rows if any(r[1:])]

