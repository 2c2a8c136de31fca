"""Which tensors autograd saved for backward, seen without saved-tensor hooks.

vramnb installs no ``torch.autograd.graph.saved_tensors_hooks`` in the user's
code, because any such hook changes the program:

* PyTorch checks that a saved tensor was not modified in place ("one of the
  variables needed for gradient computation has been modified by an inplace
  operation") only for saved tensors *without* hooks (``SavedVariable::unpack``
  in torch/csrc/autograd/saved_variable.cpp: "Only check version counter in
  the case without hooks"): under a hook, a bug that raises in plain PyTorch
  silently computes a wrong gradient;
* ``torch.func`` transforms (``grad``, ``vjp``, ``jacrev``, ``hessian``) refuse
  to run while any is registered ("don't yet support saved tensor hooks").

Instead, each entry into the autograd engine (``torch.autograd.backward``,
``Tensor.backward``, ``torch.autograd.grad``: all go through
``torch.autograd._engine_run_backward``) is observed: just before the engine
runs, every tensor the graph saved is alive, and the graph is walked from its
roots without unpacking anything (:func:`vramnb._graph.graph_tensors`). A
graph still alive when a recording ends is walked then
(:func:`vramnb._attribution.saved_in_live_graphs`). Engine calls inside a
``torch.func`` transform (its own ``autograd.grad`` on wrapped tensors) are
not observed.

The wrapper is installed only while an observation is active, reference
counted across threads, and the original goes back when the last one ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["observing_backward", "roots_of"]

_LOCK = threading.Lock()
# (callback, the thread it observes, or None for every thread)
_OBSERVERS: list[tuple[Callable[[list[Any]], None], int | None]] = []
_SAVED_ORIGINALS: dict[str, Any] = {}


def _in_functorch() -> bool:
    peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
    try:
        return peek is not None and peek() is not None
    except Exception:
        return False


def roots_of(outputs: Any) -> list[Any]:
    """The autograd nodes a backward call starts from (``outputs``: a tensor,
    a ``GradientEdge`` or a sequence of them)."""
    if isinstance(outputs, (torch.Tensor, getattr(torch.autograd.graph, "GradientEdge", ()))):
        outputs = (outputs,)
    out = []
    try:
        for o in outputs:
            node = getattr(o, "grad_fn", None) if isinstance(o, torch.Tensor) else getattr(o, "node", None)
            if node is not None:
                out.append(node)
    except TypeError:
        pass
    return out


def _notify(outputs: Any) -> None:
    if not _OBSERVERS or _in_functorch():
        return
    me = threading.get_ident()
    observers = [cb for cb, thread in list(_OBSERVERS) if thread is None or thread == me]
    if not observers:
        return
    roots = roots_of(outputs)
    if not roots:
        return
    for cb in observers:
        try:
            cb(roots)
        except Exception:  # an observation must never change what the user's backward does
            pass


def _engine_wrapper(original: Any) -> Any:
    def _engine_run_backward(t_outputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _notify(t_outputs)
        return original(t_outputs, *args, **kwargs)

    _engine_run_backward.__wrapped__ = original  # type: ignore[attr-defined]
    return _engine_run_backward


def _targets() -> list[str]:
    # torch >= 2.3: one private entry that backward() and grad() both call by its module-global
    # name; older torch: the two public functions (Tensor.backward calls torch.autograd.backward)
    if hasattr(torch.autograd, "_engine_run_backward"):
        return ["_engine_run_backward"]
    return ["backward", "grad"]


def _install() -> None:
    for name in _targets():
        original = getattr(torch.autograd, name)
        _SAVED_ORIGINALS[name] = original
        if name == "_engine_run_backward":
            setattr(torch.autograd, name, _engine_wrapper(original))
        else:
            setattr(torch.autograd, name, _public_wrapper(original))


def _public_wrapper(original: Any) -> Any:
    def wrapper(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _notify(tensors)
        return original(tensors, *args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", "wrapper")
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper


def _uninstall() -> None:
    for name, original in _SAVED_ORIGINALS.items():
        current = getattr(torch.autograd, name, None)
        if getattr(current, "__wrapped__", None) is original:
            setattr(torch.autograd, name, original)
        # else someone wrapped ours meanwhile: leave theirs (ours passes through when idle)
    _SAVED_ORIGINALS.clear()


@contextlib.contextmanager
def observing_backward(callback: Callable[[list[Any]], None], *, all_threads: bool = False) -> Iterator[None]:
    """Call ``callback(roots)`` (a list of autograd nodes) just before each
    autograd engine run started while the block is active, by the calling
    thread (``all_threads``: by any thread). Exceptions in ``callback`` are
    swallowed. Blocks may nest and overlap across threads."""
    item = (callback, None if all_threads else threading.get_ident())
    with _LOCK:
        if not _OBSERVERS:
            _install()
        _OBSERVERS.append(item)
    try:
        yield
    finally:
        with _LOCK:
            _OBSERVERS.remove(item)
            if not _OBSERVERS:
                _uninstall()
