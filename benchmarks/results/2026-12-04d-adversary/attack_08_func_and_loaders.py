"""torch.func.functional_call in the loss (with a params dict taken from the model), torch.func.grad
inside a forward; fit on DataLoaders with a generator, a sampler with its own generator, a dataset
with per-item torch.Generator draws, persistent workers. Prints PASS/FAIL."""
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from _common import main, fingerprint, diff, global_fp
import vramnb


def s_functional():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    params = dict(m.named_parameters())

    def loss(mm, b):
        return torch.func.functional_call(mm, params, (b,)).sum()
    return m, torch.randn(4, 8), loss, opt, {"m": m, "params": params}


class DS(Dataset):
    def __init__(self):
        self.g = torch.Generator().manual_seed(1)
        self.reads = 0

    def __len__(self):
        return 40

    def __getitem__(self, i):
        self.reads += 1
        return torch.randn(8, generator=self.g) + i


def loader_cases():
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(5)
    sg = torch.Generator().manual_seed(6)
    ds = DS()
    yield "generator=", DataLoader(ds, batch_size=4, shuffle=True, generator=g), m, opt, {"g": g, "ds": ds}
    ds = DS()
    yield "sampler with generator", DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, generator=sg)), m, opt, {"sg": sg, "ds": ds}
    ds = DS()
    dl = DataLoader(ds, batch_size=4, shuffle=True, num_workers=1, persistent_workers=True, generator=torch.Generator().manual_seed(3))
    first = [b.sum().item() for b in dl]  # the user's epoch 1: workers start and stay
    yield "persistent workers", dl, m, opt, {"dl_gen": dl.generator, "ds": ds, "iterator": dl._iterator}


if __name__ == "__main__":
    ok = main("torch.func.functional_call", s_functional)
    for title, dl, m, opt, watched in loader_cases():
        before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        epoch_b = None
        err = None
        try:
            vramnb.fit(m, dl, lambda mm, b: mm(b).sum(), opt, target="8GiB", progress=False)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        d = diff(before, after)
        print(("FAIL " if d else "PASS ") + f"fit({title})" + (f" raised {err}" if err else ""), *d, sep="\n    ")
        ok &= not d
    print("ALL PASS" if ok else "SOME FAIL")
