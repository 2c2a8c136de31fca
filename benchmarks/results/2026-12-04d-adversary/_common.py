"""Shared by the attack scripts: a deep fingerprint of user objects and the entry points to run.

fingerprint(obj) walks tensors (bytes, version, requires_grad, grad, id), modules, optimizers,
generators, containers and plain objects' __dict__ (bounded depth); attack() runs each entry point
on a fresh setup and prints PASS/FAIL per entry point with the first differences."""
from __future__ import annotations

import hashlib
import random
import sys
import traceback
import warnings

import numpy as np
import torch

import vramnb


def _t(t: torch.Tensor) -> tuple:
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        return ("uninit", id(t), type(t).__name__, t.requires_grad)
    if type(t) not in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided:
        t0 = t
        t = torch.Tensor._make_subclass(torch.Tensor, t0.detach()) if not isinstance(t0, torch._subclasses.FakeTensor) else t0
        if t is t0:
            return ("FAKE", id(t0), tuple(t0.shape))
    if t.device.type == "meta":
        return ("meta", tuple(t.shape), str(t.dtype))
    if t.layout != torch.strided:
        d = t.coalesce() if t.is_sparse else t
        b = (hashlib.md5(d._indices().numpy().tobytes()).hexdigest(), hashlib.md5(d._values().detach().float().numpy().tobytes()).hexdigest()) if t.is_sparse else str(t.layout)
    else:
        x = t.detach()
        b = hashlib.md5(x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest() if x.numel() else ""
    try:
        v = t._version
    except Exception:  # noqa: BLE001
        v = None
    return ("T", id(t), tuple(t.shape), str(t.dtype), b, v, t.requires_grad,
            None if not t.is_leaf or t.grad is None else _t(t.grad), type(t).__name__)


def fingerprint(obj, depth: int = 6, seen=None, path="root", out=None):
    if out is None:
        out = {}
    if seen is None:
        seen = set()
    if isinstance(obj, torch.Tensor):
        out[path] = _t(obj)
        return out
    if isinstance(obj, (int, float, str, bool, type(None), bytes, complex)):
        out[path] = repr(obj)
        return out
    if id(obj) in seen or depth < 0:
        out[path] = ("seen", type(obj).__name__)
        return out
    seen.add(id(obj))
    if isinstance(obj, torch.Generator):
        out[path] = hashlib.md5(bytes(obj.get_state().tolist())).hexdigest()
        return out
    if isinstance(obj, np.random.Generator):
        out[path] = repr(obj.bit_generator.state)
        return out
    if isinstance(obj, random.Random):
        out[path] = hash(obj.getstate())
        return out
    if isinstance(obj, np.ndarray):
        out[path] = (obj.shape, obj.tobytes())
        return out
    if isinstance(obj, dict):
        out[path] = ("dict", type(obj).__name__, len(obj), [repr(k)[:60] for k in obj][:50])
        for k, v in list(obj.items())[:200]:
            fingerprint(v, depth - 1, seen, f"{path}[{repr(k)[:40]}]", out)
        return out
    if isinstance(obj, (list, tuple)):
        out[path] = (type(obj).__name__, len(obj))
        for i, v in enumerate(obj[:200]):
            fingerprint(v, depth - 1, seen, f"{path}[{i}]", out)
        return out
    if isinstance(obj, (set, frozenset)):
        out[path] = (type(obj).__name__, len(obj))
        return out
    if callable(obj) and not hasattr(obj, "__dict__"):
        out[path] = ("callable", id(obj))
        return out
    d = None
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001
        pass
    out[path] = ("obj", type(obj).__name__, id(type(obj)))
    if d is not None:
        out[path + ".__dict__keys"] = sorted(map(str, d))
        for k, v in list(d.items()):
            if k.startswith("__"):
                continue
            fingerprint(v, depth - 1, seen, f"{path}.{k}", out)
    return out


def global_fp():
    return {
        "torch_rng": hashlib.md5(bytes(torch.get_rng_state().tolist())).hexdigest(),
        "py_rng": hash(random.getstate()),
        "np_rng": hashlib.md5(repr(np.random.get_state()).encode()).hexdigest(),
        "dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(),
        "threads": torch.get_num_threads(), "det": torch.are_deterministic_algorithms_enabled(),
        "excepthook": sys.excepthook, "filters": list(warnings.filters),
        "printopts": repr(torch._tensor_str.PRINT_OPTS.__dict__),
    }


def diff(a: dict, b: dict, n: int = 6) -> list[str]:
    out = []
    for k in list(a) + [k for k in b if k not in a]:
        if a.get(k, "<absent>") != b.get(k, "<absent>"):
            out.append(f"{k}: {str(a.get(k, '<absent>'))[:150]} -> {str(b.get(k, '<absent>'))[:150]}")
            if len(out) >= n:
                break
    return out


def _entries(target="8GiB"):
    return {
        "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
        "compare": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"precision": ["fp32", "bf16"]}, progress=False),
        "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target=target),
        "max_batch_size": lambda m, b, l, o: vramnb.max_batch_size(m, b, l, o, target=target, progress=False, limit=64),
        "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target=target, progress=False),
    }


def attack(title: str, setup, entries=None, extra=None) -> bool:
    """setup() -> (model, batch, loss_fn, optimizer, watched); watched is any object to fingerprint.
    extra(watched) -> dict of further observations compared before/after (e.g. running a step)."""
    ok = True
    for name, run in _entries().items():
        if entries and name not in entries:
            continue
        m, b, l, o, watched = setup()
        before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        ex_before = extra(watched) if extra else {}
        err = None
        try:
            run(m, b, l, o)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:300]}"
        after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        d = diff(before, after)
        ex_after = extra(watched) if extra else {}
        d += diff(ex_before, ex_after)
        if d:
            ok = False
            print(f"FAIL {title} / {name}: {'(raised ' + err[:200] + ') ' if err else ''}changed:")
            for line in d:
                print("    ", line)
        else:
            print(f"PASS {title} / {name}" + (f" (refused/raised, nothing changed: {err[:240]})" if err else ""))
    return ok


def main(title, setup, entries=None, extra=None):
    try:
        ok = attack(title, setup, entries, extra)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        ok = False
    print("PASS" if ok else "FAIL")
    return ok
