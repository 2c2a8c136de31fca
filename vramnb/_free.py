"""Release the memory a notebook holds out of sight, and say how much came back.

IPython keeps references the user does not see: the output history (``Out``,
``_N``, and ``_``/``__``/``___`` in both the user namespace and the hidden one,
where ``%reset -f out`` leaves the last value), the last execution result, and
the last exception (``sys.last_traceback``, ``sys.last_value``,
``sys.last_exc`` on Python 3.12+, the shell's own ``InteractiveTB.tb``, whose
frames keep every local variable of the failed call alive). Each holder is
released in turn and the memory that came back measured after
``gc.collect()``; then ``torch.cuda.empty_cache()`` returns cached blocks.
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._probe import CpuProbe, probe_for
from ._render import Rendered, Table
from ._units import format_bytes

__all__ = ["FreeReport", "free_hidden", "hidden_holders"]

_UNDERS = ("_", "__", "___")


def _tracebacks(shell: Any) -> list[Any]:
    tbs = [getattr(sys, "last_traceback", None), getattr(getattr(shell, "InteractiveTB", None), "tb", None)]
    for name in ("last_value", "last_exc"):
        exc = getattr(sys, name, None)
        tbs.append(getattr(exc, "__traceback__", None))
    res = getattr(shell, "last_execution_result", None)
    err = getattr(res, "error_in_exec", None)
    tbs.append(getattr(err, "__traceback__", None))
    return [tb for tb in tbs if tb is not None]


def hidden_holders(shell: Any) -> dict[str, Any]:
    """Out-of-sight holders in an IPython shell, by the name shown to the user."""
    ns, hidden = shell.user_ns, shell.user_ns_hidden
    out: dict[str, Any] = {}
    oh = ns.get("_oh")
    if oh:
        out["Out"] = list(oh.values())
    unders = [hidden.get(u) for u in _UNDERS] + [ns.get(u) for u in _UNDERS if ns.get(u) is hidden.get(u)]
    unders += [getattr(shell.displayhook, u, None) for u in _UNDERS]
    res = getattr(shell, "last_execution_result", None)
    unders.append(getattr(res, "result", None))
    out["_ __ ___"] = unders
    frames: list[Any] = []
    for tb in _tracebacks(shell):
        while tb is not None:
            f = tb.tb_frame
            module = str(f.f_globals.get("__name__", ""))
            user_cell = f.f_globals is ns and f.f_code.co_name == "<module>"  # its locals are the namespace
            if not user_cell and not module.startswith(("IPython", "vramnb", "ipykernel")):
                frames.extend(f.f_locals.values())
            tb = tb.tb_next
    if frames:
        out["last exception"] = frames
    return out


def _clear_output_history(shell: Any) -> None:
    ns, hidden, dh = shell.user_ns, shell.user_ns_hidden, shell.displayhook
    if getattr(dh, "do_full_cache", False):
        dh.flush()
    for u in _UNDERS:
        old = hidden.get(u)
        if u in hidden:
            hidden[u] = ""
        if u in ns and (ns[u] is old or ns[u] is getattr(dh, u, None)):
            ns[u] = ""  # only IPython's own value, never a user's variable named _
        setattr(dh, u, "")
    res = getattr(shell, "last_execution_result", None)
    if res is not None:
        res.result = None


def _clear_last_exception(shell: Any) -> None:
    for tb in _tracebacks(shell):
        traceback.clear_frames(tb)  # drop the frames' locals; the exception itself stays
        while tb is not None:
            # Python < 3.13 keeps a snapshot dict of the locals on the frame (made
            # when IPython's traceback formatter read f_locals) that clear() leaves
            # alive; reading f_locals again re-syncs it. Never touch a module-level
            # frame, whose f_locals is the namespace itself.
            frame = tb.tb_frame
            f_locals = frame.f_locals
            if f_locals is not frame.f_globals:
                f_locals.clear()
            tb = tb.tb_next
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
    """

    device: str
    freed: list[tuple[str, int]] = field(default_factory=list)
    returned: int | None = None
    method: str = ""

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
        t.note(f"measured by the {self.method}")
        return t


def free_hidden(shell: Any, device: torch.device) -> FreeReport:
    """Release IPython's out-of-sight references, collect garbage and empty the
    CUDA cache, measuring what each step gave back on ``device``."""
    probe = probe_for(device)

    def allocated(collect: bool = True) -> int:
        if collect:
            gc.collect()
        if isinstance(probe, CpuProbe):
            probe.tracker.scan()
        return probe.sample(device_info=False).allocated

    steps: list[tuple[str, Callable[[], None]]] = [
        ("unreachable cycles (gc.collect)", lambda: None),
        ("output history (Out, _, __, ___)", lambda: _clear_output_history(shell)),
        ("last exception (traceback frames)", lambda: _clear_last_exception(shell)),
    ]
    report = FreeReport(str(device), method=probe.method)
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
    return report
