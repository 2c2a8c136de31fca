"""Saved-tensor hooks the user has active around an estimate call.

``torch.autograd.graph.saved_tensors_hooks`` pushes its (pack, unpack) pair on a thread-local stack
(``torch._C._autograd._push_saved_tensors_default_hooks``) that every later forward uses, the estimate's
fake step included: a user's pack hook that keeps what it packs (a list of saved tensors, a counter) would
be handed the fake step's FakeTensors. :func:`set_aside` takes the user's pairs off the stack for the call
and puts them back, in order, when it ends (whatever it raised). ``save_on_cpu`` is the one the estimate
models: its pair is replaced by the estimate's model of offload (saved tensors leave the device, come back
when backward unpacks them: :func:`vramnb.techniques.offload._modelled_offload`). Any other pair is kept off
the fake step and named in the notes (its memory effect is not modelled).

The same holds for the user's ``TorchFunctionMode`` s and ``TorchDispatchMode`` s active around the call (a
call counter, a ``FlopCounterMode``, a logging mode): they would see the fake step's calls and FakeTensor
outputs. They are set aside for the call and put back in order, and named in the notes; a
``torch.device(...)`` context (a function mode of PyTorch's that sets where factories put tensors) stays."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["set_aside"]

_SAVE_ON_CPU = "save_on_cpu.__init__.<locals>.pack_to_cpu"


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


@contextlib.contextmanager
def set_aside(notes: list[str]) -> Iterator[None]:
    """Take the user's saved-tensor hooks off the stack for the estimate (see the module docstring); ``notes``
    gets one line per pair kept off the fake step."""
    from .._interrupt import held_back
    from ..techniques.offload import _modelled_offload

    ag = torch._C._autograd
    taken: list[tuple[Any, Any]] = []
    while True:
        top = ag._top_saved_tensors_default_hooks(True)
        if top is None:
            break
        taken.append(top)
        ag._pop_saved_tensors_default_hooks()
    taken.reverse()  # outermost first
    pushed = 0
    try:
        for pack, unpack in taken:
            if getattr(pack, "__qualname__", "") == _SAVE_ON_CPU and getattr(pack, "__module__", "") == "torch.autograd.graph":
                ctx = _modelled_offload()
                ag._push_saved_tensors_default_hooks(ctx.pack_hook, ctx.unpack_hook)
                pushed += 1
            else:
                notes.append(f"your saved_tensors_hooks active around the call (pack hook {_name(pack)}) was not run "
                             "on the estimate's fake tensors, and its memory effect is not modelled")
        with _function_modes_aside(notes), _dispatch_modes_aside(notes):
            yield
    finally:
        with held_back():  # an interrupt waits until the user's hooks are back
            for _ in range(pushed):
                ag._pop_saved_tensors_default_hooks()
            for pack, unpack in taken:
                ag._push_saved_tensors_default_hooks(pack, unpack)


def _kind(mode: Any) -> str:
    return f"{type(mode).__module__}.{type(mode).__qualname__}"


@contextlib.contextmanager
def _function_modes_aside(notes: list[str]) -> Iterator[None]:
    """Pop the torch-function modes above the call except ``torch.device`` contexts; push them back after."""
    from torch.utils._device import DeviceContext

    from .._interrupt import held_back

    popped = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    popped.reverse()  # outermost first
    try:
        for mode in popped:
            if isinstance(mode, DeviceContext) or type(mode).__module__.startswith("vramnb."):
                torch._C._push_on_torch_function_stack(mode)  # a device context; vramnb's own (a step's watch)
            else:
                notes.append(f"the TorchFunctionMode {_kind(mode)} active around the call did not see the "
                             "estimate's fake step")
        yield
    finally:
        with held_back():
            for _ in range(torch._C._len_torch_function_stack()):
                torch._C._pop_torch_function_stack()
            for mode in popped:
                torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def _dispatch_modes_aside(notes: list[str]) -> Iterator[None]:
    """Pop the dispatch modes above the call (PyTorch's ``_disable_current_modes``), pushed back after."""
    from torch.utils._python_dispatch import _disable_current_modes

    from torch.utils._python_dispatch import _pop_mode, _push_mode

    from .._interrupt import held_back

    with _disable_current_modes() as modes:
        ours = [m for m in modes if type(m).__module__.startswith("vramnb.")]  # vramnb's own stay on
        for mode in modes:
            if mode not in ours:
                notes.append(f"the TorchDispatchMode {_kind(mode)} active around the call did not see the "
                             "estimate's fake step")
        for mode in ours:
            _push_mode(mode)
        try:
            yield
        finally:
            with held_back():
                for _ in ours:
                    _pop_mode()
