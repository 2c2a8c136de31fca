"""Release the memory a notebook holds out of sight, and say how much came back.

IPython keeps references the user does not see: the output history (``Out``,
``_N``, and ``_``/``__``/``___`` in both the user namespace and the hidden one,
where ``%reset -f out`` leaves the last value), the last execution result, and
the last exception (``sys.last_traceback``, ``sys.last_value``,
``sys.last_exc`` on Python 3.12+, the shell's own ``InteractiveTB.tb``, whose
frames keep every local variable of the failed call alive), and the
exceptions chained to it. Each holder is released in turn and the memory that
came back measured after ``gc.collect()``; then ``torch.cuda.empty_cache()``
returns cached blocks.

Only IPython's own references are released: a ``_oh``/``Out`` the user rebound,
a ``_N``/``_`` the user's code bound (even to the same object), and an
exception the user keeps in a variable stay as they are.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import inspect
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._versions import versions

from ._graph import container_items
from ._process import malloc_trim, process_memory
from ._probe import CpuProbe, probe_for
from ._render import Rendered, Table
from ._units import format_bytes

__all__ = ["FreeReport", "free_hidden", "hidden_holders", "names_bound"]

_UNDERS = ("_", "__", "___")
# names IPython binds for outputs, which a user may also bind themselves
_OUTPUT_NAME = re.compile(r"(?<![\w.])(_\d+|_{1,3}|_oh|Out)(?!\w)")


def names_bound(code: str | list[ast.stmt]) -> set[str]:
    """The output-history names (``_N``, ``_``, ``__``, ``___``, ``_oh``,
    ``Out``) that ``code`` (a cell's transformed source, or its statements)
    assigns, deletes, imports or defines: from then on they are the user's."""
    if isinstance(code, str):
        if not _OUTPUT_NAME.search(code):
            return set()
        try:
            nodes: list[ast.stmt] = ast.parse(code).body
        except SyntaxError:
            return set()
    else:
        nodes = code
    found: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                found.add(node.id)
            elif isinstance(node, ast.alias):
                found.add(node.asname or node.name.split(".")[0])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                found.update(node.names)
    return {n for n in found if _OUTPUT_NAME.fullmatch(n)}


def _output_cache(shell: Any) -> dict[int, Any] | None:
    """IPython's own output history dict (what ``Out``/``_oh`` start as)."""
    hm = getattr(shell, "history_manager", None)
    oh = getattr(hm, "output_hist", None)
    return oh if isinstance(oh, dict) else None


def _tracebacks(shell: Any) -> list[Any]:
    """The tracebacks of IPython's last exception (``sys.last_*``, the shell's
    ``InteractiveTB.tb``, the last result's error) and of the exceptions chained
    to it (``__cause__``/``__context__``), except those the user holds: an
    exception, traceback or frame kept in a notebook variable (directly or in
    a list, tuple, set or dict there) is the user's and keeps its frames."""
    excs = [getattr(sys, name, None) for name in ("last_value", "last_exc")]
    excs.append(getattr(getattr(shell, "last_execution_result", None), "error_in_exec", None))
    tbs = [getattr(sys, "last_traceback", None), getattr(getattr(shell, "InteractiveTB", None), "tb", None)]
    if all(x is None for x in excs + tbs):
        return []
    held = _user_held(shell)
    seen: set[int] = set()
    users: set[int] = set()
    while excs:
        exc = excs.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if id(exc) in held or id(exc.__traceback__) in held:
            users.add(id(exc.__traceback__))
            continue
        tbs.append(exc.__traceback__)
        excs += [exc.__cause__, exc.__context__]
    out: list[Any] = []
    for tb in tbs:
        if tb is None or id(tb) in users or any(id(t) in held or id(t.tb_frame) in held for t in _entries(tb)):
            continue
        if all(tb is not o for o in out):
            out.append(tb)
    return out


def _entries(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def _user_held(shell: Any) -> set[int]:
    """ids of the user's notebook variables' values, and of the items of those
    that are lists, tuples, sets or dicts (IPython's own names excluded)."""
    hidden = shell.user_ns_hidden
    ids: set[int] = set()
    for name, value in list(shell.user_ns.items()):
        if name in hidden and hidden[name] is value:
            continue
        ids.add(id(value))
        try:  # the built-in types' own items: a subclass's overridden values()/__iter__ is the user's code
            ids.update(id(v) for v in container_items(value))
        except Exception:  # a container whose iteration raises: its items are not looked at
            pass
    return ids


def _frame_objects(shell: Any) -> list[Any]:
    ns = shell.user_ns
    objs: list[Any] = []
    for tb in _tracebacks(shell):
        live = _suspended_frames([t.tb_frame for t in _entries(tb)])  # their generators hold them
        while tb is not None:
            f = tb.tb_frame
            if id(f) in live:
                tb = tb.tb_next
                continue
            module = str(f.f_globals.get("__name__", ""))
            if _is_function_frame(f) and not module.startswith(("IPython", "vramnb", "ipykernel")):
                objs.extend(f.f_locals.values())
            elif f.f_locals is not ns and f.f_locals is not f.f_globals and not module.startswith(("IPython", "vramnb")):
                objs.extend(f.f_locals.values())
            tb = tb.tb_next
    return objs


def _is_function_frame(frame: Any) -> bool:
    """A function's frame (its locals are its own, not a namespace dict)."""
    return bool(frame.f_code.co_flags & inspect.CO_OPTIMIZED)


def _ipython_outputs(shell: Any) -> dict[str, Any]:
    """Output values IPython keeps in its hidden namespace: ``_N`` and
    ``_``/``__``/``___`` (IPython pushes them there and into the user namespace)."""
    return {
        name: value
        for name, value in shell.user_ns_hidden.items()
        if name.startswith("_") and (name[1:].isdigit() or name in _UNDERS)
    }


def hidden_holders(shell: Any) -> dict[str, tuple[str, Any]]:
    """Out-of-sight holders in an IPython shell: shown name → (kind, objects)."""
    out: dict[str, tuple[str, Any]] = {}
    oh = _output_cache(shell)
    unders = list(_ipython_outputs(shell).values()) + [getattr(shell.displayhook, u, None) for u in _UNDERS]
    res = getattr(shell, "last_execution_result", None)
    unders.append(getattr(res, "result", None))
    # one holder: Out[n] and _, __, ___, _n are the same outputs (each alone would free nothing)
    out["Out, _ __ ___" if oh else "_ __ ___"] = ("output history", [list(oh.values()) if oh else [], unders])
    frames = _frame_objects(shell)
    if frames:
        out["last exception"] = ("traceback frames", frames)
    return out


def _clear_output_history(shell: Any, bound: Mapping[str, int]) -> None:
    """Like ``%reset -f out``, but never touches a user's own ``_``/``_N``,
    ``_oh`` or ``Out``, and also clears the hidden namespace's copies, which
    ``%reset -f out`` leaves holding the last displayed value.

    ``bound``: output-history name -> the last cell whose code bound it. A
    name is the user's when it holds another object than IPython's copy, or
    when user code bound it in or after the cell whose output IPython stored
    under it (the same object, bound by the user: ``_5 = x``)."""
    ns, hidden, dh = shell.user_ns, shell.user_ns_hidden, shell.displayhook
    oh = _output_cache(shell)
    last_output = max(oh, default=0) if oh else 0
    for name, old in _ipython_outputs(shell).items():
        stored_at = last_output if name in _UNDERS else int(name[1:])
        users = name in ns and (ns[name] is not old or bound.get(name, -1) >= stored_at)
        if name in _UNDERS:
            hidden[name] = ""
            if not users and name in ns:
                ns[name] = ""
        else:
            del hidden[name]
            if not users:
                ns.pop(name, None)
    if oh is not None:
        oh.clear()  # IPython's dict, whatever the user bound to _oh or Out
    for u in _UNDERS:
        setattr(dh, u, "")
    res = getattr(shell, "last_execution_result", None)
    if res is not None:
        res.result = None


_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _suspended_frames(frames: list[Any]) -> set[int]:
    """ids of those ``frames`` that belong to a generator, coroutine or async
    generator that has not finished: ``frame.clear()`` would close it (run its
    ``finally``, and the next ``next()`` raises StopIteration)."""
    candidates = {id(f) for f in frames if f.f_code.co_flags & _RESUMABLE}
    if not candidates:
        return set()
    out = set()
    kinds = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
    for obj in gc.get_objects():
        if type(obj) in kinds:  # type(), not isinstance: that reads __class__ and wakes lazy attributes
            f = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
            if f is not None and id(f) in candidates:
                out.add(id(f))
    return out


def _clear_last_exception(shell: Any) -> None:
    for tb in _tracebacks(shell):
        frames = [t.tb_frame for t in _entries(tb)]
        live = _suspended_frames(frames)
        for frame in frames:
            if id(frame) in live:  # a generator still in use: its frame is its state, left alone
                continue
            with contextlib.suppress(RuntimeError):  # a frame still running cannot be cleared
                frame.clear()  # drop the frame's locals; the exception itself stays
            # Python < 3.13 keeps a snapshot dict of a function's locals on its frame
            # (made when IPython's traceback formatter read f_locals) that clear()
            # leaves alive; reading f_locals again re-syncs it. Only function frames:
            # a module-level or exec() frame's f_locals is a real namespace.
            if _is_function_frame(frame) and sys.version_info < (3, 13):  # 3.13: f_locals is a live view
                frame.f_locals.clear()
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    itb = getattr(shell, "InteractiveTB", None)
    if itb is not None and hasattr(itb, "tb"):
        itb.tb = None


@dataclass
class FreeReport(Rendered):
    """Bytes that came back from each out-of-sight source, on one device.

    Attributes:
        device: the device measured.
        freed: ``(source, bytes freed)`` in the order released (allocated bytes,
            measured after ``gc.collect()``).
        returned: bytes of cached blocks the caching allocator gave back to the
            driver (``torch.cuda.empty_cache``; reserved before − after), or
            ``None`` on CPU.
        trimmed: on CPU (Linux, glibc), the process's RSS before − after
            ``malloc_trim(0)`` (bytes the C allocator kept free and gave back to
            the system; RSS is not exact: other threads may allocate meanwhile),
            else ``None``.
    """

    device: str
    freed: list[tuple[str, int]] = field(default_factory=list)
    returned: int | None = None
    trimmed: int | None = None
    method: str = ""
    versions: dict[str, str] = field(default_factory=dict)  # what it was measured with

    @property
    def total(self) -> int:
        return sum(b for _, b in self.freed)

    def _table(self) -> Table:
        t = Table(f"vram free · {self.device}", ("source", "freed"))
        for src, b in self.freed:
            t.rows.append((src, format_bytes(b)))
        t.rows.append(("total allocated freed", format_bytes(self.total)))
        if self.returned is not None:
            t.rows.append(("cache returned to the driver", format_bytes(self.returned)))
        if self.trimmed is not None:
            t.rows.append(("RSS returned by malloc_trim(0)", format_bytes(max(0, self.trimmed))))
        t.note(f"measured by the {self.method}")
        return t


def free_hidden(shell: Any, device: torch.device, bound: Mapping[str, int] | None = None) -> FreeReport:
    """Release IPython's out-of-sight references, collect garbage and empty the
    CUDA cache, measuring what each step gave back on ``device`` (bytes).

    ``bound``: output-history names the user's own code bound, with the last
    cell that did (see :func:`names_bound`); those bindings are left alone."""
    bound = bound or {}
    probe = probe_for(device)

    def allocated(collect: bool = True) -> int:
        if collect:
            gc.collect()
        if isinstance(probe, CpuProbe):
            probe.tracker.scan()
        return probe.sample(device_info=False).allocated

    steps: list[tuple[str, Callable[[], None]]] = [
        ("unreachable cycles (gc.collect)", lambda: None),
        ("output history (Out, _, __, ___)", lambda: _clear_output_history(shell, bound)),
        ("last exception (traceback frames)", lambda: _clear_last_exception(shell)),
    ]
    report = FreeReport(str(device), method=probe.method, versions=versions(device))
    before = allocated(collect=False)
    for name, step in steps:
        step()
        after = allocated()
        report.freed.append((name, before - after))
        before = after
    if device.type == "cuda" and torch.cuda.is_initialized():
        r0 = probe.sample(device_info=False).reserved or 0
        torch.cuda.empty_cache()
        report.returned = r0 - (probe.sample(device_info=False).reserved or 0)
    if device.type == "cpu":  # glibc keeps freed arena memory: hand it back, measured on the RSS
        p0 = process_memory()
        if p0 is not None and malloc_trim() is not None:
            p1 = process_memory()
            report.trimmed = p0.rss - p1.rss if p1 is not None else None
    return report
