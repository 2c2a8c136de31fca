"""Advice printed only where the evidence at run time supports it (validation-6's causes 2, 3, 7):

* "a smaller batch" only where the failure came inside a module's forward and the failing
  allocation has the batch size of the model's input among its dims (named);
* bf16 autocast only where the failure came inside a module's forward and PyTorch's autocast runs
  the failing operator in bfloat16 on that device (replayed on fake tensors: ``addmm`` is,
  ``embedding`` of a float32 table, ``sort`` and a NumPy copy are not);
* ``del X`` never for a name the failing cell reads (the loss reads ``logits``);
* the CPU verdict's arithmetic: a request no larger than the room read after the failing operator
  unwound is not said to "need more than" that room; "one request ... more than all tensors hold"
  only with the tensors held at the failure;
* "the square of the sequence length" only for two sides of the same length from the same tensor.

Real allocation failures on the CPU (expanded operands make the requests impossible: >= 4 TiB)."""

from __future__ import annotations

import numpy as np

from tests.conftest import measured_oom, run
from vramnb._units import format_bytes
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import FailingCode

MiB = 2**20


def _whats(oom):  # type: ignore[no-untyped-def]
    return [f.what for f in oom.verdict.fixes]


def _under_a_limit(oom):  # type: ignore[no-untyped-def]
    """The fixes for the same failure (its context, read at the failure) under a process limit that
    the request does not exceed alone (the real request is larger than this machine: a shape to read)."""
    import dataclasses

    return [f.what for f in verdict(dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS",
                                                        available=8 << 30)).fixes]


def test_a_sort_of_scores_under_no_grad_gets_no_batch_and_no_autocast(ip):
    run(ip, "import torch.nn as nn\ngmodel = nn.Sequential(nn.Linear(4, 4))\n"
            "gscores = torch.zeros(1).expand(2**48)")  # 1 PiB: no address space maps it
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    gvalues, _ = torch.sort(gscores)\n"
                              "    gmasks = [m.weight.abs() > 0 for m in gmodel]")
    assert oom.state.requested == 2**48 * 4  # the sorted values
    assert oom.state.context.forward is None  # no module's forward on the failing stack
    whats = _under_a_limit(oom)
    assert not any("smaller batch" in w or "autocast" in w for w in whats), whats


def test_a_numpy_copy_before_the_forward_gets_no_batch_and_no_autocast(ip):
    ip.user_ns["gbatch"] = np.broadcast_to(np.zeros(1, np.float32), (2**24, 2**24))  # 1 PiB as a view
    run(ip, "gnet = torch.nn.Conv2d(3, 8, 1).eval()")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    gx = torch.tensor(gbatch)\n    gout = gnet(gx[:1])")
    assert oom.state.requested == 2**48 * 4
    whats = _under_a_limit(oom)
    assert not any("smaller batch" in w or "autocast" in w for w in whats), whats
    del ip.user_ns["gbatch"]


def test_an_embedding_output_gets_the_batch_line_with_its_dims_and_no_autocast(ip):
    """nn.Embedding's output stays float32 under CPU autocast (its float32 table): no autocast line;
    the output (4096, 8192, 2**16) has the batch 4096 and the length 8192 of the input: named."""
    run(ip, "import torch.nn as nn\ngenc = nn.Sequential(nn.Embedding(10, 2**16), nn.Linear(2**16, 2)).eval()\n"
            "gids = torch.zeros(1, dtype=torch.long).expand(4096, 8192)")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    ghidden = genc(gids)")
    want = 4096 * 8192 * 2**16 * 4
    assert oom.state.requested == want
    ctx = oom.state.context
    assert ctx.op_name == "embedding" and ctx.request_shape == (4096, 8192, 2**16) and ctx.lowered is False
    whats = _under_a_limit(oom)
    assert not any("autocast" in w for w in whats), whats
    assert ("a smaller batch per evaluation step: the failing allocation (4096, 8192, 65536) has the batch size 4096 "
            "of genc's input gids (4096, 8192) (its dim 0) as its dim 0, so it shrinks in proportion; it also has that "
            "input's dim 1 (8192) as its dim 1: a shorter one shrinks it too") in whats, whats


def test_a_linear_in_the_forward_gets_autocast_because_autocast_lowers_addmm(ip):
    run(ip, "glin = torch.nn.Sequential(torch.nn.Linear(16, 2**14))\ngxs = torch.zeros(1).expand(2**26, 16)")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    gy = glin(gxs)")
    assert oom.state.requested == 2**26 * 2**14 * 4
    ctx = oom.state.context
    assert ctx.op_name == "addmm" and ctx.lowered is True and ctx.request_shape == (2**26, 2**14)
    whats = _under_a_limit(oom)
    assert ("bf16 autocast around the forward: the failing `addmm` (its result (67108864, 16384) is the request) "
            "runs inside glin's forward, and autocast runs it in bfloat16: that result in half the bytes") in whats
    assert any(w.startswith("a smaller batch per evaluation step: the failing allocation (67108864, 16384) has the "
                            "batch size 67108864 of glin's input gxs (67108864, 16) (its dim 0) as its dim 0")
               for w in whats), whats


def test_a_name_the_cell_reads_after_the_failing_line_is_not_offered_for_deletion(ip):
    """``logits`` is read by the loss on the line after the failing one: ``del logits`` would break it."""
    from vramnb.diagnose._postmortem import failing_code
    from vramnb._measure import _tb_frames

    run(ip, "import torch.nn.functional as F\nglogits = torch.zeros(2, 4)\nglabels = torch.zeros(1, dtype=torch.long)"
            ".expand(2**20, 2**20)\ngold = torch.zeros(4)")
    res, _ = run(ip, "gtarget = F.one_hot(glabels, 4).float()\ngloss = (gtarget * glogits).sum()")
    ctx = failing_code(_tb_frames(res.error_in_exec))
    assert {"glogits", "glabels", "F"} <= ctx.reads and not {"gtarget", "gloss"} & ctx.reads
    s = OOMState("cpu", True, 128 * MiB, 392 * MiB, cap=1 << 30, available=8 << 30, cap_room=0, cap_name="RLIMIT_AS",
                 holders=[("glogits", 128 * MiB, 128 * MiB, "Tensor"), ("gold", 128 * MiB, 128 * MiB, "Tensor")],
                 context=ctx)
    codes = [f.code for f in verdict(s).fixes]
    assert "del glogits" not in codes and "del gold" in codes, codes


def test_a_request_no_larger_than_the_room_read_is_not_said_to_need_more_than_it():
    """sort's 256 MiB indices failed under RLIMIT_AS; the room read after its own values and
    workspace unwound was 506.9 MiB: the verdict is the process's limit, with the true numbers."""
    req, room, cap = 2**28, 531_521_536, 1 << 30
    s = OOMState("cpu", True, req, 2**28, cap=cap, available=20 << 30, cap_room=room, cap_name="RLIMIT_AS",
                 context=FailingCode())
    v = verdict(s)
    assert v.kind == "per-process cap" and v.short_by is None
    assert v.reason == (f"the allocation of {format_bytes(req)} found less than that free under this process's own "
                        f"limit (RLIMIT_AS: ulimit, resource.setrlimit) of {format_bytes(cap)}: {format_bytes(room)} is "
                        "free under it now, after the failing operation's own allocations (its other results or "
                        "workspace, which the tracker does not see until it returns) were freed as it unwound (more "
                        f"than {format_bytes(room - req)} of it); the system has {format_bytes(20 << 30)} available")
    assert "needs more than" not in v.reason
    # no process limit: the system's memory, the same arithmetic
    s = OOMState("cpu", True, req, 2**28, available=room, context=FailingCode())
    v = verdict(s)
    assert v.kind == "capacity" and f"{format_bytes(room)} is available now" in v.reason and "needs more" not in v.reason
    # a request larger than the room: "more than", with the bytes short
    s = OOMState("cpu", True, room + 1, 0, available=room, context=FailingCode())
    assert verdict(s).short_by == 1


def test_after_the_error_unwound_tensors_now_are_not_said_to_be_all_the_failure_had():
    """torch.load's storage read is not seen by the tracker's mode: the state is read after the
    list comprehension that held 173 MiB unwound; "more than the 0 B all tensors hold" is not said."""
    s = OOMState("cpu", False, 11_354_112, 0, cap=982_777_856, available=20 << 30, cap_room=3_040_870,
                 cap_name="RLIMIT_AS", context=FailingCode())
    v = verdict(s)
    assert v.kind == "per-process cap" and v.short_by == 11_354_112 - 3_040_870
    assert not any(f.what.startswith("one request of") for f in v.fixes), [f.what for f in v.fixes]
    s.at_failure = True  # taken at the failure, the same numbers: the line is true and stays
    assert any(f.what.startswith("one request of 10.8 MiB is more than the 0 B all tensors hold") for f in
               verdict(s).fixes)


def test_a_product_of_two_different_sides_is_not_called_a_square(ip):
    run(ip, "gq = torch.zeros(1).expand(2**21, 8)\ngdb = torch.zeros(1).expand(2**22, 8)")
    oom, _ = measured_oom(ip, "gsim = torch.einsum('id,jd->ij', gq, gdb)")
    f = oom.verdict.fixes[0].what
    assert f"it grows with the product of {2**21} (`gq`'s side) and {2**22} (`gdb`'s side)" in f and "square" not in f
    # a Gram matrix of one tensor: the square of its length
    oom, _ = measured_oom(ip, "ggram = gq @ gq.T")
    assert f"it grows with the square of `gq`'s length {2**21} (both sides are `gq`)" in oom.verdict.fixes[0].what
    # q and k both computed from one x: the square of that length
    run(ip, "gx = torch.zeros(1).expand(2**20, 8)")
    oom, _ = measured_oom(ip, "gqq = gx * 2\ngkk = gx + 1\ngs = gqq @ gkk.transpose(-2, -1)")
    assert f"it grows with the square of the length {2**20} that `gqq` and `gkk` both take from `gx`" in \
        oom.verdict.fixes[0].what
    # two tensors of equal length made apart: their product, no square claimed
    run(ip, "gk2 = torch.zeros(1).expand(2**21, 8)")
    oom, _ = measured_oom(ip, "gs2 = gq @ gk2.transpose(-2, -1)")
    assert f"the product of {2**21} (`gq`'s side) and {2**21} (`gk2`'s side)" in oom.verdict.fixes[0].what


def test_a_training_cell_failing_before_its_first_forward_gets_no_step_technique(ip):
    """A training loop whose first statement copies a NumPy batch: the copy fails before any forward,
    nothing held has a graph: autocast, recomputation and compare act on nothing that exists."""
    ip.user_ns["gnp"] = np.broadcast_to(np.zeros(1, np.float32), (2**20, 2**20))
    run(ip, "gtnet = torch.nn.Linear(4, 4)\ngopt = torch.optim.SGD(gtnet.parameters(), lr=0.1)")
    oom, _ = measured_oom(ip, "for i in range(2):\n    gxb = torch.tensor(gnp)\n    gl = gtnet(gxb[:1, :4]).sum()\n"
                              "    gl.backward()\n    gopt.step()")
    ctx = oom.state.context
    assert ctx.backward and ctx.trains and ctx.forward is None and ctx.graphs is False
    whats = _under_a_limit(oom)
    assert not any(t in w for w in whats for t in ("autocast", "recompute", "technique", "smaller batch")), whats
    # the same loop failing inside the forward keeps them (activations exist there)
    import dataclasses
    inside = dataclasses.replace(ctx, forward=("gtnet", "gxb", (1, 4), (1, 4)))
    s = dataclasses.replace(oom.state, cap=2**60, cap_room=0, available=8 << 30, context=inside)
    assert any("autocast" in f.what for f in verdict(s).fixes)
    del ip.user_ns["gnp"]


def test_the_replay_asks_autocast_itself_which_operators_it_lowers():
    """What the dispatch mode sees is below autocast and the decompositions (``conv2d`` reaches it as
    ``convolution``, ``linear`` as ``addmm``): replayed on fake tensors under CPU bf16 autocast, with
    the operands as autocast gives them. Exact result shapes; the request is the result's bytes."""
    import torch

    from vramnb.diagnose._failing_op import read_op, record

    def t(shape, dtype=torch.float32, param=False):  # type: ignore[no-untyped-def]
        x = torch.zeros(shape, dtype=dtype)
        return torch.nn.Parameter(x) if param else x

    aten = torch.ops.aten
    conv = record(aten.convolution.default, (t((8, 3, 64, 64)), t((16, 3, 3, 3), param=True),
                                             t((16,), param=True), [1, 1], [0, 0], [1, 1], False, [0, 0], 1), {})
    assert read_op(conv, 8 * 16 * 62 * 62 * 4, "cpu")[:3] == ("convolution", (8, 16, 62, 62), True)
    emb = record(aten.embedding.default, (t((1000, 128), param=True), t((32, 512), torch.int64)), {})
    assert read_op(emb, 32 * 512 * 128 * 4, "cpu") == ("embedding", (32, 512, 128), False, "")
    mm = record(aten.mm.default, (t((64, 128)), t((128, 32))), {})
    assert read_op(mm, 64 * 32 * 4, "cpu") == ("mm", (64, 32), True, "runs it in bfloat16")
    srt = record(aten.sort.default, (t((1000,)),), {})
    assert read_op(srt, 1000 * 8, "cpu") == ("sort", (1000,), False, "")  # its int64 indices
    # its values keep the input's precision: bfloat16 only where the scores come in bfloat16, which the record does
    # not show (validation-9: torch.stack of hidden states a residual sum kept float32): not known, no autocast line
    assert read_op(srt, 1000 * 4, "cpu")[2:] == (None, "")
    assert read_op(mm, 12345, "cpu") == ("mm", None, None, "")  # no result of the request's size: nothing known


def test_a_request_larger_than_the_system_too_is_capacity_not_the_process_limit():
    """Notebook 12's window pairs: 206.7 GiB under a 3.9 GiB RLIMIT_AS headroom with 22.3 GiB available:
    more than the system has too, so raising the limit is no fix and the verdict is capacity."""
    req, room, avail = 221_943_070_720, 4_187_593_728, 23_944_986_624
    s = OOMState("cpu", True, req, 4_089_446, cap=room + 10**9, available=avail, cap_room=room, cap_name="RLIMIT_AS",
                 context=FailingCode())
    v = verdict(s)
    assert v.kind == "capacity" and v.short_by == req - avail
    assert v.reason == (f"the allocation of {format_bytes(req)} is more than the {format_bytes(avail)} the system has "
                        f"available and the {format_bytes(room)} this process's own limit (RLIMIT_AS: ulimit, "
                        f"resource.setrlimit) still allows, with {format_bytes(4_089_446)} of tensors alive at the "
                        "failure")
    assert not any("raise the process's limit" in f.what for f in v.fixes)


def test_an_operator_on_the_models_own_input_is_not_lowered_by_following_it(ip):
    """``F.interpolate`` of the image the model was given keeps its precision, which no lowered
    operation made: no autocast line. The same operator on a convolution's output would follow its bfloat16."""
    run(ip, "import torch.nn as nn, torch.nn.functional as F\nclass Up(nn.Module):\n    def __init__(s):\n"
            "        super().__init__()\n        s.c = nn.Conv2d(3, 3, 1)\n    def forward(s, x):\n"
            "        return s.c(F.interpolate(x, scale_factor=512))\n"
            "gup = Up().eval()\ngimg = torch.zeros(1).expand(64, 3, 256, 256)")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    gbig = gup(gimg)")
    ctx = oom.state.context
    assert ctx.op_name.startswith("upsample") and ctx.request_shape == (64, 3, 256 * 512, 256 * 512)
    assert ctx.lowered is False, ctx.lowered_how
    assert not any("autocast" in w for w in _under_a_limit(oom))
