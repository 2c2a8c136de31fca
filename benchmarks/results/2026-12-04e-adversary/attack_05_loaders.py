"""fit (and estimate where it takes a loader) on loaders of kinds earlier rounds did not try: a
DistributedSampler after set_epoch(3), a WeightedRandomSampler with its own generator, a
SubsetRandomSampler, a stateful batch_sampler of the user's (a cursor), a dataset whose __getitem__ fills an
in-memory cache dict and counts reads, a collate_fn closure that counts, itertools.cycle over a loader (one-shot:
must be refused), a map-style dataset with a set_format-like switch (HF datasets style). After each call: the
sampler's/dataset's state, the cache, the counters, the next epoch's order and the global RNGs are as before."""
import itertools
import sys

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, SubsetRandomSampler, WeightedRandomSampler

import vramnb
from _common import fingerprint, global_fp, diff


class Caching(Dataset):
    def __init__(self):
        self.cache = {}
        self.reads = 0
        self.fmt = "torch"

    def __len__(self):
        return 40

    def set_format(self, fmt):
        self.fmt = fmt

    def __getitem__(self, i):
        self.reads += 1
        if i not in self.cache:
            self.cache[i] = torch.full((8,), float(i))
        return self.cache[i]


class Cursor(torch.utils.data.Sampler):
    def __init__(self, n, bs):
        self.n, self.bs, self.pos = n, bs, 0

    def __len__(self):
        return self.n // self.bs

    def __iter__(self):
        while self.pos + self.bs <= self.n:
            b = list(range(self.pos, self.pos + self.bs))
            self.pos += self.bs
            yield b
        self.pos = 0


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def loss(m, b):
    return m(b).pow(2).mean()


def cases():
    ds = Caching()
    g = torch.Generator().manual_seed(1)
    ds_sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=3)
    ds_sampler.set_epoch(3)
    counter = {"n": 0}

    def collate(items):
        counter["n"] += 1
        return torch.stack(items)
    yield "DistributedSampler epoch 3", DataLoader(ds, batch_size=4, sampler=ds_sampler), (ds, ds_sampler)
    ds = Caching()
    yield "WeightedRandomSampler(generator)", DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler(
        [1.0] * 40, 40, generator=g)), (ds, g)
    ds = Caching()
    yield "SubsetRandomSampler", DataLoader(ds, batch_size=4, sampler=SubsetRandomSampler(range(20))), (ds,)
    ds = Caching()
    cur = Cursor(40, 4)
    next(iter(cur))  # the user is mid-epoch: pos 4
    yield "stateful batch_sampler mid-epoch", DataLoader(ds, batch_sampler=cur), (ds, cur)
    ds = Caching()
    yield "caching dataset + counting collate_fn", DataLoader(ds, batch_size=4, shuffle=True, collate_fn=collate), (ds, counter)
    ds = Caching()
    ds.set_format("numpy-ish")
    yield "dataset with a format switch", DataLoader(ds, batch_size=4), (ds,)


def order(loader):
    return None


if __name__ == "__main__":
    ok = True
    vramnb.fit(model(), torch.ones(4, 8), loss, target="8GiB", progress=False)  # vramnb's lazy imports (sympy adds a warnings filter) first
    for name, loader, watched in cases():
        m = model()
        before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        err = None
        try:
            vramnb.fit(m, loader, loss, target="8GiB", progress=False)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:200]}"
        after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        d = diff(before, after)
        ok &= not d
        print(("FAIL " if d else "PASS ") + name + " / fit" + (f" (raised {err})" if err else ""))
        for line in d:
            print("    ", line)
    # one-shot: itertools.cycle over a loader
    ds = Caching()
    it = itertools.cycle(DataLoader(ds, batch_size=4))
    try:
        vramnb.fit(model(), it, loss, target="8GiB", progress=False)
        print("FAIL itertools.cycle / fit: not refused; dataset reads", ds.reads)
        ok = False
    except Exception as e:  # noqa: BLE001
        good = ds.reads == 0
        ok &= good
        print(("PASS" if good else "FAIL") + f" itertools.cycle / fit refused ({type(e).__name__}: {str(e)[:160]}); reads {ds.reads}")
    print("ALL PASS" if ok else "SOME FAIL")
