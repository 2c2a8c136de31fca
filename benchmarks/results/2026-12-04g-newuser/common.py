"""Helpers for the new-user session: snapshots of model/optimizer/RNG state, exact byte counts."""
import copy, random, time
import numpy as np
import torch

def snap(model=None, opt=None):
    s = {"torch_rng": torch.get_rng_state().clone(), "py_rng": random.getstate(),
         "np_rng": copy.deepcopy(np.random.get_state())}
    if model is not None:
        s["sd"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        s["grads"] = {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}
        s["training"] = [m.training for m in model.modules()]
        s["req"] = [p.requires_grad for p in model.parameters()]
        s["ids"] = [id(p) for p in model.parameters()]
    if opt is not None:
        s["opt"] = copy.deepcopy(opt.state_dict())
    return s

def _eq(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b

def diff(s1, s2):
    bad = [k for k in s1 if not _eq(s1[k], s2[k])]
    return bad or "IDENTICAL"

def nbytes_params(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())

def timed(f, *a, **k):
    t = time.perf_counter(); r = f(*a, **k); return r, time.perf_counter() - t
