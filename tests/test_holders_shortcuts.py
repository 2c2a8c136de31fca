"""The shortcuts of ``%vram``'s listing (issue 28 item 16), each against the path it replaces:

* the entries of a container of plain leaf tensors are made in bulk (``_plain_entries``), and
  their rows split in one step: the rows, bytes and details must be those of the entry-by-entry
  walk, whatever the entries share (views, the same tensor twice, storages over the same bytes,
  a storage another name holds) and wherever a tensor that is not plain sits;
* the referrer walk over IPython's last exception (several passes over every live object) runs
  only where the exception's frames hold a storage on the device: where they do, at any depth
  a row reaches, the row is the same as with the walk always run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from tests.conftest import run
from vramnb import _free, _holder_entries
from vramnb._holders import find_holders

CPU = torch.device("cpu")


def _rows(rows: Any) -> list[Any]:
    return [dataclasses.asdict(r) for r in rows]


def _both(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    fast = find_holders(ns, CPU)
    with monkeypatch.context() as m:
        m.setattr(_holder_entries, "_plain_entries", lambda *a, **k: False)
        slow = find_holders(ns, CPU)
    assert _rows(fast) == _rows(slow)
    assert (fast.total, fast.out_of_sight) == (slow.total, slow.out_of_sight)
    return fast


def test_lists_of_plain_tensors_sharing_storages_across_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    base = torch.zeros(1000)  # 4000 bytes
    a = torch.arange(6, dtype=torch.float32)  # 24 bytes
    alias = torch.from_numpy(a.numpy())  # another StorageImpl over a's bytes
    shared = torch.ones(5)  # 20 bytes, in two lists and a name of its own
    p = torch.nn.Parameter(torch.ones(3), requires_grad=False)  # a plain Parameter: "parameters"
    lists = [[torch.ones(2) for _ in range(7)] + [base[:10], shared] for _ in range(3)]
    lists[1] += [base[500:], alias, torch.ones(0), p]
    lists[2] += [a, shared, lists[0][0]]  # the same tensor twice, in two lists
    ns = {"lists": lists, "keep": shared, "more": [torch.ones(4) for _ in range(1500)]}
    rows = _both(ns, monkeypatch)
    by = {r.name: r for r in rows}
    assert by["lists"].nbytes == 3 * 7 * 8 + 4000 + 20 + 24 + 12
    assert by["lists"].unique == by["lists"].nbytes - 20  # `keep` holds the shared one too
    assert by["more"].nbytes == 1500 * 16 and by["more"].more == 1500 - 8
    detail = {e.name: e.detail for e in by["lists"].entries}
    assert "parameters 12 B" in detail["lists[1]"]
    assert "shares" in detail["lists[2]"]  # a and the tensor of lists[0] are counted there


def test_a_tensor_that_is_not_plain_among_them_takes_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    w = torch.ones(8, requires_grad=True)
    y = (w * 2).sin()  # a graph: saves w * 2 (32) and accumulates into w (32)
    g = torch.ones(4)
    g.grad = torch.ones(4)  # a leaf with a gradient: not plain
    ns = {"xs": [[torch.ones(2) for _ in range(5)] + [y], [torch.ones(3) for _ in range(4)] + [g]]}
    rows = _both(ns, monkeypatch)
    assert rows[0].nbytes == 5 * 8 + (32 + 32 + 32 + 8) + 4 * 12 + 16 + 16


def test_the_detail_of_a_container_of_plain_tensors_splits_as_parts_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container row's split (parts summed over its entries): plain Parameters are
    ``parameters``, other plain tensors ``tensors``, whatever no entry counts ``other``."""
    params = [torch.nn.Parameter(torch.ones(2), requires_grad=False) for _ in range(3)]
    ns = {"mix": [[*params, torch.ones(5), torch.ones(5)]]}
    rows = _both(ns, monkeypatch)
    assert rows[0].detail == "tensors 40 B · parameters 24 B"  # (entries largest first)


RAISE_HOLDING = ("def fails():\n    cfg = {'a': [[torch.ones(2**10)]]}\n    raise ValueError('x')\n"
                 "fails()")


def _count_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = _free.outside_referrers

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(_free, "outside_referrers", counted)
    return calls


def _listing(ip: Any) -> list[tuple[str, int, int]]:
    run(ip, "%vram -d cpu -q -o rep")
    rep = ip.user_ns.pop("rep")
    return [(h.name, h.nbytes, h.unique) for h in rep.holders if h.hidden]


def test_no_referrer_walk_when_the_exceptions_frames_hold_nothing_on_the_device(ip, monkeypatch):  # type: ignore[no-untyped-def]
    run(ip, "def fails():\n    n = [1, 2, 3]\n    raise ValueError(n)\nfails()")
    calls = _count_walks(monkeypatch)
    assert _listing(ip) == []
    assert calls == []
    run(ip, "%vram free -d cpu -q")  # %vram free still decides, and releases the frames
    assert calls


def test_frames_holding_a_tensor_deep_in_a_container_are_decided_and_listed(ip, monkeypatch):  # type: ignore[no-untyped-def]
    run(ip, RAISE_HOLDING)
    calls = _count_walks(monkeypatch)
    rows = _listing(ip)
    assert calls  # the frames hold 4 KiB: which of them %vram free may release is decided
    assert ("(last exception)", 4096, 4096) in rows
    with monkeypatch.context() as m:  # the same row with the walk always run
        real = _free._frame_objects
        m.setattr(_free, "_frame_objects", lambda shell, device=None: real(shell))
        assert _listing(ip) == rows


def test_frames_holding_only_what_a_name_holds_are_listed_as_before(ip, monkeypatch):  # type: ignore[no-untyped-def]
    run(ip, "x = torch.ones(100)\ndef fails(t):\n    raise ValueError('x')\nfails(x)")
    rows = _listing(ip)
    assert ("(last exception)", 400, 0) in rows  # x's too: "not shared" 0
    with monkeypatch.context() as m:
        real = _free._frame_objects
        m.setattr(_free, "_frame_objects", lambda shell, device=None: real(shell))
        assert _listing(ip) == rows


def test_long_lists_of_distinct_plain_tensors_make_entries_only_for_the_rows_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the rows shown, a long list of plain tensors that each keep a storage of their own is lumped
    (issue 28 item 16: a million tensors in lists of 1000): the rows, bytes and details are those of the
    entry-by-entry walk, with sizes that differ (the largest shown, ties in order), lists of lists, a
    list holding a Parameter (its own split) and one whose tensors share a storage (walked one by one)."""
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 50, (300,), generator=g).tolist()
    base = torch.zeros(64)
    ns = {"varied": [torch.ones(n) for n in sizes],
          "nested": [[torch.ones(1 + (i * 7 + j) % 13) for j in range(40)] for i in range(30)],
          "with_param": [torch.ones(3) for _ in range(20)] + [torch.nn.Parameter(torch.ones(5), requires_grad=False)],
          "views": [base[i:i + 4] for i in range(40)],
          "also": None}
    ns["also"] = [ns["varied"][5], *[torch.ones(2) for _ in range(30)]]  # a tensor another name's list counts first
    rows = _both(ns, monkeypatch)
    by = {r.name: r for r in rows}
    assert by["varied"].nbytes == 4 * sum(sizes) and by["varied"].more == 300 - 8
    assert [e.nbytes for e in by["varied"].entries] == sorted((4 * n for n in sizes), reverse=True)[:8]
    assert by["nested"].more == 30 - 8 and by["nested"].entries[0].more == 40 - 8
