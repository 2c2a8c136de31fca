"""Shared by the attack scripts: a deep fingerprint of user objects and the entry points to run.

fingerprint(obj) walks tensors (bytes, version, requires_grad, grad, id), modules, optimizers,
generators, containers and plain objects' __dict__ (bounded depth); attack() runs each entry point
on a fresh setup and prints PASS/FAIL per entry point with the first differences."""
from __future__ import annotations

import hashlib
import os
import signal
import random
import sys
import traceback
import warnings

import numpy as np
import torch

import vramnb


def _t(t: torch.Tensor) -> tuple:
    with torch._C.DisableTorchFunctionSubclass():  # reading a user's tensor subclass must not run its code
        return _t_plain(t)


def _t_plain(t: torch.Tensor) -> tuple:
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        return ("uninit", id(t), type(t).__name__, t.requires_grad)
    if type(t) not in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided:
        t0 = t
        if isinstance(t0, torch._subclasses.FakeTensor):
            return ("FAKE", id(t0), tuple(t0.shape))
        with torch._C.DisableTorchFunctionSubclass():  # reading it must not run its __torch_function__
            plain = torch.Tensor._make_subclass(torch.Tensor, t0.detach())
            return ("T", id(t0), tuple(t0.shape), str(t0.dtype), hashlib.md5(plain.clone().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest(),
                    t0._version, t0.requires_grad, None if t0.grad is None else _t(t0.grad), type(t0).__name__)
    if t.device.type == "meta":
        return ("meta", tuple(t.shape), str(t.dtype))
    if t.layout != torch.strided:
        d = t.coalesce() if t.is_sparse else t
        b = (hashlib.md5(d._indices().numpy().tobytes()).hexdigest(), hashlib.md5(d._values().detach().float().numpy().tobytes()).hexdigest()) if t.is_sparse else str(t.layout)
    else:
        x = t.detach()
        b = hashlib.md5(x.clone().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest() if x.numel() else ""  # a copy: numpy() of the live storage would make it non-resizable
    try:
        v = t._version
    except Exception:  # noqa: BLE001
        v = None
    return ("T", id(t), tuple(t.shape), str(t.dtype), b, v, t.requires_grad,
            None if not t.is_leaf or t.grad is None else _t(t.grad), type(t).__name__)


def _key(k):
    return f"<tensor {id(k)}>" if isinstance(k, torch.Tensor) else repr(k)  # a tensor's repr would run its subclass code


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
        ss = obj.bit_generator.seed_seq
        out[path] = (repr(obj.bit_generator.state), getattr(ss, "n_children_spawned", None))
        return out
    if isinstance(obj, np.random.RandomState):
        st = obj.get_state()
        out[path] = (hashlib.md5(st[1].tobytes()).hexdigest(), st[2], st[3], st[4])
        return out
    if isinstance(obj, np.random.SeedSequence):
        out[path] = ("seedseq", obj.entropy, obj.spawn_key, obj.n_children_spawned)
        return out
    if isinstance(obj, random.Random):
        out[path] = hash(obj.getstate())
        return out
    if isinstance(obj, np.ndarray):
        out[path] = (obj.shape, obj.tobytes())
        return out
    if isinstance(obj, dict):
        out[path] = ("dict", type(obj).__name__, len(obj), [_key(k)[:60] for k in obj][:50])
        for k, v in list(obj.items())[:200]:
            fingerprint(v, depth - 1, seen, f"{path}[{_key(k)[:40]}]", out)
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
        "torch_initial_seed": torch.initial_seed(),
        "dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(),
        "threads": torch.get_num_threads(), "det": torch.are_deterministic_algorithms_enabled(),
        "excepthook": sys.excepthook, "filters": list(warnings.filters),
        "printopts": repr(torch._tensor_str.PRINT_OPTS.__dict__),
        "recursionlimit": sys.getrecursionlimit(), "cwd": os.getcwd(),
        "np_err": repr(np.geterr()), "np_print": repr(np.get_printoptions()),
        "warn_always": torch.is_warn_always_enabled(),
        "fp32_prec": _fp32(), "mha_fastpath": torch.backends.mha.get_fastpath_enabled(),
        "linalg": repr(torch.backends.cuda.preferred_linalg_library()),
        "blas": repr(torch.backends.cuda.preferred_blas_library()),
        "autocast_cpu": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled()),
        "mt_autograd": torch.autograd.is_multithreading_enabled(),
        "flush_denormal": _denormal(),
        "dynamo_cfg": repr(sorted((k, repr(v)) for k, v in torch._dynamo.config.get_config_copy().items())),
        "ckpt_debug": repr(getattr(torch.utils.checkpoint, "_checkpoint_debug_enabled", None)),
        "mm_prec": _mm(),
        "sigint": repr(signal.getsignal(signal.SIGINT)),
        "displayhook": repr(sys.displayhook),
        "float_repr": repr(sys.float_info),
    }


def _fp32():
    out = []
    for path in ("", "cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn", "cudnn", "mkldnn"):
        mod = torch.backends
        for part in filter(None, path.split(".")):
            mod = getattr(mod, part)
        try:
            out.append((path, getattr(mod, "fp32_precision")))
        except Exception as e:  # noqa: BLE001
            out.append((path, type(e).__name__))
    return out


def _mm():
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError as e:
        return "raises " + str(e)[:40]


def _denormal():
    x = torch.tensor([1e-39], dtype=torch.float32)
    return bool((x * 1).item() == 0)


_P = [("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn"),
      ("mkldnn", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn")]


def save_globals():
    """What reset_globals puts back between two entry points (so one run's change is not seen by the next)."""
    return dict(np_err=np.geterr(), np_print=np.get_printoptions(), warn_always=torch.is_warn_always_enabled(),
                fp32=[torch._C._get_fp32_precision_getter(*p) for p in _P], mm=_mm(),
                mha=torch.backends.mha.get_fastpath_enabled(), linalg=torch.backends.cuda.preferred_linalg_library(),
                rec=sys.getrecursionlimit(), cwd=os.getcwd(), mt=torch.autograd.is_multithreading_enabled(),
                den=_denormal(), dyn=torch._dynamo.config.get_config_copy(),
                ckpt=getattr(torch.utils.checkpoint, "_checkpoint_debug_enabled", None),
                usr1=signal.getsignal(signal.SIGUSR1), ac=(torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled()))


def reset_globals(g):
    np.seterr(**g["np_err"]); np.set_printoptions(**g["np_print"]); torch.set_warn_always(g["warn_always"])
    if not g["mm"].startswith("raises"):
        torch.set_float32_matmul_precision(g["mm"])
    for p, v in zip(_P, g["fp32"]):
        torch._C._set_fp32_precision_setter(*p, v)
    torch.backends.mha.set_fastpath_enabled(g["mha"]); torch.backends.cuda.preferred_linalg_library(g["linalg"])
    sys.setrecursionlimit(g["rec"]); os.chdir(g["cwd"]); torch.autograd.set_multithreading_enabled(g["mt"])
    torch.set_flush_denormal(g["den"]); torch._dynamo.config.load_config(g["dyn"])
    torch.utils.checkpoint._checkpoint_debug_enabled = g["ckpt"]; signal.signal(signal.SIGUSR1, g["usr1"])
    torch.set_autocast_dtype("cpu", g["ac"][0]); torch.set_autocast_cache_enabled(g["ac"][1])


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
        saved_g = save_globals()
        m, b, l, o, watched = setup()
        ex_before = extra(watched) if extra else {}  # first: fingerprinting may run a tensor subclass's code
        before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        err = None
        try:
            run(m, b, l, o)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:300]}"
        ex_after = extra(watched) if extra else {}
        after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        d = diff(before, after)
        reset_globals(saved_g)
        d += diff(ex_before, ex_after)
        if err and not err.startswith(("InputError", "ValueError", "TypeError", "VramnbError")):
            d.insert(0, "not a refusal naming the problem: a bare error came out (see above)")
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
