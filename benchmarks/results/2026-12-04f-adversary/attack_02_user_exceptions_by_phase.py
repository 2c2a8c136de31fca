"""The user's code raises at each phase of the step, at the 1st, 2nd, 3rd... call: the model's forward,
a submodule's forward hook, the loss function (before and after it computed the loss), a full
backward hook, a tensor (parameter) hook during backward, a post-accumulate-grad hook (the
optimizer-in-backward pattern, which also steps per-parameter optimizers of the user's),
the optimizer's `step` and its `zero_grad` (a user subclass of Adam). After each entry point the
user's exception must come out unchanged (same class, same message) and everything be as before.
Prints PASS/FAIL per (phase, call number, entry point)."""
import sys

import torch
import torch.nn as nn

import vramnb
from _common import fingerprint, global_fp, diff


class Boom(Exception):
    pass


CALLS = {"n": 0}
TRIGGER = {"phase": None, "at": 0}
SEEN: list = []


def maybe(phase):
    if TRIGGER["phase"] == phase:
        CALLS["n"] += 1
        SEEN.append(phase)
        if CALLS["n"] == TRIGGER["at"]:
            raise Boom(f"user error in {phase} at call {TRIGGER['at']}")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.b = nn.Linear(16, 2)

    def forward(self, x):
        maybe("forward")
        return self.b(self.bn(self.a(x)).relu())


class MyAdam(torch.optim.Adam):
    def step(self, closure=None):
        maybe("optimizer.step")
        return super().step(closure)

    def zero_grad(self, set_to_none=True):
        maybe("optimizer.zero_grad")
        return super().zero_grad(set_to_none)


def loss_before(m, b):
    maybe("loss before forward")
    return m(b).pow(2).mean()


def loss_after(m, b):
    out = m(b).pow(2).mean()
    maybe("loss after forward")
    return out


def setup(loss_fn, in_backward=False):
    torch.manual_seed(0)
    m = Net()
    opt = MyAdam(m.parameters(), lr=1e-3)
    b = torch.randn(4, 8)
    TRIGGER["phase"] = None
    loss_fn(m, b).backward(); opt.step(); opt.zero_grad(set_to_none=False)
    m.a.register_forward_hook(lambda mod, i, o: maybe("forward hook"))
    m.b.register_full_backward_hook(lambda mod, gi, go: maybe("backward hook"))
    m.a.weight.register_hook(lambda g: maybe("tensor hook"))
    watched = {"m": m, "opt": opt}
    if in_backward:
        per = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in m.b.parameters()}

        def step_in_backward(p):
            maybe("post-accumulate-grad hook")
            per[p].step()
            per[p].zero_grad()
        for p in m.b.parameters():
            p.register_post_accumulate_grad_hook(step_in_backward)
        watched["per"] = list(per.values())
    return m, b, opt, watched


ENTRIES = {
    "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
    "compare": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"precision": ["fp32", "bf16"]}, progress=False),
    "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB"),
    "max_batch_size": lambda m, b, l, o: vramnb.max_batch_size(m, b, l, o, target="8GiB", progress=False, limit=32),
    "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target="8GiB", progress=False),
}

PHASES = ["forward", "forward hook", "loss before forward", "loss after forward", "backward hook", "tensor hook",
          "post-accumulate-grad hook", "optimizer.step", "optimizer.zero_grad"]


def main(only_entry=None, only_phase=None):
    ok = True
    counts = {"tried": 0, "held": 0}
    for phase in PHASES:
        if only_phase and phase != only_phase:
            continue
        loss_fn = loss_before if phase == "loss before forward" else loss_after
        for name, run in ENTRIES.items():
            if only_entry and name != only_entry:
                continue
            for at in (1, 2, 3, 5, 9):
                m, b, opt, watched = setup(loss_fn, in_backward=(phase == "post-accumulate-grad hook"))
                before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
                CALLS["n"] = 0
                SEEN.clear()
                TRIGGER.update(phase=phase, at=at)
                err = None
                try:
                    run(m, b, loss_fn, opt)
                except Exception as e:  # noqa: BLE001
                    err = e
                TRIGGER["phase"] = None
                # (vramnb puts back CALLS too: the user's code reaches it by name; the exception tells what happened)
                raised = type(err) is Boom
                after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
                d = diff(before, after)
                if raised and str(err) != f"user error in {phase} at call {at}":
                    d.insert(0, f"the user's Boom came out changed: {err}")
                if err is not None and not raised and not isinstance(err, (ValueError, TypeError)):
                    d.insert(0, f"the entry point raised {type(err).__name__}, not the user's Boom: {str(err)[:300]}")
                counts["tried"] += 1
                if d:
                    ok = False
                    print(f"FAIL {phase} @call {at} / {name}:")
                    for line in d:
                        print("    ", line)
                else:
                    counts["held"] += 1
                    msg = "raised the user's Boom" if raised else ("no raise reached" + (f"; refused: {type(err).__name__}: {str(err)[:100]}" if err else ""))
                    print(f"PASS {phase} @call {at} / {name}: {msg}")
                if not raised:
                    break  # later call numbers are never reached either
    print(f"tried {counts['tried']}, held {counts['held']}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
