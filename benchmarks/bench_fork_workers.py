"""An epoch of a DataLoader with forked workers, plain and inside ``vramnb.vram()`` (CPU).

Issue 28, item 6: workers forked inside a measured block inherited the tracker's dispatch
mode and ``gc`` callback and ran every operator of theirs through it. Run from the repository
root (``PYTHONPATH=. python benchmarks/bench_fork_workers.py``); it prints seconds per epoch.
"""

import multiprocessing as mp
import time

import torch
from torch.utils.data import DataLoader, Dataset

import vramnb


class Work(Dataset):  # each item runs many small operators in the worker
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> torch.Tensor:
        x = torch.full((64,), float(i))
        for _ in range(50):
            x = (x * 1.0001 + 1).relu()
        return x


def epoch() -> float:
    loader = DataLoader(Work(), batch_size=16, num_workers=2, multiprocessing_context=mp.get_context("fork"))
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


if __name__ == "__main__":
    torch.set_num_threads(1)
    vramnb.vram  # noqa: B018 - imported before timing
    with vramnb.vram():  # the first block imports torch._dynamo: not timed
        pass
    plain = min(epoch() for _ in range(3))
    measured = []
    for _ in range(3):
        with vramnb.vram():
            measured.append(epoch())
    print(f"plain epoch: {plain:.3f} s; inside vramnb.vram(): {min(measured):.3f} s (best of 3, 2 workers, fork)")
