import torch, random, numpy as np, copy, hashlib, pickle
def snap(model, opt=None, extra=None):
    s = {}
    s["params"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    s["grads"] = {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}
    s["rg"] = {n: p.requires_grad for n, p in model.named_parameters()}
    s["training"] = [m.training for m in model.modules()]
    s["nmods"] = len(list(model.modules()))
    s["torch_rng"] = torch.get_rng_state().clone()
    s["py_rng"] = random.getstate()
    s["np_rng"] = pickle.dumps(np.random.get_state())
    s["dtype"] = torch.get_default_dtype()
    s["grad_enabled"] = torch.is_grad_enabled()
    s["hooks"] = sum(len(m._forward_hooks)+len(m._forward_pre_hooks)+len(m._backward_hooks) for m in model.modules())
    cfg = getattr(model, "config", None)
    s["config"] = cfg.to_json_string() if hasattr(cfg, "to_json_string") else repr(cfg)
    if opt is not None:
        s["opt"] = pickle.dumps({k: v for k, v in opt.state_dict().items()})
        s["opt_pg"] = repr([{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups])
    return s
def same(a, b):
    diffs = []
    for k in a:
        x, y = a[k], b[k]
        if k in ("params", "grads"):
            if x.keys() != y.keys(): diffs.append(k+": keys"); continue
            for n in x:
                if (x[n] is None) != (y[n] is None): diffs.append(f"{k}:{n} none-ness"); break
                if x[n] is not None and not (x[n].dtype == y[n].dtype and torch.equal(x[n], y[n])): diffs.append(f"{k}:{n}"); break
        elif k == "torch_rng":
            if not torch.equal(x, y): diffs.append(k)
        elif x != y:
            diffs.append(k)
    return diffs
