"""``torch.compile``'d code runs eagerly inside vramnb's entry points, and the user's compiled code is left as found.

Dynamo keeps what it compiled per *code object* (a cache of guarded entries, and a
recompile budget, ``torch._dynamo.config.recompile_limit``), shared by every compiled
module and function whose frames run that code (every ``torch.compile(nn.Sequential)``
runs the one ``external_utils.wrap_inline`` frame). A step that vramnb runs through the
user's compiled model would write there:

* under a dispatch mode that does not ignore compile internals (the fake step of
  ``estimate``/``max_batch_size``/``fit``), dynamo declines the frame *and marks its code
  object skipped for good* (``ConvertFrameReturn``'s default ``apply_to_code=True``): the
  user's compiled model, and every other one sharing that code, runs eagerly for the rest
  of the process;
* under each of ``compare``'s recipes (autocast, ``no_grad``, other batch sizes: new guards)
  dynamo recompiles the user's code until the recompile budget is spent, after which that
  code runs eagerly for the rest of the process.

Neither can be undone through PyTorch's API (a cache entry cannot be put back). So every
entry point runs with PyTorch's own ``torch.compiler.set_stance("force_eager")``: compiled
code runs as plain PyTorch, dynamo is never called, and its caches, skip marks and budgets
stay as they were. :func:`compiled_parts` names what ran eagerly, for the reports' notes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["compiled_eagerly", "compiled_note", "compiled_parts"]

_ON = [0]  # how many compiled_eagerly blocks are open, in all threads (the notes say "ran eagerly" only inside one)
_LOCK = threading.Lock()
_STANCE: list[Any] = [None]  # the set_stance made by the first block open; its exit puts back the stance it found


@contextlib.contextmanager
def compiled_eagerly() -> Iterator[None]:
    """Run ``torch.compile``'d code eagerly inside the block (``torch.compiler.set_stance("force_eager")``),
    the stance found put back after. Nothing happens where ``torch._dynamo`` was never imported (nothing
    compiled exists then, and importing it would take seconds).

    The stance is process-wide, and blocks of two threads need not close in the order they opened:
    the first block open sets it and the last one to close puts back the stance the first found
    (each block putting back what it found would leave ``force_eager`` set for good where one thread's
    block closes inside the other's)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not hasattr(dynamo, "set_stance"):
        yield
        return
    from ._interrupt import held_back

    opened = False
    try:
        # set_stance sets the stance when it is made: made and entered as one. An interrupt held back here is
        # raised when the block below ends, once the stance is set and counted: inside the try, which undoes it
        with held_back(), _LOCK:
            if not _ON[0]:
                _STANCE[0] = dynamo.set_stance("force_eager")
            _ON[0] += 1
            opened = True
        yield
    finally:
        if opened:
            with held_back(), _LOCK:
                _ON[0] -= 1
                if not _ON[0]:
                    stance, _STANCE[0] = _STANCE[0], None
                    stance.__exit__(None, None, None)


def compiled_parts(model: Any) -> list[str]:
    """The names of ``model``'s modules that are ``torch.compile``'d: an ``OptimizedModule`` (``torch.compile(m)``)
    or a module compiled in place (``m.compile()``); ``""`` is the model itself."""
    import torch

    if not isinstance(model, torch.nn.Module) or "torch._dynamo" not in sys.modules:
        return []
    from torch._dynamo.eval_frame import OptimizedModule

    out = []
    for name, m in model.named_modules(remove_duplicate=True):
        if isinstance(m, OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None:
            out.append(name)
    return out


def compiled_note(model: Any, what: str) -> str | None:
    """The report's note for a model with compiled parts (``what``: "the fake step", "the profiled steps"), else None."""
    parts = compiled_parts(model) if _ON[0] else []
    if not parts:
        return None
    names = "the model" if parts == [""] else ", ".join(p or "the model" for p in parts[:3]) + (
        f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return (f"torch.compile'd code ({names}) ran eagerly in {what} (torch.compiler.set_stance('force_eager')), so "
            "that your compiled code's caches and recompile budget stay as they were; its compiled kernels' memory "
            "may differ from these eager ones' (inductor fuses operators and plans its own buffers)")
