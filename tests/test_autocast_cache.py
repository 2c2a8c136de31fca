"""Autocast's weight-cast cache in a cell's report (vramnb/diagnose/_autocast_cache.py),
exact on CPU: autocast caches a bf16 copy of each float32 parameter an eligible op uses
until the region exits; under no_grad that is memory nothing else needs."""

from __future__ import annotations

import torch

import vramnb
from tests.conftest import run
from vramnb._units import format_bytes

BF16 = 2
# 8 Linear(256, 256): each use casts weight and bias once
COPIES = 8 * (256 * 256 + 256) * BF16
SETUP = ("torch.manual_seed(0)\nmodel = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])\n"
         "x = torch.randn(4, 256)")
INFER = "with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16{}):\n    y = model(x)\n    y = model(x)"


def _notes(rep):
    return [n for n in rep.notes if "weight-cast cache" in n]


def test_no_grad_autocast_peak_names_the_cache_with_its_exact_bytes(ip):
    run(ip, SETUP)
    res, cap = run(ip, "%%vram -d cpu\n" + INFER.format(""))
    assert res.error_in_exec is None
    rep = vramnb.history()[-1]
    [note] = _notes(rep)
    # 16 copies, all alive at the peak (the second forward reuses them), freed at the block's exit
    assert note.startswith(f"{format_bytes(COPIES)} of this peak is autocast's weight-cast cache: bfloat16 copies "
                           f"of 16 parameter(s) ({format_bytes(COPIES)})")
    assert "cache_enabled=False" in note
    assert rep.end_allocated - rep.start_allocated == 4 * 256 * BF16  # y, in bf16: the copies are gone
    assert note in cap.outputs[-1].data["text/plain"] and "weight-cast cache" in cap.outputs[-1].data["text/html"]


def test_breakdown_gives_the_cache_a_row_with_its_bytes_at_the_peak(ip):
    run(ip, SETUP)
    run(ip, "%%vram -d cpu --breakdown\n" + INFER.format(""))
    rep = vramnb.history()[-1]
    rows = {n: (s, e, p) for n, s, e, p in rep.sources}
    assert rows["autocast weight-cast cache"] == (0, 0, COPIES)
    assert format_bytes(COPIES) in _notes(rep)[0]


def test_no_line_without_the_cache_or_with_gradients_on(ip):
    run(ip, SETUP)
    run(ip, "%%vram -d cpu\n" + INFER.format(", cache_enabled=False"))
    off = vramnb.history()[-1]
    assert not _notes(off)
    # without the cache, at most one copy of a weight and one of a bias are alive at a time
    assert off.peak_allocated - off.start_allocated < COPIES // 4
    # with gradients on, the copies are saved for backward anyway: no verdict
    run(ip, "%%vram -d cpu\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    loss = model(x).float().sum()\n"
            "loss.backward()")
    assert not _notes(vramnb.history()[-1])
    # a cast of the parameters outside autocast (model.half()-like) is not the cache
    run(ip, "%%vram -d cpu\nwith torch.no_grad():\n    copies = [p.to(torch.bfloat16) for p in model.parameters()]")
    assert not _notes(vramnb.history()[-1])


def test_the_autocast_nesting_count_is_left_as_it_was():
    from vramnb.diagnose._autocast_cache import _nesting

    assert _nesting() == 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _nesting() == 1
        with vramnb.vram("cpu", record=False):
            torch.nn.functional.linear(torch.ones(2, 4), torch.ones(4, 4, requires_grad=True))
        assert _nesting() == 1
    assert _nesting() == 0
