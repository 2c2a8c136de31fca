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


def test_an_idle_model_copy_beyond_the_three_largest_holders_is_offered_to_move_or_delete(ip):
    """Three names share the model in use (each holds more, deleting any frees nothing); the idle
    copy beside them holds less but is its own: the post-mortem's holders include it, and the
    fix for it says where to keep it (disk on the CPU, the CPU on a GPU), with its bytes."""
    from tests.conftest import run
    from vramnb.diagnose import OOMState, verdict
    from vramnb.diagnose._postmortem import FailingCode

    run(ip, "import copy\nm2 = torch.nn.Linear(1024, 1024)\no2 = torch.optim.SGD(m2.parameters(), lr=0.1)\n"
            "ref2 = m2\nidle = torch.nn.Linear(512, 1024)")
    magics = ip.magics_manager.registry["VramMagics"]
    rows = magics._holders_fn("cpu")()
    big, idle = (1024 * 1024 + 1024) * 4, (512 * 1024 + 1024) * 4
    assert [r[0] for r in rows[:3]] == ["m2", "o2", "ref2"] or sorted(r[0] for r in rows[:3]) == ["m2", "o2", "ref2"]
    assert ("idle", idle, idle, "Module") in rows and all(r[1] == big and r[2] == 0 for r in rows[:3])
    ctx = FailingCode(in_use={"m2", "o2"}, model="m2", optimizer="o2", trains=True)
    for dev, code in (("cpu", "torch.save(idle.state_dict(), 'idle.pt')  # where it is still needed\ndel idle"),
                      ("cuda:0", "idle.to('cpu')  # or: del idle")):
        if dev == "cpu":
            s = OOMState("cpu", True, 2 << 20, 16 << 20, cap=1 << 30, available=8 << 30, cap_room=1 << 20,
                         cap_name="RLIMIT_AS", context=ctx, holders=rows)
        else:
            s = OOMState(dev, True, 2 << 20, 1 << 30, reserved=1 << 30, total=(1 << 30) + (1 << 20), free_device=0,
                         non_pytorch=0, context=ctx, holders=rows)
        fix = [f for f in verdict(s).fixes if f.code == code]
        assert fix and fix[0].saving == idle and format_bytes(idle) in fix[0].what, verdict(s).fixes
        assert not any(f.code in ("del m2", "del o2") for f in verdict(s).fixes)
