"""A one-line live gauge while a measured cell runs (``%%vram --live``, ``%vram on --live``).

A sampler thread reads the device's counters a few times a second and updates one display
output in place (IPython's ``display(..., display_id=True)`` and ``DisplayHandle.update``):
allocated, reserved (CUDA), the peak so far and a sparkline of allocated memory, with the
seconds elapsed. When the cell ends the gauge is replaced by the final report.

* **CUDA**: the caching allocator's host-side counters (``torch.cuda.memory_allocated``,
  ``memory_reserved``, ``max_memory_allocated``): no synchronisation, no kernel, and nothing
  at all until the cell's code has created the CUDA context (``torch.cuda.is_initialized``).
* **CPU**: the storage tracker's counters (two integers, read without its lock).

The thread runs in a copy of the cell's context (``contextvars``), so that ipykernel sends
its updates as the cell's output. Where nothing can update an output in place (a terminal
IPython, a script: no kernel), there is no gauge, only the final report.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from ._units import format_bytes

__all__ = ["LiveGauge", "can_update_in_place", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[int], width: int = 24) -> str:
    """The last ``width`` values as block characters, scaled from 0 to their maximum."""
    tail = values[-width:]
    top = max(tail) if tail else 0
    if top <= 0:
        return _BARS[0] * len(tail)
    return "".join(_BARS[min(len(_BARS) - 1, int(v / top * (len(_BARS) - 1) + 0.5))] for v in tail)


def can_update_in_place(shell: Any) -> bool:
    """Whether the front-end gets display updates: a Jupyter kernel (not a terminal or a script)."""
    return getattr(shell, "kernel", None) is not None


class _Line:
    """The gauge's text as a displayable object (plain text: every front-end shows it)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)

    def __repr__(self) -> str:
        return self.text


class LiveGauge:
    """Sample ``read() -> (allocated, reserved or None, peak)`` every ``interval`` seconds and
    show it on one updated line, from :meth:`start` to :meth:`stop`.

    ``read`` must not block and must be safe to call from another thread (the probes' counters are).
    """

    def __init__(self, device: str, read: Callable[[], tuple[int, int | None, int]], interval: float = 0.25) -> None:
        self.device = device
        self.read = read
        self.interval = interval
        self.samples: list[int] = []
        self.updates = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._t0 = 0.0

    def line(self) -> str:
        """The gauge's text now (also the first one, before any sample: zeros)."""
        allocated, reserved, peak = self.read()
        self.samples.append(allocated)
        parts = [f"vram live · {self.device}", f"allocated {format_bytes(allocated)}"]
        if reserved is not None:
            parts.append(f"reserved {format_bytes(reserved)}")
        parts += [f"peak {format_bytes(peak)}", sparkline(self.samples), f"{time.perf_counter() - self._t0:.1f} s"]
        return " · ".join(parts)

    def start(self) -> None:
        from IPython.display import display

        self._t0 = time.perf_counter()
        self._handle = display(_Line(self.line()), display_id=True)
        ctx = contextvars.copy_context()  # ipykernel's parent message: the updates are this cell's output
        self._thread = threading.Thread(target=ctx.run, args=(self._run,), name="vramnb-live", daemon=True)
        self._thread._vramnb_own = True  # type: ignore[attr-defined]  # reads counters only: no user code
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._handle.update(_Line(self.line()))
                self.updates += 1
            except Exception:  # noqa: BLE001 - a gauge that cannot update stops; the cell goes on
                return

    def stop(self, final: Any = None) -> None:
        """Stop the sampler; the line becomes ``final`` (the report) or, without one, the last reading."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._handle is not None:
            self._handle.update(final if final is not None else _Line(self.line()))
