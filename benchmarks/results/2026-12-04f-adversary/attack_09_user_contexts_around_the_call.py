"""The user calls an entry point inside a context of their own that stays active: `with torch.device("cpu")`
(a TorchFunctionMode), `torch.autograd.graph.save_on_cpu()` and a counting `saved_tensors_hooks`, a user
`TorchDispatchMode` that counts ops, `FlopCounterMode`, `torch.autograd.detect_anomaly()`,
`torch.random.fork_rng()`, `torch.autograd.set_multithreading_enabled(False)`,
`torch.nn.attention.sdpa_kernel(MATH)`, `torch.autograd.graph.disable_saved_tensors_hooks`.
After each: the entry point runs (or refuses clearly) and the user's model, optimizer and global state are
as before. What a user's mode or pack hook saw of the step is printed, not failed (it sees the step's ops as
it would see the user's own step; that a pack hook keeping tensors gets the estimate's fake ones is an xfail
test: tests/test_estimate_under_anomaly_mode.py). Prints PASS/FAIL per (context, entry point)."""
import contextlib
import sys

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import vramnb
from _common import fingerprint, global_fp, diff


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


PACKS = {"n": 0}


def _pack(t):
    PACKS["n"] += 1
    return t


def contexts():
    from torch.utils.flop_counter import FlopCounterMode
    from torch.nn.attention import sdpa_kernel, SDPBackend
    return {
        "device_cpu": lambda: torch.device("cpu"),
        "save_on_cpu": lambda: torch.autograd.graph.save_on_cpu(),
        "saved_tensors_hooks": lambda: torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t),
        "dispatch_mode": lambda: Count(),
        "flop_counter": lambda: FlopCounterMode(display=False),
        "detect_anomaly": lambda: torch.autograd.detect_anomaly(),
        "fork_rng": lambda: torch.random.fork_rng(),
        "no_multithreading": lambda: torch.autograd.set_multithreading_enabled(False),
        "sdpa_math": lambda: sdpa_kernel(SDPBackend.MATH),
        "disable_saved_hooks": lambda: torch.autograd.graph.disable_saved_tensors_hooks("adv7: user disabled"),
    }


ENTRIES = {
    "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
    "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB"),
    "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target="8GiB", progress=False),
}


def setup():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    b = torch.randn(4, 8)
    m(b).sum().backward(); o.step(); o.zero_grad()
    return m, b, (lambda mm, bb: mm(bb).pow(2).mean()), o


def main(only=None):
    ok = True
    tried = held = 0
    for cname, make in contexts().items():
        if only and cname != only:
            continue
        for ename, run in ENTRIES.items():
            m, b, l, o = setup()
            before = {**fingerprint({"m": m, "o": o, "b": b}), **{f"g.{k}": v for k, v in global_fp().items()}}
            PACKS["n"] = 0
            err = None
            ctx = make()
            try:
                with ctx as c:
                    try:
                        r = run(m, b, l, o)
                    except Exception as e:  # noqa: BLE001
                        err = f"{type(e).__name__}: {str(e)[:240]}"
                    inside = {**fingerprint({"m": m, "o": o, "b": b})}
            except Exception as e:  # noqa: BLE001
                err = f"(leaving the context) {type(e).__name__}: {str(e)[:240]}"
                inside = {}
            after = {**fingerprint({"m": m, "o": o, "b": b}), **{f"g.{k}": v for k, v in global_fp().items()}}
            d = diff(before, after)
            seen = []
            if isinstance(c, Count) and c.n:
                seen.append(f"the user's mode saw {c.n} ops")
            if PACKS["n"]:
                seen.append(f"the user's pack hook ran {PACKS['n']} times")
            tried += 1
            if d or (err and not err.startswith(("InputError", "ValueError", "VramnbError"))):
                ok = False
                print(f"FAIL {cname} / {ename}: {'(raised ' + err + ') ' if err else ''}{'; '.join(seen)}")
                for line in d:
                    print("    ", line)
            else:
                held += 1
                print(f"PASS {cname} / {ename}" + (f" (refused: {err})" if err else "") + (f" [{'; '.join(seen)}]" if seen else ""))
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
