"""What the tracker changes outside itself while it tracks, reference-counted.

* ``UntypedStorage.resize_`` (FSDP frees and re-allocates its unsharded
  parameters this way, without an ATen operator the dispatch mode would see)
  is wrapped while any tracker tracks, in any thread; the original goes back
  when the last block ends, whatever the order they end in; so are ``_share_fd_cpu_`` and
  ``_share_filename_cpu_`` (``share_memory_``), which move a storage's bytes elsewhere.
* :func:`_exit_mode` leaves the tracker's dispatch mode even when the user's
  code pushed modes above it and left them on.
* Inductor's generated wrapper code (``torch.compile``) allocates its buffers with
  ``empty_strided_cpu`` (``torch._C._dynamo.guards._empty_strided_cpu``), below the
  dispatcher: no dispatch mode sees them, and a buffer freed inside the compiled call
  (an intermediate) was missing from the peak. While any tracker tracks, that function
  is wrapped where the wrapper modules resolve it: in ``torch._C._dynamo.guards`` (for
  modules loaded meanwhile) and in the globals of every module already loaded
  (``PyCodeCache.modules``). Code compiled with ``cpp_wrapper`` allocates in C++ and
  stays unseen until its outputs reach Python.
* ``torch.jit.trace`` / ``trace_module`` / ``_get_trace_graph`` (``torch.onnx.export``) cannot trace
  under any dispatch mode (a traced parameter then reads as a constant: "Cannot insert a Tensor that
  requires grad as a constant"):
  while a measured block runs (:func:`jit_trace_aside`), they are wrapped so that vramnb's own modes
  step off the stack for the call (the user's modes stay), and :data:`TRACED` counts those calls so
  that the report says its peak is a lower bound.
* :func:`_untrack_child` runs in a child ``fork()`` makes (a DataLoader worker): the child
  would otherwise inherit the forking thread's dispatch modes, the ``gc`` callback and the
  storage patches, and run every operator of its own through them (an epoch with two
  workers took 20 times as long); it removes all of them there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__: list[str] = []


def _exit_mode(mode: TorchDispatchMode) -> None:
    """Leave ``mode`` even if the user's code pushed modes above it and left them
    on: those are lifted off, the tracker's mode exits, and they go back."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

    if getattr(mode, "_vramnb_dropped", False):  # removed already, in a forked child
        return
    stack = _get_current_dispatch_mode_stack()
    if not stack or stack[-1] is mode or not any(m is mode for m in stack):
        mode.__exit__(None, None, None)
        return
    above = []
    while _get_current_dispatch_mode_stack()[-1] is not mode:
        above.append(_pop_mode())
    mode.__exit__(None, None, None)
    for m in reversed(above):
        _push_mode(m)


# The storage patches, shared by every tracker while any of them tracks (reference-counted):
# methods that change a live storage in place without an ATen operator the dispatch mode would
# see. ``resize_`` changes its size (FSDP frees and re-allocates its unsharded parameters this
# way); ``_share_fd_cpu_`` / ``_share_filename_cpu_`` (``share_memory_``, and a tensor put on a
# ``torch.multiprocessing`` queue) move its bytes to shared memory: the same ``StorageImpl`` and
# size at a new address, which the tracker's data ranges must follow (a later allocation reusing
# the old address would otherwise look like a second view of it, counted 0 bytes).
_PATCH_LOCK = threading.Lock()
_PATCHED: dict[Any, int] = {}  # tracker -> blocks tracking
_METHODS = ("resize_", "_share_fd_cpu_", "_share_filename_cpu_")
_ORIGINALS: dict[str, Any] = {}
_HAD_OWN: dict[str, bool] = {}


def _wrap(name: str) -> Any:
    def patched(st: torch.UntypedStorage, *args: Any, **kwargs: Any) -> Any:
        out = _ORIGINALS[name](st, *args, **kwargs)
        for tracker in list(_PATCHED):
            tracker.add_storage(st)
        return out

    patched.__name__ = patched.__qualname__ = name
    return patched


_WRAPPED = {name: _wrap(name) for name in _METHODS}
_patched_resize_ = _WRAPPED["resize_"]


_ALLOCS = ("_empty_strided_cpu", "_empty_strided_cpu_pinned")  # name in guards; the wrapper's name drops the "_"


def _wrap_alloc(original: Any) -> Any:
    def vramnb_inductor_alloc(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        for tracker in list(_PATCHED):
            tracker.add_tensor(out)
        return out

    vramnb_inductor_alloc._vramnb_original = original  # type: ignore[attr-defined]
    return vramnb_inductor_alloc


def _inductor_modules() -> list[Any]:
    cc = sys.modules.get("torch._inductor.codecache")
    cache = getattr(cc, "PyCodeCache", None)
    if cache is None:
        return []
    return list(getattr(cache, "modules", ())) + list(getattr(cache, "modules_no_attr", {}).values())


def _patch_inductor(on: bool) -> None:
    """Wrap (``on``) or unwrap inductor's CPU buffer allocator where generated code finds it."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    targets: list[tuple[Any, str]] = [(guards, name) for name in _ALLOCS]
    targets += [(mod, name[1:]) for mod in _inductor_modules() for name in _ALLOCS]
    for obj, name in targets:
        fn = getattr(obj, name, None) if obj is not None else None
        if fn is None:
            continue
        original = getattr(fn, "_vramnb_original", None)
        with contextlib.suppress(AttributeError, TypeError):
            if on and original is None:
                setattr(obj, name, _wrap_alloc(fn))
            elif not on and original is not None:
                setattr(obj, name, original)


def _patch_acquire(tracker: Any) -> None:
    with _PATCH_LOCK:
        if not _PATCHED:
            _patch_inductor(True)
            for name in _METHODS:
                _HAD_OWN[name] = name in torch.UntypedStorage.__dict__
                _ORIGINALS[name] = getattr(torch.UntypedStorage, name)
                # assignment: torch types resize_ on the private _StorageBase; this one is UntypedStorage's
                setattr(torch.UntypedStorage, name, _WRAPPED[name])
        _PATCHED[tracker] = _PATCHED.get(tracker, 0) + 1


def _patch_release(tracker: Any) -> None:
    with _PATCH_LOCK:
        n = _PATCHED.get(tracker, 0) - 1
        if n > 0:
            _PATCHED[tracker] = n
            return
        _PATCHED.pop(tracker, None)
        if not _PATCHED:
            _patch_inductor(False)
            for name in _METHODS:
                if _HAD_OWN[name]:
                    setattr(torch.UntypedStorage, name, _ORIGINALS[name])
                else:  # it was inherited: remove ours so the base class's shows again
                    with contextlib.suppress(AttributeError):
                        delattr(torch.UntypedStorage, name)


_JIT_LOCK = threading.Lock()
_JIT_USERS = 0
_JIT_NAMES = ("trace", "trace_module", "_get_trace_graph")  # _get_trace_graph: torch.onnx.export (TorchScript)
TRACED = [0]  # calls of torch.jit.trace / trace_module made with vramnb's modes stepped aside


def _ours(mode: Any) -> bool:
    return type(mode).__module__.split(".")[0] == "vramnb"


def _wrap_trace(original: Any) -> Any:
    import functools

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

        stack = list(_get_current_dispatch_mode_stack())
        if not any(_ours(m) for m in stack):
            return original(*args, **kwargs)
        lowest = next(i for i, m in enumerate(stack) if _ours(m))
        for _ in stack[lowest:]:
            _pop_mode()
        kept = [m for m in stack[lowest:] if not _ours(m)]  # the user's modes above ours stay, in order
        for m in kept:
            _push_mode(m)
        TRACED[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            for _ in kept:
                _pop_mode()
            for m in stack[lowest:]:
                _push_mode(m)

    wrapper._vramnb_original = original  # type: ignore[attr-defined]
    return wrapper


@contextlib.contextmanager
def jit_trace_aside() -> Any:
    """While the block runs (reference-counted across nested blocks and threads), ``torch.jit.trace``
    and ``torch.jit.trace_module`` run with vramnb's dispatch modes off the stack."""
    global _JIT_USERS
    jit = torch.jit
    with _JIT_LOCK:
        if _JIT_USERS == 0:
            for name in _JIT_NAMES:
                fn = getattr(jit, name, None)
                if fn is not None and getattr(fn, "_vramnb_original", None) is None:
                    setattr(jit, name, _wrap_trace(fn))
        _JIT_USERS += 1
    try:
        yield
    finally:
        with _JIT_LOCK:
            _JIT_USERS -= 1
            if _JIT_USERS == 0:
                for name in _JIT_NAMES:
                    original = getattr(getattr(jit, name, None), "_vramnb_original", None)
                    if original is not None:
                        setattr(jit, name, original)


_ON_FORK: list[Any] = []  # weak references to what a forked child calls after the patches are gone (trackers')


def _untrack_child() -> None:
    """In a child ``fork()`` made: leave every vramnb mode that tracks (a class with
    ``_vramnb_tracks``) on the stack of the only thread the child has, the one that forked,
    restore the storage patches, and let the trackers forget their threads
    (``_ON_FORK``). A ``with`` block the child goes on to leave then exits quietly."""
    global _PATCH_LOCK
    _PATCH_LOCK = threading.Lock()  # another thread may have held it at the fork
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        for mode in reversed(_get_current_dispatch_mode_stack()):
            if getattr(type(mode), "_vramnb_tracks", False) and not getattr(mode, "_vramnb_dropped", False):
                _exit_mode(mode)
                mode._vramnb_dropped = True  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001,S110 - a child's own work must never fail here
        pass
    if _PATCHED:
        _PATCHED.clear()
        _patch_inductor(False)
        for name in _METHODS:
            if _HAD_OWN[name]:
                setattr(torch.UntypedStorage, name, _ORIGINALS[name])
            else:
                with contextlib.suppress(AttributeError):
                    delattr(torch.UntypedStorage, name)
    for ref in list(_ON_FORK):
        fn = ref()
        if fn is None:
            _ON_FORK.remove(ref)
            continue
        with contextlib.suppress(Exception):
            fn()


os.register_at_fork(after_in_child=_untrack_child)
