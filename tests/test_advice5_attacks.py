"""Shapes beyond the field cases, tried on the categories of this round: growth (a list stacked,
a dict keyed per step, an accumulator of one shape, a join of outputs moved to the CPU), kept copies
(a best state built by a comprehension, a best model deep-copied under a condition), handled
exceptions (a retry after ``contextlib.suppress``, a retry in a loop after the except block)."""

from __future__ import annotations

import torch

from tests.conftest import run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._leftovers import leftover_notes
from vramnb.diagnose._postmortem import failing_code

MiB = 2**20


def _caught(ip, cell):  # type: ignore[no-untyped-def]
    from vramnb._measure import _tb_frames

    res, _ = run(ip, cell)
    assert isinstance(res.error_in_exec, RuntimeError)
    return failing_code(_tb_frames(res.error_in_exec))


def _texts(ctx, device="cpu"):  # type: ignore[no-untyped-def]
    if device == "cpu":
        s = OOMState("cpu", True, 8 * MiB, 64 * MiB, cap=512 * MiB, available=8 << 30, cap_room=MiB,
                     cap_name="RLIMIT_AS", context=ctx)
    else:
        s = OOMState(device, True, 8 * MiB, 1 << 30, reserved=1 << 30, total=1 << 30, free_device=0,
                     non_pytorch=0, context=ctx)
    return [f.what for f in verdict(s).fixes]


def test_growth_shapes(ip):
    run(ip, "anet = torch.nn.Linear(8, 8)\nahist = []\naouts = {}\naacc = torch.zeros(4, 8)")
    # a list stacked every step: the list grows (what it keeps), no smaller batch
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        ahist.append(anet(torch.ones(4, 8)))\n"
                      "        astk = torch.stack(ahist)\n        if i == 2:\n            raise RuntimeError('x')")
    ctx.forward = ("anet", "its input", (4, 8), (4, 8))  # the evidence the batch line needs
    assert "ahist" in ctx.grows and not any(t.startswith("a smaller batch per") for t in _texts(ctx))
    # a dict keyed per step
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        aouts[i] = anet(torch.ones(4, 8))\n"
                      "        if i == 2:\n            raise RuntimeError('x')")
    ctx.forward = ("anet", "its input", (4, 8), (4, 8))  # the evidence the batch line needs
    assert "aouts" in ctx.grows and not any(t.startswith("a smaller batch per") for t in _texts(ctx))
    # an accumulator of one shape grows nothing: the batch line stays
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        aacc = aacc + anet(torch.ones(4, 8))\n"
                      "        if i == 2:\n            raise RuntimeError('x')")
    ctx.forward = ("anet", "its input", (4, 8), (4, 8))
    assert not ctx.grows and any(t.startswith("a smaller batch per evaluation step") for t in _texts(ctx))


def test_a_join_kept_on_the_cpu_is_not_named_for_a_gpu_failure(ip):
    """``preds = torch.cat([preds, logits.cpu()])`` keeps preds on the CPU: on a GPU failure its bytes are
    not what runs out; no line names it (its tensor's device is read)."""
    run(ip, "bnet = torch.nn.Linear(8, 8)")
    ctx = _caught(ip, "bpreds = torch.zeros(0, 8)\nwith torch.no_grad():\n    for i in range(3):\n"
                      "        bpreds = torch.cat([bpreds, bnet(torch.ones(262144, 8)).cpu()])\n"
                      "    raise RuntimeError('x')")
    assert ctx.joins["bpreds"][1:] == (3 * 262144 * 8 * 4, "cpu")
    assert not any(t.startswith("`bpreds = ") for t in _texts(ctx, "cuda:0"))
    assert any(t.startswith("`bpreds = ") for t in _texts(ctx, "cpu"))


def test_kept_copies_shapes():
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 512)
    nbytes = (1024 * 512 + 512) * 4
    src = ("for epoch in range(2):\n    m = float(epoch)\n    if m < best:\n"
           "        best_state = {k: v.clone() for k, v in model.state_dict().items()}\n")
    names = {"model": model, "best_state": {k: v.clone() for k, v in model.state_dict().items()}, "best": 0.0}
    notes = leftover_notes(names, src, lambda: {"best_state": nbytes}, "cuda")
    assert notes and "del best_state" not in notes[0] and "v.detach().cpu()" in notes[0], notes


def test_a_retry_after_suppress_or_after_the_except_block_keeps_nothing_handled(ip):
    import vramnb

    n = 1 << 20
    run(ip, f"import contextlib\ndef _tr(k):\n    h1 = torch.ones({n} // k)\n"
            "    return torch.empty(1 << 60, dtype=torch.uint8)\n")
    for cell in ("with contextlib.suppress(RuntimeError):\n    _tr(1)\n_tr(2)",
                 "for k in (1, 2):\n    try:\n        _tr(k)\n        break\n    except RuntimeError:\n"
                 "        if k == 2:\n            raise\n        continue"):
        res, _ = run(ip, "%%vram -d cpu\n" + cell)
        assert isinstance(res.error_in_exec, RuntimeError)
        oom = vramnb.history()[-1].oom
        if cell.startswith("with"):
            assert oom.state.handled == [], oom.state.handled
