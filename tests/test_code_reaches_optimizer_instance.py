"""What the user's code reaches through the optimizer: a ``zero_grad`` wrapped on the optimizer instance
(its closure's call log), a method bound with ``types.MethodType`` on it, and lists the user keeps in
param groups, appended to by the loss. Each entry point puts them back (the real step runs the wrapper;
the fake step's loss writes into the user's param groups)."""
import types

import pytest
import torch
import torch.nn as nn

import vramnb

ENTRIES = {
    "profile_step": lambda m, b, lf, o: vramnb.profile_step(m, b, lf, o),
    "compare": lambda m, b, lf, o: vramnb.compare(m, b, lf, o, toggles={"precision": ["fp32", "bf16"]}, progress=False),
    "estimate": lambda m, b, lf, o: vramnb.estimate(m, b, lf, o, target="8GiB"),
    "fit": lambda m, b, lf, o: vramnb.fit(m, b, lf, o, target="8GiB", progress=False),
}


def _m():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _loss(mm, b):
    return mm(b).pow(2).mean()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("how", ["closure", "method"])
def test_a_zero_grad_wrapped_on_the_instance_logs_nothing(entry, how):
    m = _m()
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    calls = []
    if how == "closure":
        orig = o.zero_grad

        def zg(set_to_none=True):
            calls.append(set_to_none)
            orig(set_to_none)
        o.zero_grad = zg
    else:
        o.log = calls

        def zg(self, set_to_none=True):
            self.log.append(set_to_none)
            torch.optim.SGD.zero_grad(self, set_to_none)
        o.zero_grad = types.MethodType(zg, o)
    ENTRIES[entry](m, torch.randn(4, 8), _loss, o)
    assert calls == []


@pytest.mark.parametrize("entry", ENTRIES)
def test_lists_in_param_groups_are_put_back(entry):
    m = _m()
    o = torch.optim.Adam([{"params": m[0].parameters(), "tag": "enc", "seen": []},
                          {"params": m[2].parameters(), "seen": [], "extra": {"n": 0}}], lr=1e-2)

    def loss(mm, b):
        for g in o.param_groups:
            g["seen"].append(len(g["seen"]))
        o.param_groups[1]["extra"]["n"] += 1
        return _loss(mm, b)
    ENTRIES[entry](m, torch.randn(4, 8), loss, o)
    assert [g["seen"] for g in o.param_groups] == [[], []] and o.param_groups[1]["extra"] == {"n": 0}


@pytest.mark.parametrize("entry", ENTRIES)
def test_module_state_dict_hooks_run_by_the_loss_log_nothing(entry):
    """The loss saves a checkpoint (``state_dict()``) or reloads one: the model's state-dict and load-state-dict
    hooks run in the step; what they change (a log list in their closure) is put back."""
    m = _m()
    log = []
    m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: log.append("sd_pre"))
    m[0].register_state_dict_post_hook(lambda mod, sd, prefix, local: log.append("sd_post"))
    m.register_load_state_dict_post_hook(lambda mod, keys: log.append("load_post"))
    m[2].register_load_state_dict_pre_hook(lambda mod, sd, prefix, lm, strict, mk, uk, err: log.append("load_pre"))
    snap = {k: v.clone() for k, v in m.state_dict().items()}
    log.clear()

    def loss(mm, b):
        sd = mm.state_dict()
        if not any(isinstance(v, torch._subclasses.FakeTensor) for v in sd.values()):
            mm.load_state_dict(snap)
        return _loss(mm, b)
    ENTRIES[entry](m, torch.randn(4, 8), loss, torch.optim.SGD(m.parameters(), lr=0.1))
    assert log == []


@pytest.mark.parametrize("entry", ENTRIES)
def test_optimizer_state_dict_hooks_run_by_the_loss_log_nothing(entry):
    m = _m()
    o = torch.optim.Adam(m.parameters(), lr=1e-2)
    log = []
    o.register_state_dict_pre_hook(lambda opt: log.append("sd_pre"))
    o.register_state_dict_post_hook(lambda opt, sd: (log.append("sd_post"), sd)[1])

    def loss(mm, b):
        o.state_dict()  # the user's optimizer, by name: a checkpoint written from the loss
        return _loss(mm, b)
    ENTRIES[entry](m, torch.randn(4, 8), loss, o)
    assert log == []
