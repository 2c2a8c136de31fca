"""A copy of a model's weights that the notebook keeps on purpose (the best state a loop keeps,
an idle deep copy of a model) is offered a way to keep it off the device, with the bytes, and
never a ``del`` of the result the loop exists to keep (CPU)."""

from __future__ import annotations

import copy

import torch

from vramnb._units import format_bytes
from vramnb.diagnose._leftovers import leftover_notes

LOOP = ("for epoch in range(3):\n    metric = float(epoch)\n    if best is None or metric < best:\n"
        "        best = metric\n        best_state = copy.deepcopy(model.state_dict())\n")


def _names():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    return {"model": model, "best_state": copy.deepcopy(model.state_dict()), "best": 0.0}


def test_the_best_state_a_loop_keeps_is_kept_off_the_device_not_deleted():
    names = _names()
    nbytes = 2 * (512 * 512 + 512) * 4
    for kind in ("cpu", "cuda"):
        notes = leftover_notes(names, LOOP, lambda: {"best_state": nbytes}, kind)
        line = [n for n in notes if n.startswith("best_state holds a second copy")]
        assert line and "del best_state" not in line[0], notes
        assert f"({format_bytes(nbytes)}; the module keeps its own parameters), the result the loop keeps" in line[0]
        if kind == "cpu":
            assert "`torch.save(model.state_dict(), 'best_state.pt')` in place of the copy" in line[0]
            assert f"frees {format_bytes(nbytes)}" in line[0]
        else:
            assert (f"`best_state = {{k: v.detach().cpu() for k, v in model.state_dict().items()}}` in place of the "
                    f"copy on the device frees {format_bytes(nbytes)} there") in line[0]


def test_a_copy_bound_unconditionally_still_gets_its_del():
    names = _names()
    nbytes = 2 * (512 * 512 + 512) * 4
    notes = leftover_notes(names, "best_state = copy.deepcopy(model.state_dict())\n", lambda: {"best_state": nbytes},
                           "cpu")
    assert any(f"`del best_state` frees {format_bytes(nbytes)}" in n for n in notes), notes
