"""`profile_distributed` (2 gloo ranks, forked) where the ranks can reach the parent's memory despite the fork:
a model whose parameters were put in shared memory (`model.share_memory()`, as Hogwild! notebooks do) and
which each rank trains; a shared-memory buffer a rank's forward updates in place (a BatchNorm's running stats
of a shared model); a writable `mmap` (MAP_SHARED) a rank writes into; a file opened for reading whose
offset a rank moves (round f's fix, now through a file-backed dataset object); a LR scheduler and a
`torch.Generator` passed as args. The parent's objects must be as before (or the call refused before the
ranks start, naming the problem). Prints PASS/FAIL per case."""
import mmap
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

import vramnb
from _common import diff, fingerprint, global_fp

vramnb.profile_distributed  # noqa: B018 - its lazy import adds torch.jit's warnings filters (an import, not the call)
global_fp()  # its first call imports torch._dynamo (sympy adds a warnings filter) after reading the filters

_PATH = os.path.join(tempfile.mkdtemp(prefix="adv8-dist-"), "rows.bin")
with open(_PATH, "wb") as fh:
    fh.write(np.arange(1024, dtype=np.float32).tobytes())


def rank_fn(rank, world, model, opt, extra):
    kind, obj = extra
    if kind == "mmap":
        obj[0:4] = b"\xff\xff\xff\xff"
    elif kind == "file":
        obj.read(16)
    elif kind == "generator":
        torch.randn(3, generator=obj)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    o = opt if opt is not None else torch.optim.SGD(ddp.parameters(), lr=0.1)
    return ddp, torch.randn(4, 8), (lambda m, b: m(b).pow(2).mean()), o


def _model(shared=False, bn=False):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), *( [nn.BatchNorm1d(16)] if bn else []), nn.ReLU(), nn.Linear(16, 2))
    if shared:
        m.share_memory()
    return m


def case_shared_params():
    m = _model(shared=True)
    return m, None, ("none", None), {"m": m}


def case_shared_bn_buffers():
    m = _model(shared=True, bn=True)
    return m, None, ("none", None), {"m": m}


def case_shared_with_user_optimizer():
    m = _model(shared=True)
    o = torch.optim.Adam(m.parameters(), lr=1e-2)
    return m, o, ("none", None), {"m": m, "o": o}


def case_writable_mmap():
    m = _model()
    fh = open(_PATH, "r+b")
    mm = mmap.mmap(fh.fileno(), 0)
    return m, None, ("mmap", mm), {"m": m, "bytes": lambda: bytes(mm[0:8])}


def case_file_dataset():
    m = _model()
    f = open(_PATH, "rb")
    f.seek(8)
    return m, None, ("file", f), {"m": m, "pos": lambda: f.tell()}


def case_generator_arg():
    m = _model()
    g = torch.Generator().manual_seed(3)
    return m, None, ("generator", g), {"m": m, "g": g}


CASES = {k[5:]: v for k, v in list(globals().items()) if k.startswith("case_")}


def _fp(w):
    out = fingerprint({k: v for k, v in w.items() if not (callable(v) and not isinstance(v, nn.Module))})
    out.update({k: v() for k, v in w.items() if callable(v) and not isinstance(v, nn.Module)})
    return out


def main(only=None):
    ok = True
    tried = held = 0
    for name, setup in CASES.items():
        if only and name != only:
            continue
        m, o, extra, w = setup()
        before = {**_fp(w), **{f"g.{k}": v for k, v in global_fp().items()}}
        got = None
        try:
            r = vramnb.profile_distributed(rank_fn, nprocs=2, args=(m, o, extra), backend="gloo", timeout=120)
            got = f"finished: {type(r).__name__}" + (f" errors: {[str(x)[:120] for x in getattr(r, 'errors', [])][:2]}" if getattr(r, "errors", None) else "")
        except Exception as e:  # noqa: BLE001
            got = f"{type(e).__name__}: {str(e)[:300]}"
        after = {**_fp(w), **{f"g.{k}": v for k, v in global_fp().items()}}
        d = diff(before, after)
        tried += 1
        if got and not got.startswith(("finished", "ValueError", "TypeError", "InputError")):
            d.insert(0, "not a refusal naming the problem: a bare error came out")
        if d:
            ok = False
            print(f"FAIL profile_distributed / {name} ({got}):")
            for line in d:
                print("    ", line)
        else:
            held += 1
            print(f"PASS profile_distributed / {name}: {got}")
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
