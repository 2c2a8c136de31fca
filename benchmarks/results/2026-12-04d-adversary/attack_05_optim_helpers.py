"""Optimizer helpers beside the model: an LR scheduler (last_epoch, _step_count, _last_lr), a
ReduceLROnPlateau, a GradScaler (scale, growth tracker), an EMA AveragedModel updated by the loss
function (n_averaged, its params), an optimizer with state_dict pre/post hooks and a
load_state_dict hook, an optimizer whose param_groups hold an extra key; the scheduler/scaler are
named by the loss function. Prints PASS/FAIL per entry point."""
import torch
from torch.optim.swa_utils import AveragedModel

from _common import main


def setup():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    opt.param_groups[0]["my_tag"] = [1, 2]
    calls = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: calls.append("post") or sd)
    opt.register_load_state_dict_pre_hook(lambda o, sd: calls.append("lpre"))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    ema = AveragedModel(m, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    x = torch.randn(4, 8)
    for _ in range(2):
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        opt.step(); sched.step(); ema.update_parameters(m)

    def loss(mm, b):
        out = mm(b).pow(2).mean()
        plateau.step(float(out.detach()))  # a value read: the fake paths refuse it before anything changes
        return out

    def loss_fake_ok(mm, b):
        return mm(b).pow(2).mean()

    return m, x, loss, opt, {"m": m, "opt": opt, "sched": sched, "plateau": plateau, "scaler": scaler,
                             "ema": ema, "calls": calls}


def setup_no_read():
    m, x, _, opt, w = setup()
    return m, x, (lambda mm, b: mm(b).pow(2).mean()), opt, w


if __name__ == "__main__":
    ok = main("optimizer helpers (plateau steps in loss)", setup)
    ok &= main("optimizer helpers", setup_no_read)
    print("ALL PASS" if ok else "SOME FAIL")
