"""The user's context active around the call, not tried in round f: `torch.inference_mode()`, `torch.no_grad()`,
`torch.enable_grad()` inside `no_grad`, `torch.autocast("cpu", bfloat16)`, a user `TorchFunctionMode` counting calls,
a user `TorchDispatchMode` counting ops, `torch.set_default_dtype(float64)` (model in float64), a parametrize
`cached()` context, `torch.random.fork_rng()` with a reseed inside, `warnings.catch_warnings(record=True)`
collecting, `torch.autograd.set_grad_enabled(False)`, `torch.utils.checkpoint.set_checkpoint_debug_enabled(True)`,
`torch.sparse.check_sparse_tensor_invariants()`, `torch.autograd.graph.disable_saved_tensors_hooks("msg")`.
The state seen inside the context after the call must be what it was before; the mode's own log must not get the
step's (fake) operations. Prints PASS/FAIL per case and entry point."""
import contextlib
import sys
import warnings

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import vramnb
from _common import diff, fingerprint, global_fp, reset_globals, save_globals


class CountTF(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.fake = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        self.fake += any(isinstance(a, torch._subclasses.FakeTensor) for a in args)
        return func(*args, **(kwargs or {}))


class CountTD(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.fake = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        out = func(*args, **(kwargs or {}))
        self.fake += isinstance(out, torch._subclasses.FakeTensor)
        return out


def _state():
    return {"grad": torch.is_grad_enabled(), "inference": torch.is_inference_mode_enabled(),
            "ac": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
            "dtype": torch.get_default_dtype(), "tf_stack": torch._C._len_torch_function_stack(),
            "td_stack": torch._C._len_torch_dispatch_stack(),
            "ckpt": torch.utils.checkpoint._checkpoint_debug_enabled,
            "sparse_inv": torch._C._check_sparse_tensor_invariants(),
            "sth": torch._C._autograd._saved_tensors_hooks_is_enabled(),
            "rng": torch.get_rng_state().sum().item()}


CONTEXTS = {
    "inference_mode": lambda: torch.inference_mode(),
    "no_grad": lambda: torch.no_grad(),
    "enable_grad_in_no_grad": lambda: _nested(torch.no_grad(), torch.enable_grad()),
    "autocast_bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "set_grad_enabled_false": lambda: torch.set_grad_enabled(False),
    "fork_rng_reseeded": lambda: _fork(),
    "catch_warnings_record": lambda: warnings.catch_warnings(record=True),
    "checkpoint_debug": lambda: torch.utils.checkpoint.set_checkpoint_debug_enabled(True),
    "sparse_invariants": lambda: torch.sparse.check_sparse_tensor_invariants(),
    "disable_saved_tensors_hooks": lambda: torch.autograd.graph.disable_saved_tensors_hooks("user says no hooks"),
    "default_dtype_f64": lambda: _default(torch.float64),
}


@contextlib.contextmanager
def _nested(a, b):
    with a, b:
        yield


@contextlib.contextmanager
def _fork():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        yield


@contextlib.contextmanager
def _default(dt):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _setup(dtype=None):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    b = torch.randn(4, 8)
    if dtype is not None:
        m, b = m.to(dtype), b.to(dtype)
    return m, b, (lambda mm, bb: mm(bb).pow(2).mean()), torch.optim.Adam(m.parameters(), lr=1e-3)


ENTRIES = {
    "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
    "compare": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"precision": ["fp32", "bf16"]}, progress=False),
    "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB"),
    "max_batch_size": lambda m, b, l, o: vramnb.max_batch_size(m, b, l, o, target="8GiB", progress=False, limit=64),
    "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target="8GiB", progress=False),
}


def run_case(name, make_ctx, modes=False):
    ok = True
    for entry, fn in ENTRIES.items():
        g = save_globals()
        m, b, l, o = _setup(torch.float64 if name == "default_dtype_f64" else None)
        before = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}}
        err = None
        mode = None
        with make_ctx() as maybe_mode:
            mode = maybe_mode if modes else None
            inside_before = _state()
            try:
                fn(m, b, l, o)
            except Exception as e:  # noqa: BLE001
                err = f"{type(e).__name__}: {str(e)[:220]}"
            inside_after = _state()
        after = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}}
        reset_globals(g)
        d = diff(before, after) + diff(inside_before, inside_after)
        if mode is not None and mode.fake:
            d.append(f"the user's mode saw {mode.fake} fake tensors of the estimate ({mode.n} calls in all)")
        if err and not err.startswith(("InputError", "ValueError", "TypeError", "VramnbError")):
            d.insert(0, "not a refusal naming the problem: a bare error came out")
        if d:
            ok = False
            print(f"FAIL {name} / {entry}: {'(raised ' + err + ') ' if err else ''}changed:")
            for line in d:
                print("    ", line)
        else:
            print(f"PASS {name} / {entry}" + (f" (refused/raised, nothing changed: {err})" if err else ""))
    return ok


if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, ctx in CONTEXTS.items():
        if not only or only == name:
            ok &= run_case(name, ctx)
    for name, cls in (("torch_function_mode", CountTF), ("torch_dispatch_mode", CountTD)):
        if not only or only == name:
            ok &= run_case(name, cls, modes=True)
    print("ALL PASS" if ok else "SOME FAIL")
