"""Training techniques only where they can close the gap, and the cheaper form of two calls
(validation-8's wrong advice: checkpointing and bf16 autocast offered for a loss's broadcast buffer,
for log_softmax of the user's logits outside any block, for one attention matrix):

* recomputing activations frees at most what the graphs the failing code holds saved for a
  backward (the cell's names and torch's own frames included): where that is less than the bytes
  missing, checkpointing is not offered, and one line says why, with both numbers;
* bf16 autocast halves at most those saved activations and, unless autocast runs the failing
  operator in float32 (``mse_loss``: its buffers too), the request;
* a pointwise loss of an input and a target of different shapes that broadcast to a far larger
  one is named, with the same-shape form (``pred.squeeze(-1)``) as code;
* ``nn.MultiheadAttention`` called with ``need_weights`` left True, failing at its attention
  matrix: ``need_weights=False``.

Real allocation failures on the CPU (expanded operands make the requests impossible: >= 4 TiB)."""

from __future__ import annotations

import dataclasses

from tests.conftest import measured_oom, run
from vramnb.diagnose import verdict

MiB = 2**20


def _fixes_under_a_limit(oom):  # type: ignore[no-untyped-def]
    """The fixes for the same failure (its context, read at the failure) under a process limit that
    leaves no room (the bytes short: the whole request)."""
    return verdict(dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS",
                                       available=8 << 30)).fixes


def test_a_broadcasting_mse_loss_in_a_training_step_gets_the_shape_not_autocast_or_checkpointing(ip):
    run(ip, "import torch.nn as nn, torch.nn.functional as F\ntorch.manual_seed(0)\n"
            "tnet = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1))\n"
            "topt = torch.optim.SGD(tnet.parameters(), lr=0.1)\ntx = torch.randn(1024, 256)\n"
            "tw = torch.ones(1, requires_grad=True)")
    oom, _ = measured_oom(ip, "tpred = tnet(tx).mean() * tw.expand(2**24, 1)\n"
                              "ty = torch.zeros(1).expand(2**24)\n"
                              "tloss = F.mse_loss(tpred, ty)\ntopt.zero_grad()\ntloss.backward()\ntopt.step()")
    assert oom.state.requested == 2**48 * 4  # the (2**24, 2**24) float32 difference
    ctx = oom.state.context
    assert ctx.op_name == "mse_loss" and ctx.request_shape is None and ctx.lowered is False
    # saved for backward: the ReLU's (1024, 1024) float32 result (tx is a name's own; parameters are leaves)
    assert oom.state.frames_graph == 1024 * 1024 * 4 + 4  # and the mean's () result, which the product saved
    fixes = _fixes_under_a_limit(oom)
    whats = [f.what for f in fixes]
    assert not any(w.startswith(("bf16 autocast around", "recompute activations")) for w in whats), whats
    gap = [w for w in whats if "cannot close this gap" in w]
    assert gap == ["bf16 autocast and recomputing activations (checkpointing) cannot close this gap: the request of "
                   "1024.0 TiB is 1024.0 TiB more than the room left; the failing code holds 4.0 MiB saved for backward, "
                   "all that recomputation could free; `mse_loss` stays float32 under autocast, and autocast halves "
                   "at most the saved activations: change the failing line's shapes instead"], whats
    line = [f for f in fixes if f.what.startswith("`F.mse_loss(tpred, ty)` compares")]
    assert len(line) == 1, whats
    assert line[0].what == (
        "`F.mse_loss(tpred, ty)` compares tpred (16777216, 1) with ty (16777216,) element by element after "
        "broadcasting both to (16777216, 16777216) (1024.0 TiB for each temporary of that shape): every one of one meets "
        "every one of the other, so the loss is also not the one meant (PyTorch warns: \"Using a target size ... that "
        "is different to the input size\"); give both the same shape: `tpred.squeeze(-1)` makes them (16777216,) "
        "(64.0 MiB per temporary)")
    assert line[0].code == "tloss = F.mse_loss(tpred.squeeze(-1), ty)"


def test_the_same_shape_code_for_a_loss_module_runs_and_matches_the_intended_loss(ip):
    """``criterion(pred, y)`` of an ``nn.MSELoss`` held by a name: read by its class; the printed
    statement, run as printed on small tensors of the same layout, gives the element-wise loss."""
    run(ip, "import torch.nn as nn\ntcrit = nn.MSELoss()\ntv = torch.ones(1, requires_grad=True)")
    oom, _ = measured_oom(ip, "tp = tv.expand(2**24, 1) * 1\n"
                              "tt = torch.zeros(1).expand(2**24)\ntl = tcrit(tp, tt)\ntl.backward()")
    fixes = _fixes_under_a_limit(oom)
    line = [f for f in fixes if f.what.startswith("`tcrit(tp, tt)` compares")]
    assert len(line) == 1 and line[0].code == "tl = tcrit(tp.squeeze(-1), tt)", [f.what for f in fixes]
    ns = {"tcrit": __import__("torch").nn.MSELoss(), "tp": __import__("torch").arange(4.0).view(4, 1),
          "tt": __import__("torch").zeros(4)}
    exec(line[0].code, ns)  # noqa: S102 - the printed code, as printed
    assert float(ns["tl"]) == (0 + 1 + 4 + 9) / 4


def test_log_softmax_of_the_users_logits_outside_any_block_gets_no_training_technique(ip):
    """The request is log_softmax of a (4, 2**40) logits tensor the line is given; the graphs hold a
    few KiB saved for backward: neither checkpointing nor autocast can free the bytes missing."""
    run(ip, "tlm = torch.nn.Linear(8, 8)\ntids = torch.randn(4, 8)")
    oom, _ = measured_oom(ip, "tlogits = tlm(tids).sum(-1, keepdim=True).expand(4, 2**40)\n"
                              "tlogp = tlogits.log_softmax(-1)\ntlogp.mean().backward()")
    assert oom.state.requested == 4 * 2**40 * 4
    whats = [f.what for f in _fixes_under_a_limit(oom)]
    assert not any(w.startswith(("bf16 autocast around", "recompute activations")) for w in whats), whats
    assert not any(w.startswith("each technique's saving") for w in whats), whats  # nothing left to compare
    assert any(w.startswith("bf16 autocast and recomputing activations (checkpointing) cannot close this gap: the "
                            "request of 16.0 TiB is 16.0 TiB more than the room left; the failing code holds ")
               for w in whats), whats


def test_checkpointing_stays_where_the_saved_activations_could_close_the_gap(ip):
    """The same failure with a room that the saved activations exceed: both techniques are offered."""
    run(ip, "import torch.nn as nn\ntorch.manual_seed(0)\n"
            "tdeep = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(4)])\n"
            "tin = torch.randn(2048, 512)")
    oom, _ = measured_oom(ip, "th = tdeep(tin)\ntbig = th.sum(-1, keepdim=True).expand(2048, 2**36).exp()\n"
                              "tbig.mean().backward()")
    saved = oom.state.frames_graph
    assert saved == 3 * 2048 * 512 * 4  # each block's ReLU result but the last's (th's own)
    s = dataclasses.replace(oom.state, cap=2**60, cap_room=oom.state.requested - saved // 2, cap_name="RLIMIT_AS",
                            available=2**60)
    whats = [f.what for f in verdict(s).fixes]
    assert "recompute activations in backward" in whats and "bf16 autocast around the forward and the loss" in whats
    assert not any("cannot close this gap" in w for w in whats), whats


def test_multihead_attention_with_its_default_need_weights_gets_need_weights_false(ip):
    run(ip, "import torch.nn as nn\ntorch.manual_seed(0)\ntattn = nn.MultiheadAttention(8, 2, batch_first=True)\n"
            "tq = torch.zeros(1, 1, 8).expand(2, 2**22, 8)")
    oom, _ = measured_oom(ip, "tout, _ = tattn(tq, tq, tq)\ntout.sum().backward()")
    fixes = _fixes_under_a_limit(oom)
    line = [f for f in fixes if "need_weights" in f.what]
    assert len(line) == 1, [f.what for f in fixes]
    assert line[0].what.startswith("tattn is an nn.MultiheadAttention called with need_weights=True (the default): "
                                   "PyTorch then materialises the attention weights, (4, 4194304, 4194304) float32 "
                                   "(256.0 TiB) for each of the scores and their softmax")
    assert line[0].code == "tout, _ = tattn(tq, tq, tq, need_weights=False)"


def test_need_weights_given_false_or_by_a_name_is_not_advised(ip):
    run(ip, "import torch.nn as nn\ntattn2 = nn.MultiheadAttention(8, 2)\ntq2 = torch.zeros(1, 1, 8).expand(2**22, 2, 8)"
            "\ntwant = True")
    oom, _ = measured_oom(ip, "tout2, tw2 = tattn2(tq2, tq2, tq2, need_weights=twant)")
    assert not any("need_weights" in f.what for f in _fixes_under_a_limit(oom))
