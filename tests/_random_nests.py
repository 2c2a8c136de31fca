"""Random notebook states for the differential tests of ``%vram``'s listing (issue 28 item 16).

:func:`build` makes, from a seed, a namespace of random nests: lists, tuples, dicts and plain
objects (a few levels deep) of plain tensors of random shapes and dtypes, views of them, the same
tensor in several places, storages over another's bytes (``from_numpy``), bare storages, empty
tensors, parameters with and without gradients, results that keep an autograd graph, modules,
lists shuffled out of their creation order and long runs of small tensors (what a scan checks in
bulk). :func:`mutate` changes some of them as untracked code would (a resize in place, ``set_``
to another storage, ``.data`` reassigned, a gradient set). Only torch and ``random.Random(seed)``
are used (never the global RNGs), so a seed gives the same state in any process.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import types
from typing import Any

import torch

_DTYPES = (torch.float32, torch.float64, torch.int8, torch.int64, torch.bfloat16, torch.bool)


class Box:
    """A plain object with attributes (``box.a``)."""


def _tensor(r: random.Random) -> torch.Tensor:
    shape = tuple(r.randint(0, 5) if r.random() < 0.1 else r.randint(1, 6) for _ in range(r.randint(0, 3)))
    return torch.zeros(shape, dtype=r.choice(_DTYPES))


class _Maker:
    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.made: list[torch.Tensor] = []  # plain tensors made so far (views and repeats draw on them)
        self.params: list[torch.nn.Parameter] = []

    def leaf(self) -> Any:
        r = self.r
        x = r.random()
        if x < 0.45 or not self.made:
            t = _tensor(r)
            self.made.append(t)
            return t
        if x < 0.55:  # the same tensor again
            return r.choice(self.made)
        if x < 0.63:  # a view (a plain tensor over another's storage)
            base = r.choice(self.made)
            if base.dim() and base.shape[0] > 1:
                return base[1:]
            return base.view(-1) if base.is_contiguous() else base
        if x < 0.67:  # a second storage over the same bytes
            base = r.choice(self.made)
            if base.dtype in (torch.bfloat16,) or not base.numel():
                return base
            return torch.from_numpy(base.numpy())
        if x < 0.70:  # a bare storage
            return r.choice(self.made).untyped_storage()
        if x < 0.78:  # a parameter: requiring grad or not, with a gradient or not
            p = torch.nn.Parameter(torch.zeros(r.randint(1, 4)), requires_grad=r.random() < 0.6)
            if r.random() < 0.4:
                p.grad = torch.ones_like(p)
            self.params.append(p)
            return p
        if x < 0.84 and self.params:  # a result keeping an autograd graph
            p = r.choice(self.params)
            if p.requires_grad:
                return (p * torch.ones(p.shape)).exp()
            return p
        if x < 0.87:  # a module
            m = torch.nn.Linear(r.randint(1, 3), r.randint(1, 3))
            if r.random() < 0.3:
                m.cache = [torch.zeros(2) for _ in range(r.randint(0, 20))]  # type: ignore[assignment]
            return m
        if x < 0.90:
            return r.choice([None, 3, "text", 2.5])
        return r.choice(self.made).detach()  # another tensor object over the same storage

    def run(self, n: int) -> list[torch.Tensor]:
        """``n`` new plain tensors, made one after another (contiguous in the collector's list)."""
        out = [torch.zeros(self.r.randint(1, 3)) for _ in range(n)]
        self.made += out[:5]
        return out

    def nest(self, depth: int) -> Any:
        r = self.r
        if depth <= 0 or r.random() < 0.3:
            return self.leaf()
        kind = r.random()
        if kind < 0.15:  # a long run of small tensors, maybe shuffled, maybe with something else inside
            items: list[Any] = self.run(r.choice((17, 40, 70, 150)))
            if r.random() < 0.3:
                r.shuffle(items)
            if r.random() < 0.3:
                items.insert(r.randrange(len(items)), self.leaf())
            if r.random() < 0.2:
                items = items[r.randint(0, 10):]
            return items if r.random() < 0.8 else tuple(items)
        n = r.randint(0, 25)
        if kind < 0.50:
            return [self.nest(depth - 1) for _ in range(n)]
        if kind < 0.60:
            return tuple(self.nest(depth - 1) for _ in range(n))
        if kind < 0.85:
            keys: list[Any] = [r.choice(["a", "b", "w", "cache", "x1"]) + str(i) if r.random() < 0.8 else i
                               for i in range(n)]
            return {k: self.nest(depth - 1) for k in keys}
        box: Any = Box() if r.random() < 0.7 else types.SimpleNamespace()
        for i in range(n):
            setattr(box, f"f{i}", self.nest(depth - 1))
        return box


def build(seed: int) -> dict[str, Any]:
    """A random namespace (name -> object) from ``seed``."""
    r = random.Random(seed)
    maker = _Maker(r)
    ns: dict[str, Any] = {}
    for i in range(r.randint(1, 8)):
        ns[f"v{i}"] = maker.nest(r.randint(0, 4))
    if r.random() < 0.3:  # a name holding what another holds
        ns["alias"] = r.choice(list(ns.values()))
    ns["_maker_made"] = None  # (a name holding nothing)
    return ns


def _suppress() -> Any:
    return contextlib.suppress(RuntimeError)  # a storage that cannot be resized (from_numpy's)


def mutate(seed: int, ns: dict[str, Any]) -> None:
    """Change a few of ``ns``'s plain tensors as untracked code does (``seed``: which, how)."""
    r = random.Random(seed * 7919 + 1)
    found: list[torch.Tensor] = []

    def walk(x: Any, depth: int) -> None:
        if depth > 6:
            return
        if type(x) is torch.Tensor:
            found.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v, depth + 1)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v, depth + 1)
        elif isinstance(x, (Box, types.SimpleNamespace)):
            for v in vars(x).values():
                walk(v, depth + 1)

    walk(ns, 0)
    for _ in range(r.randint(0, 4)):
        if not found:
            return
        t = r.choice(found)
        how = r.random()
        with torch.no_grad(), _suppress():
            if how < 0.3 and not t._is_view() and t.is_contiguous():
                t.resize_(t.numel() + r.randint(1, 8))
            elif how < 0.5:
                t.set_(torch.zeros(r.randint(1, 9)))
            elif how < 0.7:
                t.data = torch.zeros(r.randint(1, 9), dtype=t.dtype)
            elif how < 0.85 and t.dtype.is_floating_point:
                t.grad = torch.ones_like(t)
            else:
                t.untyped_storage().resize_(0)


def main(seeds: list[int]) -> None:
    """Print, for each seed, the rows ``%vram -d cpu`` lists for :func:`build`'s state (with
    :func:`mutate`'s changes between a first ``%vram`` and the one recorded for odd seeds), as
    one JSON line: run with ``PYTHONPATH`` naming the vramnb to compare (the test runs the
    commit before the scan table and this one). Scans check runs of 32 tensors (``_RUN``), so
    that small states take the bulk path too."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from vramnb import _tracker

    _tracker._RUN = 32
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "vramnb")
    for seed in seeds:
        ns = build(seed)
        shell.user_ns.update(ns)
        with capture_output():
            shell.run_line_magic("vram", "-d cpu")
            if seed % 2:
                mutate(seed, ns)
            rep = shell.run_line_magic("vram", "-d cpu")
        out = {"seed": seed, "rows": rep.to_records(), "total": rep.total, "out_of_sight": rep.out_of_sight}
        print(json.dumps(out), flush=True)
        for k in ns:
            shell.user_ns.pop(k, None)
        del rep, ns


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])
