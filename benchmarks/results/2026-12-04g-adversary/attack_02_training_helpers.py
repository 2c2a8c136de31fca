"""Training helpers around the optimizer that the user's loss or hooks touch: LR schedulers (StepLR,
OneCycleLR, ReduceLROnPlateau, SequentialLR, LambdaLR with a closure counter) whose `last_epoch`,
`_step_count`, `optimizer._opt_called` and the wrapped `step` must stay; a `torch.amp.GradScaler` (enabled on
CPU) used by the loss; `swa_utils.AveragedModel` whose `n_averaged` the loss updates; an EMA helper updated from
a step post hook; optimizer `register_step_pre_hook` / `register_step_post_hook` / `register_state_dict_*`
/ `register_load_state_dict_post_hook` hooks counting into lists; an optimizer with `zero_grad` wrapped by the
user (monkey-patched on the instance); an optimizer whose param_groups carry extra user keys and tensors
(lr as a tensor); a closure-requiring optimizer (LBFGS). Prints PASS/FAIL per case and entry point."""
import sys

import torch
import torch.nn as nn
from torch.optim import swa_utils

from _common import main


def _m():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def loss(mm, b):
    return mm(b).pow(2).mean()


def _warm(m, o, n=2):
    for _ in range(n):
        loss(m, torch.randn(4, 8)).backward()
        o.step()
        o.zero_grad()


def _sched(kind):
    def setup():
        m = _m()
        o = torch.optim.AdamW(m.parameters(), lr=1e-2)
        if kind == "step":
            s = torch.optim.lr_scheduler.StepLR(o, 1, 0.5)
        elif kind == "onecycle":
            s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=100)
        elif kind == "plateau":
            s = torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0)
        elif kind == "sequential":
            s = torch.optim.lr_scheduler.SequentialLR(o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=3),
                                                          torch.optim.lr_scheduler.ExponentialLR(o, 0.9)], milestones=[3])
        else:
            calls = []
            s = torch.optim.lr_scheduler.LambdaLR(o, lambda e: (calls.append(e), 0.9 ** e)[1])
        _warm(m, o)
        if kind == "plateau":
            s.step(1.0)
        else:
            s.step()

        def l(mm, b):  # the user's loss steps the scheduler (a per-iteration schedule in a training loop)
            out = loss(mm, b)
            if kind == "plateau":
                s.step(float(out.detach()) if not isinstance(out, torch._subclasses.FakeTensor) else 1.0)
            else:
                s.step()
            return out
        return m, torch.randn(4, 8), l, o, {"m": m, "o": o, "s": s, "od": o.__dict__, "sd": s.__dict__}
    return setup


def grad_scaler():
    m = _m()
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    sc = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)
    for _ in range(2):
        sc.scale(loss(m, torch.randn(4, 8))).backward()
        sc.step(o)
        sc.update()
        o.zero_grad()

    def l(mm, b):
        return sc.scale(loss(mm, b))
    return m, torch.randn(4, 8), l, o, {"m": m, "o": o, "sc": sc.__dict__}


def swa_averaged():
    m = _m()
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    avg = swa_utils.AveragedModel(m)
    avg.update_parameters(m)
    sched = swa_utils.SWALR(o, swa_lr=0.05)

    def l(mm, b):
        out = loss(mm, b)
        avg.update_parameters(mm)
        sched.step()
        return out
    return m, torch.randn(4, 8), l, o, {"m": m, "o": o, "avg": avg, "n": avg.n_averaged, "sd": sched.__dict__}


class EMA:
    def __init__(self, model, decay=0.9):
        self.model = model
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.updates = 0
        self.decay = decay

    @torch.no_grad()
    def update(self):
        self.updates += 1
        for k, v in self.model.state_dict().items():
            self.shadow[k].mul_(self.decay).add_(v.detach(), alpha=1 - self.decay)


def ema_step_post_hook():
    m = _m()
    o = torch.optim.Adam(m.parameters(), lr=1e-2)
    ema = EMA(m)
    o.register_step_post_hook(lambda opt, a, k: ema.update())
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o, "ema": ema}


LOG = []


def optimizer_hooks():
    m = _m()
    o = torch.optim.Adam(m.parameters(), lr=1e-2)
    _warm(m, o, 1)
    LOG.clear()
    o.register_step_pre_hook(lambda opt, a, k: LOG.append("pre"))
    o.register_step_post_hook(lambda opt, a, k: LOG.append("post"))
    o.register_state_dict_pre_hook(lambda opt: LOG.append("sd_pre"))
    o.register_state_dict_post_hook(lambda opt, sd: (LOG.append("sd_post"), sd)[1])
    o.register_load_state_dict_pre_hook(lambda opt, sd: (LOG.append("load_pre"), sd)[1])
    o.register_load_state_dict_post_hook(lambda opt: LOG.append("load_post"))
    torch.optim.Optimizer.register_step_pre_hook  # noqa: B018 (the class-level one is attack f/01's)
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o, "LOG": LOG, "hooks": (dict(o._optimizer_step_pre_hooks), dict(o._optimizer_step_post_hooks))}


def zero_grad_patched():
    m = _m()
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    calls = []
    orig = o.zero_grad

    def zg(set_to_none=True):
        calls.append(set_to_none)
        orig(set_to_none)
    o.zero_grad = zg
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o, "calls": calls}


def tensor_lr_and_user_keys():
    m = _m()
    o = torch.optim.Adam([{"params": m[0].parameters(), "lr": torch.tensor(1e-2), "tag": "enc", "seen": []},
                          {"params": m[2].parameters(), "lr": torch.tensor(5e-3), "tag": "head", "seen": []}])
    _warm(m, o, 1)

    def l(mm, b):
        for g in o.param_groups:
            g["seen"].append(len(g["seen"]))
        return loss(mm, b)
    return m, torch.randn(4, 8), l, o, {"m": m, "o": o, "pg": o.param_groups}


def lbfgs():
    m = _m()
    o = torch.optim.LBFGS(m.parameters(), lr=0.1, history_size=3)
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o}


def sgd_nesterov_foreach_false_warm():
    m = _m()
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, foreach=False, weight_decay=1e-3)
    _warm(m, o, 3)
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o}


def adam_amsgrad_capturable_false_fused_none():
    m = _m()
    o = torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True, maximize=True)
    _warm(m, o, 2)
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o}


CASES = {"sched_step": _sched("step"), "sched_onecycle": _sched("onecycle"), "sched_plateau": _sched("plateau"),
         "sched_sequential": _sched("sequential"), "sched_lambda_closure": _sched("lambda"),
         "grad_scaler": grad_scaler, "swa_averaged": swa_averaged, "ema_step_post_hook": ema_step_post_hook,
         "optimizer_hooks": optimizer_hooks, "zero_grad_patched": zero_grad_patched,
         "tensor_lr_and_user_keys": tensor_lr_and_user_keys, "lbfgs": lbfgs,
         "sgd_nesterov_warm": sgd_nesterov_foreach_false_warm, "adam_amsgrad_maximize": adam_amsgrad_capturable_false_fused_none}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue
        ok &= main(name, setup)
    print("ALL PASS" if ok else "SOME FAIL")
