"""What the out-of-memory post-mortem costs when nothing fails (issue 13).

A measured block registers one listener for out-of-memory failures and removes it at
its end; the CUDA observer and the CPU tracker's capture run only when an allocation
fails. This times, on the CPU: (1) registering and removing the listener, (2) a no-op
``vramnb.vram("cpu")`` block with the post-mortem as it is, and with its listener
replaced by a no-op (the difference is the post-mortem's cost per block), (3) an
operator inside a measured block that raises a non-memory error (the tracker's
except branch: the only extra work on the success path is none), (4) an operator
under the tracker with and without the watch of autocast's weight-cast cache (one
list check and one identity comparison per operator).

    python benchmarks/bench_postmortem.py
"""

from __future__ import annotations

import statistics
import time

import torch

import vramnb
from vramnb import _measure
from vramnb.diagnose import _postmortem
from vramnb.diagnose._autocast_cache import CastCache


def _median(fn, n: int, repeat: int = 7) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def main() -> None:
    listen = _median(lambda: _postmortem.listening("cpu", lambda s: None)(), 20000)

    def block() -> None:
        with vramnb.vram("cpu", record=False):
            pass
    with_pm = _median(block, 20, 5)
    real = _measure.listening
    _measure.listening = lambda dev, cb: (lambda: None)
    try:
        without = _median(block, 20, 5)
    finally:
        _measure.listening = real
    print(f"listener register + remove: {listen * 1e6:.2f} µs")
    print(f"no-op vram('cpu') block: {with_pm * 1e3:.1f} ms with the post-mortem, {without * 1e3:.1f} ms without "
          "(medians of 5 x 20 blocks; the storage scan at each block's start and end dominates)")
    x = torch.ones(4)
    with vramnb.vram("cpu", record=False):
        per_op = _median(lambda: torch.add(x, 1), 20000)
    print(f"an operator under the tracker: {per_op * 1e6:.2f} µs (no post-mortem work unless it raises)")
    # (4) the autocast weight-cast cache's watch: one check per operator inside a measured CPU block
    from vramnb._tracker import cpu_tracker

    tracker = cpu_tracker()
    with tracker.tracking():
        watched, plain = [], []
        for i in range(10):  # interleaved, each first in turn: a loaded machine's drift hits both alike
            for on in ((True, False) if i % 2 else (False, True)):
                if on:
                    tracker.watches.append(CastCache())
                (watched if on else plain).append(_median(lambda: torch.add(x, 1), 5000, 1))
                tracker.watches.clear()
    print(f"per operator, the autocast cache's watch on / off: {statistics.median(watched) * 1e6:.2f} / "
          f"{statistics.median(plain) * 1e6:.2f} µs (medians of 10 x 5000)")


if __name__ == "__main__":
    main()
