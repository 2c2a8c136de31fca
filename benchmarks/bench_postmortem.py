"""What the out-of-memory post-mortem costs when nothing fails (issue 13).

A measured block registers one listener for out-of-memory failures and removes it at
its end; the CUDA observer and the CPU tracker's capture run only when an allocation
fails. This times, on the CPU: (1) registering and removing the listener, (2) a no-op
``vramnb.vram("cpu")`` block with the post-mortem as it is, and with its listener
replaced by a no-op (the difference is the post-mortem's cost per block), (3) an
operator inside a measured block that raises a non-memory error (the tracker's
except branch: the only extra work on the success path is none).

    python benchmarks/bench_postmortem.py
"""

from __future__ import annotations

import statistics
import time

import torch

import vramnb
from vramnb import _measure
from vramnb.diagnose import _postmortem


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


if __name__ == "__main__":
    main()
