"""Batches that are not plain tensors: a custom class with `.to()` and state it updates when moved,
a pinned-memory batch, a batch whose tensor requires grad (its .grad and version), a batch on
'meta', a forward pre-hook that mutates the input in place, a with_kwargs pre-hook that replaces
kwargs. Prints PASS/FAIL per entry point."""
import torch

from _common import main


class Batch:
    def __init__(self, x):
        self.x, self.moves = x, 0

    def to(self, *a, **k):
        self.moves += 1
        self.x = self.x.to(*a, **k)
        return self


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 2)

    def forward(self, b):
        x = b.x if isinstance(b, Batch) else b
        return self.l(x)


def base():
    torch.manual_seed(0)
    m = Net()
    return m, torch.optim.SGD(m.parameters(), lr=0.1)


def s_custom():
    m, opt = base()
    b = Batch(torch.randn(4, 8))
    return m, b, (lambda mm, bb: mm(bb).sum()), opt, {"b": b, "m": m}


def s_pinned():
    m, opt = base()
    x = torch.randn(4, 8)
    try:
        x = x.pin_memory()
    except RuntimeError:  # no accelerator: a plain tensor
        pass
    return m, x, (lambda mm, bb: mm(bb).sum()), opt, {"x": x, "pinned": x.is_pinned(), "m": m}


def s_grad_batch():
    m, opt = base()
    x = torch.randn(4, 8, requires_grad=True)
    (x * 2).sum().backward()
    return m, x, (lambda mm, bb: mm(bb).sum()), opt, {"x": x, "m": m}


def s_meta():
    m, opt = base()
    x = torch.empty(4, 8, device="meta")
    return m, x, (lambda mm, bb: mm(bb).sum()), opt, {"x": x, "m": m}


def s_prehook_inplace():
    m, opt = base()
    x = torch.randn(4, 8)
    m.register_forward_pre_hook(lambda mod, args: args[0].mul_(2))
    return m, x, (lambda mm, bb: mm(bb).sum()), opt, {"x": x, "m": m}


def s_prehook_kwargs():
    m, opt = base()
    x = torch.randn(4, 8)
    seen = []

    def hook(mod, args, kwargs):
        seen.append(1)
        return args, kwargs

    m.register_forward_pre_hook(hook, with_kwargs=True)
    return m, x, (lambda mm, bb: mm(bb).sum()), opt, {"x": x, "m": m, "seen": seen}


if __name__ == "__main__":
    ok = True
    for title, s in [("custom .to() batch", s_custom), ("pinned batch", s_pinned), ("batch with grad", s_grad_batch),
                     ("meta batch", s_meta), ("pre-hook mutating input", s_prehook_inplace),
                     ("with_kwargs pre-hook", s_prehook_kwargs)]:
        ok &= main(title, s)
    print("ALL PASS" if ok else "SOME FAIL")
