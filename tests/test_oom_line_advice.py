"""The out-of-memory post-mortem reads the failing line and what the failing code keeps (CPU,
real allocation failures): a copy made before a slice, ``torch.cat`` growing a tensor, a
container the loop adds to (no capacity techniques then), gradients left from training
during a no-grad evaluation."""

from __future__ import annotations

import vramnb
from tests.conftest import measured_oom, run
from vramnb._units import format_bytes
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import FailingCode

MiB = 2**20
HUGE = "torch.empty(1 << 60, dtype=torch.uint8)"  # the CPU allocator refuses 1 EiB


def _oom(ip, cell):
    return measured_oom(ip, cell)[0]


def test_a_whole_copy_before_a_slice_is_named_with_the_slice_first(ip):
    # an expanded bf16 tensor: the float copy asks for every element (2 x 2**27 x 2**27 x 4 B), which fails
    run(ip, "logits = torch.zeros(1, dtype=torch.bfloat16).expand(2, 2**27, 2**27)")
    oom = _oom(ip, "nxt = logits.clone().float()[:, -1, :]")
    want = 2 * 2**27 * 2**27 * 2  # clone keeps bfloat16 and is the first request to fail
    assert oom.state.requested == want
    f = oom.verdict.fixes[0]
    assert f.what == (f"the failing line makes a full copy of logits ((2, {2**27}, {2**27}), {format_bytes(want)} "
                      "for the copy) before slicing it: slice first, then copy or convert, so only the slice is "
                      "copied")
    assert f.code == "logits[:, -1, :].clone().float()"


def test_no_copy_sentence_where_the_line_keeps_the_whole_copy_or_the_request_is_another(ip):
    run(ip, "logits = torch.zeros(1, dtype=torch.bfloat16).expand(2, 2**27, 2**27)")
    oom = _oom(ip, "whole = logits.float()")  # no slice: the copy is what the line wants
    assert oom.state.context.transient is None
    oom = _oom(ip, "part = logits[:, -1, :].float() + " + HUGE + "[:1]")  # another request fails
    assert oom.state.context.transient is None


def test_torch_cat_growing_a_tensor_is_named_with_old_and_new_bytes(ip):
    run(ip, "k_cache = torch.zeros(1).expand(2, 2**56)\nK = torch.ones(2, 1)")
    oom = _oom(ip, "for step in range(3):\n    k_cache = torch.cat([k_cache, K], dim=1)")
    new = 2 * (2**56 + 1) * 4
    assert oom.state.requested == new
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"torch.cat on the failing line allocates a new k_cache of {format_bytes(new)} and "
                             f"copies the old k_cache ({format_bytes(2 * 2**56 * 4)}) into it: old and new are "
                             "alive together")
    assert "k_cache_buf.narrow(1, t, n).copy_(new)" in f.code
    assert "and each step copies the whole k_cache again" in f.what
    # not in a loop: no claim about steps
    oom = _oom(ip, "k_cache = torch.cat([k_cache, K], dim=1)")
    assert oom.verdict.fixes[0].what.startswith("torch.cat on the failing line")
    assert "each step copies" not in oom.verdict.fixes[0].what
    # a cat into another name grows nothing
    oom = _oom(ip, "out = torch.cat([k_cache, K], dim=1)")
    assert oom.state.context.transient is None


def _state(**kw):
    base = dict(device="cpu", at_failure=True, requested=5 * MiB, allocated=84 * MiB, available=20 * 2**30,
                cap=800 * MiB, cap_room=1 * MiB, cap_name="RLIMIT_AS")
    return OOMState(**{**base, **kw})


def test_a_kept_container_that_closes_the_gap_gets_no_capacity_techniques():
    ctx = FailingCode(in_use={"outs", "net", "opt"}, model="net", optimizer="opt", trains=True, backward=True,
                      mutated={"outs"})
    s = _state(holders=[("outs", 65 * MiB, 56 * MiB, "list"), ("net", 16, 0, "Module")], context=ctx)
    fixes = verdict(s).fixes
    assert fixes[0].code == "outs.clear()" and fixes[0].saving == 56 * MiB
    assert not any("autocast" in f.code or "checkpoint" in f.code or "compare" in f.code for f in fixes)
    # gradients off: what the loop keeps stays, the techniques (smaller batch, autocast) go
    off = verdict(_state(**{**s.__dict__, "context": FailingCode(**{**ctx.__dict__, "grad": False})})).fixes
    assert [f.code for f in off][:1] == ["outs.clear()"]
    assert any("what the loop keeps" in f.what for f in off)
    assert not any("autocast" in f.code or "smaller batch" in f.what for f in off)
    # the same container only read by the failing code, or too small to close the gap: techniques stay
    for kw in (dict(context=FailingCode(**{**ctx.__dict__, "mutated": set()})),
               dict(holders=[("outs", 3 * MiB, 3 * MiB, "list")], requested=40 * MiB)):
        assert any("autocast" in f.code for f in verdict(_state(**{**s.__dict__, **kw})).fixes)


def test_no_grad_evaluation_names_gradients_left_from_training_and_claims_no_kept_outputs(ip):
    run(ip, "net = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Linear(128, 8))\n"
            "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "net(torch.ones(4, 256)).sum().backward()")
    oom = _oom(ip, "with torch.no_grad():\n    out = net(torch.ones(4, 256))\n    big = " + HUGE)
    grads = (256 * 128 + 128 + 128 * 8 + 8) * 4
    assert oom.state.context.grads == ("net", grads)
    # the verdict for a request the device could hold (this one is larger than the whole device)
    fixes = verdict(_state(holders=[("net", 2 * grads, 0, "Module")], context=oom.state.context)).fixes
    g = [f for f in fixes if "gradients left from training" in f.what]
    assert g and g[0].code == "net.zero_grad(set_to_none=True)" and g[0].saving == grads  # opt: not in the failing code
    assert g[0].what == (f"the gradients left from training on net's parameters hold {format_bytes(grads)} while "
                         "gradients are off; evaluation needs none: drop them before evaluating")
    assert not any("what the loop keeps" in f.what for f in fixes)  # nothing is added to a container
    # the bytes the line names are the bytes its code frees
    run(ip, "%%vram -d cpu\nnet.zero_grad(set_to_none=True)")
    assert vramnb.history()[-1].delta_allocated == -grads

def test_no_grad_evaluation_says_what_the_loop_keeps_only_where_it_adds_to_a_container():
    ctx = FailingCode(in_use={"preds", "net"}, model="net", trains=True, grad=False, mutated={"preds"})
    s = _state(holders=[("preds", 3 * MiB, 3 * MiB, "list")], requested=40 * MiB, context=ctx)
    assert any("what the loop keeps" in f.what for f in verdict(s).fixes)
    s = _state(holders=[("preds", 3 * MiB, 3 * MiB, "list")], requested=40 * MiB,
               context=FailingCode(**{**ctx.__dict__, "mutated": set()}))
    assert not any("what the loop keeps" in f.what for f in verdict(s).fixes)
