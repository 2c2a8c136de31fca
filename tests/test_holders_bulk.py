"""`%vram`'s bulk path (runs of plain tensors read in C) gives what the walk one tensor at a time gives.

The general path is forced by making :func:`vramnb._graph.plain_leaves` answer False and by
sorting every set of data ranges in Python: total, out-of-sight bytes and every row (bytes,
"not shared", detail, entries beneath it) must be identical, and the byte counts exact.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from typing import Any

import pytest
import torch

from vramnb import _graph
from vramnb._graph import RUN
from vramnb._holders import find_holders
from vramnb._storages import RangeLog

CPU = torch.device("cpu")


class Sub(torch.Tensor):
    """A ``torch.Tensor`` subclass: never in a bulk run."""


def _rows(rows: Any) -> list[Any]:
    return [dataclasses.asdict(r) for r in rows]


def _both(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Any, Any]:
    fast = find_holders(ns, CPU, **kw)
    with monkeypatch.context() as m:
        m.setattr(_graph, "plain_leaves", lambda *a, **k: False)
        m.setattr(RangeLog, "_TORCH_FROM", 10**12)
        slow = find_holders(ns, CPU, **kw)
    assert _rows(fast) == _rows(slow)
    assert (fast.total, fast.out_of_sight) == (slow.total, slow.out_of_sight)
    return fast, slow


def _mixed(n: int) -> tuple[list[Any], int]:
    """``n`` plain tensors with everything the bulk path must leave to the general one
    among them, and the bytes they hold (each storage once)."""
    base = torch.zeros(1000)  # 4000 bytes, seen through views too
    w = torch.ones(8, requires_grad=True)
    y = (w * 2).sin()  # 32 bytes; its graph saves w * 2 (32) and the 2 (8), accumulates into w (32)
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    a = torch.arange(6, dtype=torch.float32)
    alias = torch.from_numpy(a.numpy())  # another StorageImpl over a's 24 bytes
    sub = torch.ones(3).as_subclass(Sub)
    sparse = torch.ones(2, 2).to_sparse()  # indices (2 x 4 x 8) and values (4 x 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    xs: list[Any] = [torch.ones(2) for _ in range(n)]
    specials: list[Any] = [base, base[10:20], base[500:], y, p, a, alias, sub, sparse, nested, torch.ones(0)]
    rng = random.Random(0)
    for s in specials:
        xs.insert(rng.randrange(len(xs) + 1), s)
    xs += [base[:3], a]  # storages met again at the end
    expected = (n * 8 + 4000 + (32 + 32 + 8 + 32) + (16 + 16) + 24 + 12 + (2 * 4 * 8 + 4 * 4)
                + sum(st.nbytes() for st in _nested_storages(nested)))
    return xs, expected


def _nested_storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    from vramnb._storages import storages_of_tensor

    return [st for _, st in storages_of_tensor(t)]


@pytest.mark.parametrize("n", [0, 5, RUN - 3, 3 * RUN + 7])
def test_a_list_mixing_plain_tensors_views_graphs_and_subclasses(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    xs, expected = _mixed(n)
    fast, _ = _both({"xs": xs}, monkeypatch)
    (row,) = fast
    assert row.nbytes == row.unique == fast.total == expected


def test_names_sharing_storages_and_hidden_holders(monkeypatch: pytest.MonkeyPatch) -> None:
    base = torch.zeros(1000)
    xs = [torch.ones(2) for _ in range(2 * RUN)] + [base, base[1:]]
    ys = xs[:100]
    cache = {i: t for i, t in enumerate(xs[RUN: RUN + 100])}
    out = [xs[-1], torch.ones(16)]  # output history: base through its view, and 64 bytes only there
    ns = {"xs": xs, "ys": ys, "cache": cache, "t": xs[0]}
    fast, _ = _both(ns, monkeypatch, hidden={"Out": ("output history", out)})
    by = {r.name: r for r in fast}
    assert by["xs"].nbytes == 2 * RUN * 8 + 4000 and by["xs"].unique == (2 * RUN - 200) * 8
    assert by["ys"].nbytes == by["cache"].nbytes == 800 and by["ys"].unique == by["cache"].unique == 0
    assert fast.total == 2 * RUN * 8 + 4000 + 64 and fast.out_of_sight == 64
    assert "also kept by" in by["xs"].detail


def test_a_dict_and_a_tuple_of_plain_tensors_and_skipped_names(monkeypatch: pytest.MonkeyPatch) -> None:
    big = {f"k{i}": torch.ones(4) for i in range(RUN + 10)}
    tup = tuple(torch.ones(2, dtype=torch.float64) for _ in range(RUN + 1))
    ns = {"big": big, "tup": tup, "_hidden_copy": list(big.values())[:10]}
    fast, _ = _both(ns, monkeypatch, skip=["_hidden_copy"])
    by = {r.name: r for r in fast}
    assert by["big"].nbytes == (RUN + 10) * 16 and by["big"].unique == (RUN + 10 - 10) * 16
    assert by["tup"].nbytes == by["tup"].unique == (RUN + 1) * 16
    assert by["big"].more == RUN + 10 - len(by["big"].entries)


def test_a_tensor_requiring_grad_in_a_run_keeps_its_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    w = torch.ones(1000, requires_grad=True)
    e = (w * 3).exp()  # exp saves its result (e); the product saves the 3 (a 0-dim tensor, 8 bytes)
    xs = [torch.ones(2) for _ in range(RUN)] + [e] + [torch.ones(2) for _ in range(RUN)]
    fast, _ = _both({"xs": xs}, monkeypatch)
    (row,) = fast
    assert row.nbytes == 2 * RUN * 8 + 4000 + 8 + 4000  # the plain ones, e (saved by exp), the 3, and w


def test_a_leaf_with_a_gradient_and_a_meta_tensor_in_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.ones(10)
    g.grad = torch.ones(10)  # a gradient on a tensor that does not require grad
    xs = [torch.ones(2) for _ in range(RUN)] + [g, torch.ones(5, device="meta")]
    fast, _ = _both({"xs": xs}, monkeypatch)
    assert fast[0].nbytes == RUN * 8 + 40 + 40


def test_runs_of_plain_tensors_are_read_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    from vramnb import _holders

    answers: list[bool] = []
    real = _holders._plain_into

    def spy(*a: Any) -> bool:
        answers.append(real(*a))
        return answers[-1]

    monkeypatch.setattr(_holders, "_plain_into", spy)
    xs, expected = _mixed(3 * RUN)
    (row,) = find_holders({"xs": xs}, CPU)
    assert row.nbytes == expected and True in answers
