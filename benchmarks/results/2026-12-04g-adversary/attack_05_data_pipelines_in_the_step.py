"""Data pipelines the user's loss or forward draws from during the step: a DataLoader iterator (shuffled, with
its sampler's own `torch.Generator`), a `RandomSampler` with a generator used directly, a `persistent_workers`
loader (num_workers=1) whose iterator the loss advances, an `IterableDataset` with a shared Python counter, a
dataset holding a `random.Random` and a NumPy Generator, a file-backed dataset reading with an open file's
offset (`f.seek`/`f.read`), an `mmap` dataset, an `io.BytesIO` stream, a `csv.reader` over a file, a generator
function's iterator. Each must keep its position (or be refused before the step starts, naming the problem).
Prints PASS/FAIL per case and entry point."""
import io
import mmap
import os
import random
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, TensorDataset

from _common import main

_TMP = tempfile.mkdtemp(prefix="adv8-")
_PATH = os.path.join(_TMP, "data.bin")
with open(_PATH, "wb") as fh:
    fh.write(np.random.default_rng(0).standard_normal(4096).astype(np.float32).tobytes())


def _m():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _o(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


def _extra_pos(get):
    return lambda w: {"pos": get(w)}


def loader_iter_with_sampler_gen():
    m = _m()
    g = torch.Generator().manual_seed(5)
    dl = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=4, shuffle=True, generator=g)
    it = iter(dl)

    def l(mm, b):
        x = next(it)[0]
        return mm(x.to(b)).pow(2).mean() + mm(b).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "g": g, "it": it.__dict__}


def random_sampler_direct():
    m = _m()
    g = torch.Generator().manual_seed(6)
    s = RandomSampler(range(100), generator=g)
    it = iter(s)
    idx = []

    def l(mm, b):
        idx.append(next(it))
        return mm(b).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "g": g, "idx": idx}


def persistent_workers_loader():
    m = _m()
    dl = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=4, num_workers=1, persistent_workers=True)
    it = iter(dl)
    seen = []

    def l(mm, b):
        seen.append(next(it)[0].shape[0])
        return mm(b).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "seen": seen}


class Counted(IterableDataset):
    served = 0

    def __iter__(self):
        while True:
            Counted.served += 1
            yield torch.full((8,), float(Counted.served))


def iterable_dataset_shared_counter():
    m = _m()
    Counted.served = 0
    it = iter(Counted())

    def l(mm, b):
        return mm(b + 0 * next(it)).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "cls": Counted.__dict__.get("served")}


class Noisy(Dataset):
    def __init__(self):
        self.py = random.Random(3)
        self.np = np.random.default_rng(4)
        self.x = torch.randn(16, 8)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return self.x[i] * self.py.uniform(0.9, 1.1) * float(self.np.uniform(0.9, 1.1))


def dataset_with_rngs():
    m = _m()
    ds = Noisy()

    def l(mm, b):
        return mm(b + 0 * ds[1]).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "ds": ds}


class FileDS:
    def __init__(self, path):
        self.f = open(path, "rb")
        self.f.seek(64)

    def next_row(self):
        return torch.frombuffer(bytearray(self.f.read(32)), dtype=torch.float32)


def file_backed_dataset():
    m = _m()
    ds = FileDS(_PATH)

    def l(mm, b):
        return mm(b + 0 * ds.next_row()).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m, "ds": ds}


def mmap_dataset():
    m = _m()
    fh = open(_PATH, "rb")
    mm_ = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    mm_.seek(128)
    holder = {"mm": mm_}

    def l(mm, b):
        row = torch.frombuffer(bytearray(holder["mm"].read(32)), dtype=torch.float32)
        return mm(b + 0 * row).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m}


def bytesio_stream():
    m = _m()
    buf = io.BytesIO(np.arange(256, dtype=np.float32).tobytes())
    buf.seek(16)

    def l(mm, b):
        row = torch.frombuffer(bytearray(buf.read(32)), dtype=torch.float32)
        return mm(b + 0 * row).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m}


def generator_function_iterator():
    m = _m()

    def rows():
        i = 0
        while True:
            i += 1
            yield torch.full((8,), float(i))
    it = rows()
    next(it)

    def l(mm, b):
        return mm(b + 0 * next(it)).pow(2).mean()
    return m, torch.randn(4, 8), l, _o(m), {"m": m}


def _pos_extra(w):  # file offsets and stream positions, read by the harness (extra)
    return {}


CASES = {k: v for k, v in list(globals().items()) if callable(v) and getattr(v, "__module__", "") == __name__
         and not k.startswith("_") and k not in ("main", "Counted", "Noisy", "FileDS")}


def _positions(setup):
    """Run the entry with extra() reading each case's stream positions through the objects the loss holds."""
    def extra(w):
        out = {}
        for cell in (setup_state.get("l").__closure__ or ()):
            v = cell.cell_contents
            if isinstance(v, (io.BufferedReader, io.BytesIO)):
                out["tell"] = v.tell()
            elif isinstance(v, FileDS):
                out["tell"] = v.f.tell()
            elif isinstance(v, dict) and "mm" in v:
                out["tell"] = v["mm"].tell()
            elif type(v).__name__ == "generator":
                out["gen_frame"] = (v.gi_frame.f_locals.get("i") if v.gi_frame else "done")
            elif hasattr(v, "__next__") and hasattr(v, "_num_yielded"):
                out["yielded"] = v._num_yielded
            elif isinstance(v, Counted):
                pass
        out["Counted.served"] = Counted.served
        return out
    return extra


setup_state = {}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue

        def wrapped(setup=setup):
            r = setup()
            setup_state["l"] = r[2]
            return r
        ok &= main(name, wrapped, extra=_positions(setup))
    print("ALL PASS" if ok else "SOME FAIL")
