"""Holders in the interpreter's own state, for the regrowth line: a callable that keeps a cell's new
storages and that no object the garbage collector sees refers to (found by
:func:`._referrer_paths.holding_paths`, ``orphans``) is kept from C. Which registry keeps it is
checked where Python can tell: a signal's handler (``signal.getsignal``), the current trace or
profile function (``sys.gettrace``/``sys.getprofile``); ``atexit`` has no public list of its
callbacks, so it is named only as the likely holder, where its count of callbacks
(``atexit._ncallbacks()``) grew during the run. Nothing of the user's is called: the callables'
attributes are read, never called."""

from __future__ import annotations

import collections
import functools
import signal
import sys
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._units import format_bytes

__all__ = ["CHeld", "kept_from_c", "is_hook_dict"]


class CHeld:
    """One callable kept from C, as the regrowth line shows it: ``where`` (what it is and what keeps it),
    ``nbytes`` (this run's new storages it reaches), ``advice`` (the fix), ``kind``."""

    def __init__(self, where: str, nbytes: int, advice: str, kind: str) -> None:
        self.where, self.nbytes, self.advice, self.kind = where, nbytes, advice, kind
        self.others: set[str] = set()
        self.path = self.cut = where

    def line(self) -> str:
        return f"{self.where} keeps {format_bytes(self.nbytes)} more each run ({self.advice})"


def is_hook_dict(o: Any) -> bool:
    """Whether ``o`` is a dict of hooks as PyTorch keeps them (handle id -> callable: ``OrderedDict``
    or ``dict``), read without running any of its entries."""
    if type(o) not in (dict, collections.OrderedDict) or not o:
        return False
    try:
        return all(type(k) is int and callable(v) for k, v in list(dict.items(o)))
    except Exception:  # noqa: BLE001
        return False


def _what(fn: Any) -> tuple[str, list[Any], str]:
    """(text, the objects it keeps, the code that names it) for a function, bound method or partial."""
    if type(fn) is types.MethodType:
        owner = type(fn.__self__).__name__
        name = fn.__func__.__name__
        return (f"the bound method {owner}.{fn.__func__.__name__} of a {owner}", [fn.__self__],
                f"obj.{name}")
    if type(fn) is functools.partial:
        name = getattr(fn.func, "__name__", type(fn.func).__name__)
        return (f"functools.partial({getattr(fn.func, '__qualname__', name)}, ...)",
                [fn.func, fn.args, fn.keywords], f"functools.partial({name}, ...)")
    cells = [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    return (f"the function {fn.__qualname__}", [*cells, fn.__defaults__, fn.__kwdefaults__], fn.__name__)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _signal_of(fn: Any) -> str | None:
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) is fn:
                return signal.Signals(sig).name
        except (ValueError, OSError):
            continue
    return None


def kept_from_c(orphans: list[Any], keys: Mapping[int, int], device: torch.device, atexit_before: int | None,
                atexit_now: int | None) -> list[CHeld]:
    """For each callable of ``orphans`` that reaches some of the storages ``keys`` (storage key -> bytes:
    this run's new storages no name reaches) on ``device``, what keeps it and the fix. ``atexit_before``
    and ``atexit_now``: ``atexit._ncallbacks()`` at the previous run's end and at this run's (``None``:
    unknown); atexit is named only where it grew. The largest first; a storage counts once."""
    out: list[CHeld] = []
    left = dict(keys)
    grew = (atexit_now - atexit_before if atexit_before is not None and atexit_now is not None else 0)
    for fn in orphans:
        if issubclass(type(fn), torch.autograd.function.BackwardCFunction):
            held = _ctx_attributes(fn, left, device)
            if held is not None:
                out.append(held)
            continue
        if is_hook_dict(fn):  # hooks only C++ refers to: an autograd node's (grad_fn.register_hook)
            held = _node_hooks(fn, left, device)
            if held is not None:
                out.append(held)
            continue
        text, kept, code = _what(fn)
        n = _take(kept, left, device)
        if not n:
            continue
        sig = _signal_of(fn)
        if sig is not None:
            out.append(CHeld(f"{text}, the handler of {sig}", n,
                             f"signal.signal({sig}, ...) keeps its handler until another replaces it: put the previous "
                             f"handler back when done (`old = signal.signal({sig}, {code})` ... "
                             f"`signal.signal({sig}, old)`)", "signal handler"))
        elif fn is sys.gettrace() or fn is sys.getprofile():
            which = "settrace" if fn is sys.gettrace() else "setprofile"
            out.append(CHeld(f"{text}, set with sys.{which}", n,
                             f"sys.{which} keeps its function until it is replaced: `sys.{which}(None)` when done",
                             "tracer"))
        elif grew > 0:
            out.append(CHeld(
                f"{text}, which no object the garbage collector sees refers to (kept from C), while atexit's "
                f"registered callbacks went from {atexit_before} to {atexit_now} during the last run (atexit._ncallbacks(); "
                "atexit has no public list to check it against)", n,
                f"atexit is the likely holder: `atexit.register({code})` keeps it, and all it refers to, until the "
                f"interpreter exits; call `atexit.unregister({code})` (the same object) once it is closed or no "
                "longer needed (in its close()), or register a function that keeps only a `weakref.ref` to the object", "atexit"))
        else:
            out.append(CHeld(
                f"{text}, which no object the garbage collector sees refers to (kept from C: a registry of the "
                "interpreter or of an extension module, not a variable)", n,
                "find where it is registered and unregister it when done (an atexit callback, a C library's callback)",
                "kept from C"))
    merged: dict[tuple[str, str], CHeld] = {}  # one line for the same holder met once per run's object
    for h in out:
        got = merged.get((h.where, h.advice))
        if got is None:
            merged[(h.where, h.advice)] = h
        else:
            got.nbytes += h.nbytes
    return sorted(merged.values(), key=lambda h: -h.nbytes)


def _ctx_attributes(ctx: Any, left: dict[int, int], device: torch.device) -> CHeld | None:
    """The tensors a custom autograd Function's ``forward`` set as attributes of its ``ctx`` (``ctx.y = y``),
    where they reach some of the storages ``left`` (popped): the output's ``grad_fn`` is that ctx, so an output
    kept on it is a reference cycle that only the garbage collector frees (through C++ on older torch: never);
    ``ctx.save_for_backward`` is the way the autograd docs give (pytorch#25340)."""
    try:
        attrs = [(k, v) for k, v in list(object.__getattribute__(ctx, "__dict__").items())
                 if isinstance(k, str) and issubclass(type(v), torch.Tensor)]
    except Exception:  # noqa: BLE001
        return None
    names, n = [], 0
    for k, v in attrs:
        took = _take([v], left, device)
        if took:
            n += took
            names.append(k)
    if not n:
        return None
    fn = type(ctx).__name__.removesuffix("Backward")
    shown = ", ".join(f"ctx.{k}" for k in names[:3])
    return CHeld(
        f"the context of the custom autograd Function {fn} (its forward set {shown})", n,
        "a tensor set as an attribute of ctx keeps what it refers to for as long as the graph lives, and where it is "
        "the output (or computed from it) the output's grad_fn is that ctx: a reference cycle only gc.collect() "
        "frees; save tensors for backward with `ctx.save_for_backward(...)` and read them as `ctx.saved_tensors` "
        "(the autograd docs' way: no cycle, and checked for in-place changes)", "ctx attribute")


def _node_hooks(hooks: Mapping[int, Any], left: dict[int, int], device: torch.device) -> CHeld | None:
    """The hooks of a dict that no object the garbage collector sees refers to, where they reach some of
    the storages ``left`` (popped): PyTorch keeps an autograd node's hooks (``grad_fn.register_hook``,
    ``register_prehook``) in such a dict, held from C++ (a tensor's or a module's hook dict is referred
    to by the tensor or the module)."""
    texts, owners, n = [], [], 0
    fns: list[Any] = list(dict.values(hooks))  # type: ignore[arg-type]
    for fn in fns:
        text, kept, _code = _what(fn)
        kept = [x for o in kept for x in (o if type(o) is tuple else list(dict.values(o)) if type(o) is dict
                                          else [o])]  # a partial's args and keywords: the objects themselves
        for o in kept:
            took = _take([o], left, device)
            if took:
                n += took
                texts.append(text)
                if type(o) not in (tuple, dict, types.FunctionType):
                    owners.append(f"a {type(o).__qualname__}")
    if not n:
        return None
    owner = " and ".join(dict.fromkeys(owners)) or "the objects it refers to"
    hook = " and ".join(dict.fromkeys(texts))
    return CHeld(
        f"{hook} (a hook on an autograd node: grad_fn.register_hook keeps it in C++, where the garbage collector "
        f"cannot see it; it refers to {owner})", n,
        f"where the node is in a graph that {owner.replace('a ', 'the ', 1)} keeps, the graph keeps the hook and the hook keeps "
        "the graph: a reference cycle through C++ that gc.collect() never frees; have the hook keep a weak reference "
        "(`ref = weakref.ref(obj)` outside it, `obj = ref()` inside), or remove it when it has run "
        "(`handle = t.grad_fn.register_hook(...)`, then `handle.remove()`)", "autograd node hook")


def _take(objs: list[Any], left: dict[int, int], device: torch.device) -> int:
    """The bytes of the storages of ``left`` (key -> bytes) that ``objs`` reach on ``device``, popped from it:
    each storage counts for the first holder that reaches it."""
    return sum(left.pop(k) for k in _keys_of(objs, device) & left.keys())


def _keys_of(objs: list[Any], device: torch.device) -> set[int]:
    from .._holders import storages_held

    got: set[int] = set()
    for o in objs:
        if o is None:
            continue
        try:
            got.update(storages_held(o, device))
        except Exception:  # noqa: BLE001
            continue
    return got
