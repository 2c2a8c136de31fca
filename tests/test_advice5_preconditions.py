"""Lines whose precondition the failing code's state contradicts are not printed: "gradients are
on: each forward keeps its activations" for a model none of whose parameters requires grad, and
bf16 autocast ("activations and outputs in half the bytes") for a model with no float32
parameter (CPU)."""

from __future__ import annotations

from tests.conftest import run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import failing_code

MiB = 2**20


def _caught(ip, cell):  # type: ignore[no-untyped-def]
    from vramnb._measure import _tb_frames

    res, _ = run(ip, cell)
    assert isinstance(res.error_in_exec, RuntimeError)
    return failing_code(_tb_frames(res.error_in_exec))


def _texts(ctx):  # type: ignore[no-untyped-def]
    s = OOMState("cpu", True, 8 * MiB, 64 * MiB, cap=512 * MiB, available=8 << 30, cap_room=MiB,
                 cap_name="RLIMIT_AS", context=ctx)
    return [f.what for f in verdict(s).fixes]


def test_a_frozen_model_is_not_said_to_keep_activations_for_a_backward(ip):
    run(ip, "pnet = torch.nn.Linear(8, 8).requires_grad_(False)\npouts = []")
    ctx = _caught(ip, "for i in range(3):\n    pouts.append(pnet(torch.ones(4, 8)))\n"
                      "    if i == 2:\n        raise RuntimeError('x')")
    assert ctx.grad and ctx.backward is False and ctx.model_grad is False
    texts = _texts(ctx)
    assert not any("gradients are on" in t for t in texts), texts
    assert any(t.startswith("with no parameter of the model requiring grad (and no input that does) nothing is kept "
                            "for backward") for t in texts), texts
    # the same loop with a model that requires grad: the line stays
    run(ip, "qnet = torch.nn.Linear(8, 8)\nqouts = []")
    ctx = _caught(ip, "for i in range(3):\n    qouts.append(qnet(torch.ones(4, 8)))\n"
                      "    if i == 2:\n        raise RuntimeError('x')")
    assert ctx.model_grad is True
    assert any(t.startswith("no backward runs in the failing code, yet gradients are on") for t in _texts(ctx))


def test_a_half_precision_model_gets_no_bf16_autocast(ip):
    run(ip, "hnet = torch.nn.Linear(8, 8).to(torch.bfloat16)\nfnet = torch.nn.Linear(8, 8)")
    for cell in ("with torch.no_grad():\n    y = hnet(torch.ones(4, 8, dtype=torch.bfloat16))\n    raise RuntimeError('x')",
                 "loss = hnet(torch.ones(4, 8, dtype=torch.bfloat16)).float().sum()\nloss.backward()\n"
                 "raise RuntimeError('x')"):
        ctx = _caught(ip, cell)
        assert ctx.model == "hnet" and ctx.model_fp32 is False
        assert not any("autocast" in t for t in _texts(ctx)), _texts(ctx)
    ctx = _caught(ip, "loss = fnet(torch.ones(4, 8)).sum()\nloss.backward()\nraise RuntimeError('x')")
    assert ctx.model_fp32 is True and any("autocast" in t for t in _texts(ctx))


def test_outputs_made_under_no_grad_and_joined_after_it_are_not_said_to_keep_activations(ip):
    """A loop under ``torch.no_grad()`` collects outputs; the join after the ``with`` block fails with
    gradients on, but nothing it holds has a graph: "gradients are on: each forward keeps its
    activations" is false there (turning gradients off frees nothing)."""
    run(ip, "gnet = torch.nn.Linear(8, 8)")
    ctx = _caught(ip, "gouts = []\nwith torch.no_grad():\n    for i in range(3):\n        gouts.append(gnet(torch.ones(4, 8)))\n"
                      "gall = torch.cat(gouts)\nraise RuntimeError('x')")
    assert ctx.grad and ctx.backward is False and ctx.graphs is False
    texts = _texts(ctx)
    assert not any("gradients are on" in t or "turn gradients off" in t for t in texts), texts
    # the same loop without no_grad: its outputs have graphs, and the line stays
    ctx = _caught(ip, "houts = []\nfor i in range(3):\n    houts.append(gnet(torch.ones(4, 8)))\n"
                      "hall = torch.cat(houts)\nraise RuntimeError('x')")
    assert ctx.graphs is True
    assert any(t.startswith("no backward runs in the failing code, yet gradients are on") for t in _texts(ctx))
    run(ip, "del gouts, gall, houts, hall, gnet")


def test_an_object_whose_update_keeps_every_calls_tensors_is_what_grows(ip):
    """A metric object updated in place each step (``m.update(preds, target)`` appending to its own
    lists) grows with the samples seen: "a smaller batch per evaluation step" is no fix there, and
    the line about what the loop keeps names it."""
    run(ip, "class GMetric:\n    def __init__(self):\n        self.preds = []\n        self.total = 0\n"
            "    def update(self, p):\n        self.preds.append(p)\n        self.total += 1\n"
            "gm = GMetric()\ngnet2 = torch.nn.Linear(8, 8)")
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        gm.update(gnet2(torch.ones(4, 8)))\n"
                      "        if i == 2:\n            raise RuntimeError('x')")
    assert "gm" in ctx.grows
    ctx.forward = ("gnet2", "its input", (4, 8), (4, 8))  # the evidence the batch line needs: growth still rules it out
    texts = _texts(ctx)
    assert not any(t.startswith("a smaller batch per evaluation step") for t in texts) and \
        not any("autocast" in t for t in texts), texts
    assert any(t.startswith("with gradients off nothing is kept for backward: what grows is what the loop keeps (gm)")
               for t in texts), texts
    # an object updated in place whose attributes hold no list of tensors (a running count) is not growth
    run(ip, "class GCount:\n    def __init__(self):\n        self.n = 0\n    def update(self, p):\n        self.n += 1\n"
            "gc2 = GCount()")
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        gc2.update(gnet2(torch.ones(4, 8)))\n"
                      "        if i == 2:\n            raise RuntimeError('x')")
    ctx.forward = ("gnet2", "its input", (4, 8), (4, 8))
    assert "gc2" not in ctx.grows and any(t.startswith("a smaller batch per evaluation step") for t in _texts(ctx))
    run(ip, "del gm, gc2, gnet2, GMetric, GCount")


def test_on_the_cpu_outputs_are_not_told_to_move_to_the_cpu(ip):
    """"keep each step's outputs on the CPU (.cpu())" frees nothing where they are on the CPU already."""
    run(ip, "cnet = torch.nn.Linear(8, 8)\ncouts = []")
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        couts.append(cnet(torch.ones(4, 8)))\n"
                      "        if i == 2:\n            raise RuntimeError('x')")
    texts = _texts(ctx)  # a CPU state
    assert any(t.endswith("keep each step's outputs reduced (predictions, metrics), not whole output tensors")
               for t in texts), texts
    assert not any(".cpu()" in t for t in texts), texts
    run(ip, "del cnet, couts")
