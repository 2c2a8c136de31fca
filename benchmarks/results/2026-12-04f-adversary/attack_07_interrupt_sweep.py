"""Ctrl-C at evenly spread points of entry points earlier sweeps did not cover: `fit`, `max_batch_size`,
`estimate` with a technique recipe (LoRA + checkpointing + freezing: the fake model's techniques and their
undo), `compare` over technique toggles (LoRA, checkpointing, freeze, optimizer swap: each recipe's undo on
the live model). The harness counts vramnb's Python calls once (a profile function), then for each point K
runs the entry point on a fresh setup and, at vramnb's K-th call, asks for an interrupt of the main thread
(`_thread.interrupt_main()`, as Jupyter's *Interrupt kernel*). Checked after each: exactly one
KeyboardInterrupt (or a finished call) reached the caller, and a deep fingerprint of model, optimizer,
global state, the dispatch-mode stack, torch.compiler's stance, PyTorch's global module hooks and the
module registration hooks is as before. Prints PASS/FAIL per (entry point, point)."""
import _thread
import os
import sys

import torch
import torch.nn as nn
from torch.nn.modules import module as M

import vramnb
from _common import fingerprint, global_fp, diff

VR = os.path.dirname(vramnb.__file__)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return x + self.fc(self.norm(x)).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(h.mean(1))


def loss(m, b):
    return m(b).pow(2).mean()


def setup():
    torch.manual_seed(0)
    m = Net()
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    b = torch.randint(0, 32, (4, 6))
    loss(m, b).backward(); o.step(); o.zero_grad()
    return m, o, b


ENTRIES = {
    "fit": lambda m, o, b: vramnb.fit(m, b, loss, o, target="8GiB", progress=False),
    "max_batch_size": lambda m, o, b: vramnb.max_batch_size(m, b, loss, o, target="8GiB", progress=False, limit=32),
    "estimate_recipe": lambda m, o, b: vramnb.estimate(m, b, loss, o, target="8GiB", recipe=vramnb.Recipe(lora="r=8", checkpointing="every block", freeze="embeddings")),
    "compare_techniques": lambda m, o, b: vramnb.compare(m, b, loss, o, toggles={"lora": ["off", "r=8"], "checkpointing": ["off", "every block"], "optimizer": ["yours", "SGD"]}, progress=False),
}


def state(m, o):
    fp = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}}
    fp["dispatch_stack"] = torch._C._len_torch_dispatch_stack()
    fp["stance"] = repr(torch.compiler._get_stance() if hasattr(torch.compiler, "_get_stance") else None)
    try:
        from torch._dynamo.eval_frame import _stance
        fp["stance"] = repr(_stance.stance)
    except Exception:  # noqa: BLE001
        pass
    for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks",
                 "_global_module_registration_hooks", "_global_parameter_registration_hooks", "_global_buffer_registration_hooks"):
        fp[name] = len(getattr(M, name))
    fp["torch_function_mode_stack"] = torch._C._len_torch_function_stack()
    fp["autocast_nesting"] = repr((torch.is_autocast_enabled("cpu"),))
    return fp


class Counter:
    def __init__(self, at=None):
        self.n = 0
        self.at = at
        self.fired = False

    def __call__(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(VR):
            self.n += 1
            if self.at is not None and self.n == self.at and not self.fired:
                self.fired = True
                _thread.interrupt_main()


def run(entry, at=None):
    m, o, b = setup()
    before = state(m, o)
    c = Counter(at)
    got = []
    try:
        sys.setprofile(c)
        try:
            ENTRIES[entry](m, o, b)
        finally:
            sys.setprofile(None)
        got.append("finished")
    except KeyboardInterrupt:
        got.append("KeyboardInterrupt")
    except Exception as e:  # noqa: BLE001
        got.append(f"{type(e).__name__}: {str(e)[:200]}")
    # an interrupt asked for but not yet delivered would land here: give it a chance to show
    try:
        for _ in range(1000):
            pass
    except KeyboardInterrupt:
        got.append("late KeyboardInterrupt")
    after = state(m, o)
    return c.n, got, diff(before, after)


def main(only=None, points="24"):
    """only: one entry point ("" for all); points: N evenly spread, or rN drawn at random (seeded)."""
    ok = True
    tried = held = 0
    for entry in ENTRIES:
        if only and entry != only:
            continue
        total, got, d = run(entry)
        print(f"{entry}: {total} calls into vramnb uninterrupted ({got}); changed: {d}")
        if points.startswith("r"):  # r25: 25 points drawn at random (seeded), between the even ones
            import random
            rnd = random.Random(7)
            ks = sorted({rnd.randrange(1, total) for _ in range(int(points[1:]))})
        else:
            P = int(points)
            ks = sorted({max(1, int(total * i / P)) for i in range(1, P)} | {1, 2, 3})
        for k in ks:
            n, got, d = run(entry, k)
            tried += 1
            bad = list(d)
            if got not in (["KeyboardInterrupt"], ["finished"]) and not (len(got) == 1 and got[0].startswith(("InputError", "ValueError"))):
                bad.insert(0, f"the caller got {got}")
            if bad:
                ok = False
                print(f"FAIL {entry} @call {k}:")
                for line in bad:
                    print("    ", line)
            else:
                held += 1
                print(f"PASS {entry} @call {k}: {got[0]}")
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
