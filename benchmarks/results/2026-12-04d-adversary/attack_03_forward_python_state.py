"""A forward that writes Python state by paths other than a plain global name: through a weakref,
through an object stored in a module attribute of another (imported) module, through
`type(self)` class attributes, through a `__getattr__`-delegating module, through a property
setter, through `self.__dict__` of a plain attribute object, through a dict stored in a
default argument, through a user module imported inside forward (`import user_registry`, a file of
the user's), through a WeakValueDictionary. Prints PASS/FAIL."""
import os
import sys
import tempfile
import weakref

import torch

from _common import main

_DIR = tempfile.mkdtemp()
with open(os.path.join(_DIR, "user_registry.py"), "w") as f:
    f.write("calls = []\ncache = {}\n")
sys.path.insert(0, _DIR)
import user_registry as REG  # noqa: E402


class Box:
    def __init__(self):
        self.n = 0
        self.items = []


BOX = Box()
BOX_REF = weakref.ref(BOX)
BOX2 = Box()
WEAK = weakref.WeakValueDictionary({"b": BOX2})


def helper(y, _memo={}):  # noqa: B006 - a default-argument cache, on purpose
    _memo[len(_memo)] = y.detach()
    return y


class Delegating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(8, 8)
        object.__setattr__(self, "_log", Box())

    def __getattr__(self, name):
        if name == "log":
            return object.__getattribute__(self, "_log")
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if name == "last":
            object.__getattribute__(self, "_log").items.append(value)
            return
        super().__setattr__(name, value)

    @property
    def counter(self):
        return object.__getattribute__(self, "_log").n

    @counter.setter
    def counter(self, v):
        object.__getattribute__(self, "_log").n = v

    def forward(self, x):
        y = self.inner(x)
        self.last = y.detach()
        self.counter = self.counter + 1
        self.log.items.append(1)
        return y


class Writer(torch.nn.Module):
    total = 0

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x):
        y = self.lin(x)
        type(self).total += 1
        import user_registry
        user_registry.calls.append(1)
        user_registry.cache["y"] = y.detach()
        BOX_REF().n += 1
        BOX_REF().items.append(y.detach())
        WEAK["b"].n += 1
        return helper(y)


def setup():
    torch.manual_seed(0)
    m = torch.nn.Sequential(Delegating(), Writer())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), (lambda mm, b: mm(b).sum()), opt, {
        "reg": REG.__dict__.copy(), "reg_calls": REG.calls, "reg_cache": REG.cache, "box": BOX, "box2": BOX2,
        "dlog": object.__getattribute__(m[0], "_log"), "memo": helper.__defaults__[0], "m": m}


def extra(w):
    return {"Writer.total": Writer.total, "memo": len(helper.__defaults__[0])}


if __name__ == "__main__":
    main("forward python state", setup, extra=extra)
