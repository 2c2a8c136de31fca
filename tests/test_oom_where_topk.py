"""Two cheaper forms (validation-9): torch.where choosing from a tensor of zeros made for it (masked_fill), and a
full sort read only at its first k entries (topk); both as code that runs as printed and gives the same values."""

from __future__ import annotations

import torch

import vramnb
from tests.conftest import run

STANDIN = ("class TStand:  # where the real call runs out of memory\n"
           "    @staticmethod\n    def where(*a):\n        raise MemoryError()\n"
           "    @staticmethod\n    def sort(*a, **k):\n        raise MemoryError()\n")


def _note() -> str:
    return next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))


def _code(note: str) -> str:
    return note.split("as code: `")[1].rstrip("`")


def test_where_with_zeros_like_gets_masked_fill(ip):
    run(ip, STANDIN + "wx = torch.randn(64, 16)\nwm = torch.arange(64)[:, None] < 40")
    run(ip, "%%vram -d cpu\nwout = TStand.where(wm, wx, torch.zeros_like(wx))")
    note = _note()
    assert ("`TStand.where(wm, wx, torch.zeros_like(wx))` makes a (64, 16) float32 tensor of 0s (4.0 KiB) only to "
            "choose from, then a new result of the same size: `wx.masked_fill(~wm, 0)` makes the result alone") in note
    code = _code(note)
    assert code == "wout = wx.masked_fill(~wm, 0)"
    ns = {"wx": ip.user_ns["wx"], "wm": ip.user_ns["wm"]}
    exec(code, ns)  # noqa: S102 - as printed
    assert torch.equal(ns["wout"], torch.where(ns["wm"], ns["wx"], torch.zeros_like(ns["wx"])))


def test_a_sort_read_at_its_first_k_gets_topk(ip):
    run(ip, STANDIN + "tscores = torch.rand(10_000)")
    run(ip, "%%vram -d cpu\nts, ti = TStand.sort(tscores, descending=True)\ntop, idx = ts[:20], ti[:20]")
    note = _note()
    assert "serves to read its first 20 entries (`[:20]`): torch.topk returns those alone, sorted" in note, note
    code = _code(note)
    assert code == "ts, ti = tscores.topk(20, largest=True)  # later reads of [:20] stay as they are"
    ns = {"tscores": ip.user_ns["tscores"]}
    exec(code + "\ntop, idx = ts[:20], ti[:20]", ns)  # noqa: S102 - as printed, then the cell's next line
    want = ip.user_ns["tscores"].sort(descending=True)
    assert torch.equal(ns["top"], want.values[:20]) and torch.equal(ns["idx"], want.indices[:20])


def test_a_sort_read_whole_gets_no_topk(ip):
    run(ip, STANDIN + "tscores2 = torch.rand(1000)")
    run(ip, "%%vram -d cpu\nts2, ti2 = TStand.sort(tscores2)\ntop2 = ts2[:20]\nall2 = ts2.sum()")
    assert "topk" not in _note()
