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
a ``_N``/``_`` the user's code bound (even to the same object), IPython's output
dict when anything else refers to it (``results = Out``), and an exception,
traceback or frame that anything but IPython refers to, at any depth (see
:mod:`vramnb._referrers`), stay as they are; the report says which and why.
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

from ._graph import MAX_DEPTH
from ._holders import storages_held
from ._referrers import Slots, describe_holder, outside_referrers
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


def _links(obj: Any) -> list[Any]:
    """What one part of an exception leads to: an exception's traceback, the exceptions chained to
    it (``__cause__``/``__context__``) and an exception group's members; a traceback entry's next
    entry and frame."""
    if isinstance(obj, BaseException):
        out = [obj.__traceback__, obj.__cause__, obj.__context__]
        if isinstance(obj, BaseExceptionGroup):
            out.extend(obj.exceptions)
        return [o for o in out if o is not None]
    if type(obj) is types.TracebackType:
        return [o for o in (obj.tb_next, obj.tb_frame) if o is not None]
    return []


def _last_exception(shell: Any) -> list[Any]:
    """IPython's last exception as parts: the exceptions (from ``sys.last_*``, the shell's
    ``InteractiveTB.tb`` and the last result's error, with those chained to them), their
    traceback entries and those entries' frames, each once."""
    todo = [getattr(sys, name, None) for name in ("last_value", "last_exc", "last_traceback")]
    todo.append(getattr(getattr(shell, "last_execution_result", None), "error_in_exec", None))
    todo.append(getattr(getattr(shell, "InteractiveTB", None), "tb", None))
    parts: dict[int, Any] = {}
    while todo:
        obj = todo.pop()
        if obj is None or id(obj) in parts:
            continue
        parts[id(obj)] = obj
        todo.extend(_links(obj))
    return list(parts.values())


@dataclass
class _Release:
    """What ``%vram free`` may clear of the last exception, and what it leaves and why."""

    frames: list[Any] = field(default_factory=list)  # the frames to clear
    kept: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # id(part) -> (part, its holder outside IPython)
    kept_frames: int = 0  # frames left because something outside IPython reaches them
    parts: set[int] = field(default_factory=set)  # ids of all the exception's parts


def _release_plan(shell: Any, bound: Mapping[str, int] | None = None) -> _Release:
    """The frames of IPython's last exception that only IPython's own slots reach.

    An exception, traceback entry or frame that anything else refers to (a notebook variable at
    any depth: a list of tuples, an attribute, a dict value; a logging record; a generator
    suspended in that frame; a frame the user kept), read from the interpreter's referrer
    lists (see :func:`outside_referrers`), is the user's: it and every part reachable from
    it (chained exceptions, later traceback entries, their frames and those frames' callers)
    stay as they are."""
    parts = _last_exception(shell)
    plan = _Release()
    if not parts:
        return plan
    oh = _output_cache(shell) or {}
    part_ids = {id(p) for p in parts}
    # IPython's output dict counts as IPython's unless the user keeps it (asked only when it holds a part)
    user_oh = any(id(v) in part_ids for v in list(oh.values())) and _output_dict_holder(shell, bound or {}) is not None
    held = outside_referrers(parts, Slots(shell, bound or {}, user_oh=user_oh))
    ids = {id(p): p for p in parts}
    protected: set[int] = set()
    todo = [ids[i] for i in held]
    while todo:
        obj = todo.pop()
        if id(obj) in protected:
            continue
        protected.add(id(obj))
        nxt = _links(obj) + ([obj.f_back] if type(obj) is types.FrameType else [])
        todo.extend(o for o in nxt if o is not None and id(o) in ids)
    plan.kept = {i: (ids[i], r) for i, r in held.items()}
    plan.parts = set(ids)
    for p in parts:
        if type(p) is types.FrameType:
            if id(p) in protected:
                plan.kept_frames += 1
            else:
                plan.frames.append(p)
    return plan


def _frame_objects(shell: Any, device: torch.device | None = None) -> list[Any]:
    """The local variables of the frames of the last exception that ``%vram free`` may clear.

    ``device``: the caller counts only storages on it. The referrer walk that decides which
    frames are IPython's alone (:func:`_release_plan`: several passes over every live object)
    then runs only where some frame's variables hold a storage on ``device``: where none of
    all the exception's frames do, none of those it may clear do, and the answer is ``[]``
    whatever the walk would decide."""
    if device is not None:
        parts = _last_exception(shell)
        if not parts:
            return []
        every = _locals_of([p for p in parts if type(p) is types.FrameType], shell.user_ns)
        # each value on its own (a walk shared between values may stop one at the depth limit
        # that alone it would follow further): what any subset of them holds is in these
        depth = MAX_DEPTH - 1  # the values are one level below the row's list (find_holders)
        if not any(storages_held(v, device, depth) for v in every):
            return []
    return _locals_of(_release_plan(shell).frames, shell.user_ns)


def _locals_of(frames: list[Any], ns: Any) -> list[Any]:
    """The values of the local variables of ``frames`` that are the user's (a function of the
    user's, a class body or ``exec`` namespace, not IPython's, vramnb's or the notebook's own)."""
    objs: list[Any] = []
    for f in frames:
        module = str(f.f_globals.get("__name__", ""))
        if _is_function_frame(f) and not module.startswith(("IPython", "vramnb", "ipykernel")):
            objs.extend(f.f_locals.values())
        elif f.f_locals is not ns and f.f_locals is not f.f_globals and not module.startswith(("IPython", "vramnb")):
            objs.extend(f.f_locals.values())
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


def hidden_holders(shell: Any, device: torch.device | None = None) -> dict[str, tuple[str, Any]]:
    """Out-of-sight holders in an IPython shell: shown name → (kind, objects). ``device``: the
    caller counts only storages on it (the last exception's frames are then decided only where
    they hold one: :func:`_frame_objects`)."""
    out: dict[str, tuple[str, Any]] = {}
    oh = _output_cache(shell)
    unders = list(_ipython_outputs(shell).values()) + [getattr(shell.displayhook, u, None) for u in _UNDERS]
    res = getattr(shell, "last_execution_result", None)
    unders.append(getattr(res, "result", None))
    # one holder: Out[n] and _, __, ___, _n are the same outputs (each alone would free nothing)
    out["Out, _ __ ___" if oh else "_ __ ___"] = ("output history", [list(oh.values()) if oh else [], unders])
    frames = _frame_objects(shell, device)
    if frames:
        out["last exception"] = ("traceback frames", frames)
    return out


def _output_dict_holder(shell: Any, bound: Mapping[str, int]) -> Any:
    """Something outside IPython's own slots that refers to IPython's output dict (a notebook
    variable bound to it, ``results = Out``, at any depth), or ``None``."""
    oh = _output_cache(shell)
    if oh is None:
        return None
    return outside_referrers([oh], Slots(shell, bound, user_oh=True)).get(id(oh))


def _clear_output_history(shell: Any, bound: Mapping[str, int], kept: list[tuple[str, str]] | None = None) -> None:
    """Like ``%reset -f out``, but never touches a user's own ``_``/``_N``,
    ``_oh`` or ``Out``, and also clears the hidden namespace's copies, which
    ``%reset -f out`` leaves holding the last displayed value. IPython's output
    dict is emptied only when nothing but IPython refers to it: one the user
    keeps (``results = Out``) stays whole, told in ``kept`` as ``(source, why)``.

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
    holder = _output_dict_holder(shell, bound) if oh else None
    if holder is not None:  # the user's too: emptying it would empty their variable
        if kept is not None:
            n = len(oh or {})
            kept.append(("output history (Out, _, __, ___)",
                         f"IPython's output dict (Out, {n} output{'s' * (n != 1)}) kept by "
                         f"{describe_holder(oh, holder, shell)}: left as it is"))
    elif oh is not None:
        oh.clear()  # IPython's own dict, which only IPython's names refer to
    for u in _UNDERS:
        setattr(dh, u, "")
    res = getattr(shell, "last_execution_result", None)
    if res is not None:
        res.result = None


def _clear_last_exception(shell: Any, bound: Mapping[str, int], kept: list[tuple[str, str]]) -> None:
    """Clear the locals of the last exception's frames that only IPython reaches (see
    :func:`_release_plan`) and drop IPython's references to it; what the user holds is told in
    ``kept`` as ``(source, why)``."""
    plan = _release_plan(shell, bound)
    for frame in plan.frames:
        with contextlib.suppress(RuntimeError):  # a frame still running cannot be cleared
            frame.clear()  # drop the frame's locals; the exception itself stays
        # Python < 3.13 keeps a snapshot dict of a function's locals on its frame
        # (made when IPython's traceback formatter read f_locals) that clear()
        # leaves alive; reading f_locals again re-syncs it. Only function frames:
        # a module-level or exec() frame's f_locals is a real namespace.
        if _is_function_frame(frame) and sys.version_info < (3, 13):  # 3.13: f_locals is a live view
            frame.f_locals.clear()
    if plan.kept:
        skip = set(plan.parts)
        whys = sorted({describe_holder(part, holder, shell, skip) for part, holder in plan.kept.values()})
        what = sorted({_part_name(part) for part, _ in plan.kept.values()})
        n = plan.kept_frames
        kept.append(("last exception (traceback frames)",
                     f"{', '.join(what)} kept by {' and '.join(whys)}: {n} frame{'s' * (n != 1)} "
                     "left with their local variables"))
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    itb = getattr(shell, "InteractiveTB", None)
    if itb is not None and hasattr(itb, "tb"):
        itb.tb = None


def _part_name(part: Any) -> str:
    if isinstance(part, BaseException):
        return f"the {type(part).__name__}"
    if type(part) is types.FrameType:
        return f"the frame of {part.f_code.co_name}"
    return "a traceback entry"


@dataclass
class FreeReport(Rendered):
    """Bytes that came back from each out-of-sight source, on one device.

    Attributes:
        device: the device measured.
        freed: ``(source, bytes freed)`` in the order released (allocated bytes,
            measured after ``gc.collect()``; where the allocator's counters are known, only
            what was freed: what another thread allocated meanwhile is ``meanwhile``).
        meanwhile: bytes allocated on the device while it ran (by another thread, a finalizer), else 0.
        returned: bytes of cached blocks the caching allocator gave back to the
            driver (``torch.cuda.empty_cache``; reserved before − after), or
            ``None`` on CPU.
        kept: ``(source, why)`` for what was left because the user holds it
            (``"IPython's output dict (Out, 3 outputs) kept by your variable results: left as it is"``).
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
    kept: list[tuple[str, str]] = field(default_factory=list)  # (source, why it was left as it is)
    meanwhile: int = 0  # bytes other code (threads, finalizers) allocated while it ran (in no row)

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
        for src, why in self.kept:
            t.note(f"{src}: not released, {why}")
        if self.meanwhile:
            t.note(f"{format_bytes(self.meanwhile)} was allocated while this ran, by other code (another thread "
                   "filling a queue or loading data, a finalizer or gc callback): in none of the rows above, which "
                   "count only what was freed")
        t.note(f"measured by the {self.method}")
        return t


@contextlib.contextmanager
def _counting(probe: Any, device: torch.device) -> Any:
    """A function giving ``(bytes allocated so far, bytes freed so far)`` on ``device`` while the block
    runs (``None`` where not known): on CUDA the caching allocator's own counters
    (``allocated_bytes.all.allocated``/``.freed``), on the CPU every change the storage tracker sees
    in any thread (a storage it registers counts as allocated). Other threads allocating meanwhile (a
    producer filling a queue) then show apart, instead of as negative bytes freed."""
    if device.type == "cuda":
        if not torch.cuda.is_initialized():
            yield lambda: None
            return

        def cuda() -> tuple[int, int] | None:
            st = torch.cuda.memory_stats(device)
            if "allocated_bytes.all.allocated" not in st:
                return None
            return int(st["allocated_bytes.all.allocated"]), int(st["allocated_bytes.all.freed"])

        yield cuda
        return
    tracker = getattr(probe, "tracker", None)
    if not isinstance(probe, CpuProbe) or tracker is None:
        yield lambda: None
        return
    seen = [0, 0]

    def listener(_key: int, old: int, new: int) -> None:
        if new > old:
            seen[0] += new - old
        else:
            seen[1] += old - new

    try:
        ctx = tracker.listening(listener, all_threads=True)
        ctx.__enter__()
    except Exception:  # noqa: BLE001 - another thread is recording: the allocated bytes' difference
        yield lambda: None
        return
    try:
        yield lambda: (seen[0], seen[1])
    finally:
        ctx.__exit__(None, None, None)


def free_hidden(shell: Any, device: torch.device, bound: Mapping[str, int] | None = None) -> FreeReport:
    """Release IPython's out-of-sight references, collect garbage and empty the
    CUDA cache, measuring what each step gave back on ``device`` (bytes).

    ``bound``: output-history names the user's own code bound, with the last
    cell that did (see :func:`names_bound`); those bindings are left alone."""
    bound = bound or {}
    probe = probe_for(device)
    report = FreeReport(str(device), method=probe.method, versions=versions(device))

    def allocated(collect: bool = True) -> int:
        if collect:
            gc.collect()
        if isinstance(probe, CpuProbe):
            probe.tracker.scan()
        return probe.sample(device_info=False).allocated

    steps: list[tuple[str, Callable[[], None]]] = [
        ("unreachable cycles (gc.collect)", lambda: None),
        ("output history (Out, _, __, ___)", lambda: _clear_output_history(shell, bound, report.kept)),
        ("last exception (traceback frames)", lambda: _clear_last_exception(shell, bound, report.kept)),
    ]
    with _counting(probe, device) as counts:
        before = allocated(collect=False)
        c0 = counts()
        for name, step in steps:
            step()
            after = allocated()
            c1 = counts()
            if c0 is not None and c1 is not None:  # what was freed, apart from what other threads made meanwhile
                report.freed.append((name, c1[1] - c0[1]))
                report.meanwhile += c1[0] - c0[0]
            else:
                report.freed.append((name, before - after))
            before, c0 = after, c1
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
