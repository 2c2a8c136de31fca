"""A tensor a loop rebinds to a join of its old value (``preds = torch.cat([preds, logits])``):
its growth follows the samples seen, not the batch. The post-mortem names it with its bytes and
the fix (keep the parts in a list, join once; keep predictions, not whole outputs), and offers no
smaller batch. Only the cell's syntax tree and the bound tensor's size are read (CPU)."""

from __future__ import annotations

import ast

import torch

from tests.conftest import run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._growing import self_joins
from vramnb.diagnose._postmortem import failing_code
from vramnb._units import format_bytes

MiB = 2**20


def _caught(ip, cell):  # type: ignore[no-untyped-def]
    from vramnb._measure import _tb_frames

    res, _ = run(ip, cell)
    assert isinstance(res.error_in_exec, RuntimeError)
    return failing_code(_tb_frames(res.error_in_exec))


def _cpu_fixes(ctx, requested):  # type: ignore[no-untyped-def]
    s = OOMState("cpu", True, requested, 64 * MiB, cap=512 * MiB, available=8 << 30, cap_room=requested - 1,
                 cap_name="RLIMIT_AS", context=ctx)
    return verdict(s).fixes


def test_joins_are_found_anywhere_in_the_rebinding_expression():
    src = ("for i in range(3):\n"
           "    a = x if a is None else torch.cat((a, x), dim=0)\n"
           "    h = torch.stack([*h, y])\n"
           "    outs = outs + [y]\n"
           "    b = np.concatenate(arrays=(b, z))\n"
           "    acc = acc + x\n"  # same shape: no join
           "    c = torch.cat([d, x])\n")  # not its own old value
    got = self_joins(ast.parse(src))
    assert set(got) == {"a", "h", "outs", "b"}
    assert got["a"].part == "x" and got["a"].func == "torch.cat" and got["a"].keywords == "dim=0" and got["a"].tensor
    assert got["h"].func == "torch.stack" and got["h"].part == "y" and got["h"].starred and not got["a"].starred
    assert not got["outs"].tensor and got["b"].tensor
    assert self_joins(ast.parse("a = torch.cat([a, x])\n")) == {}  # not in a loop: one join, no growth


def test_an_evaluation_loop_growing_a_tensor_by_a_conditional_join_is_named_with_its_bytes(ip):
    run(ip, "gnet = torch.nn.Linear(8, 8)")
    cell = ("gpreds = None\nwith torch.no_grad():\n    for i in range(3):\n        glogits = gnet(torch.ones(16384, 8))\n"
            "        gpreds = glogits if gpreds is None else torch.cat((gpreds, glogits), dim=0)\n"
            "    raise RuntimeError('x')")
    ctx = _caught(ip, cell)
    held = 3 * 16384 * 8 * 4  # three steps of (16384, 8) float32: 1.5 MiB
    assert "gpreds" in ctx.grows and ctx.joins["gpreds"][1:] == (held, "cpu")
    ctx.forward = ("gnet", "its input", (16384, 8), (16384, 8))  # the evidence the batch line needs
    fixes = _cpu_fixes(ctx, held)
    texts = [f.what for f in fixes]
    assert not any(t.startswith("a smaller batch per evaluation step") for t in texts)
    line = [f for f in fixes if f.what.startswith("`gpreds = ")]
    assert line, texts
    assert f"gpreds holds {format_bytes(held)} now" in line[0].what and "old and the new gpreds" in line[0].what
    assert line[0].code == ("gpreds_parts = [] if gpreds is None else [gpreds]  # before the loop\n"
                            "gpreds_parts.append(glogits)  # in the loop, instead of `gpreds = glogits if gpreds is "
                            "None else torch.cat((gpreds, glogits), dim=0)`\n"
                            "gpreds = torch.cat(gpreds_parts, dim=0)  # once, after the loop")
    # the general line about what a loop keeps is not said twice
    assert not any(t.startswith("with gradients off nothing is kept") for t in texts)


def test_the_printed_join_code_gives_the_same_tensor(ip):
    """The code the line prints, run in place of the loop's join, gives the same tensor."""
    run(ip, "torch.manual_seed(0)\njnet = torch.nn.Linear(8, 8)\nxs = [torch.randn(4, 8) for _ in range(3)]")
    ctx = _caught(ip, "jpreds = None\nwith torch.no_grad():\n    for x in xs:\n        jlogits = jnet(x)\n"
                      "        jpreds = jlogits if jpreds is None else torch.cat((jpreds, jlogits), dim=0)\n"
                      "    raise RuntimeError('x')")
    code = [f.code for f in _cpu_fixes(ctx, 1) if f.what.startswith("`jpreds = ")]
    assert not code  # 384 B: under a MiB, no line (too small to be what runs out)
    ctx.joins["jpreds"] = (ctx.joins["jpreds"][0], 2 * MiB, "cpu")
    code = [f.code for f in _cpu_fixes(ctx, 2 * MiB) if f.what.startswith("`jpreds = ")][0].splitlines()
    body = code[1].split("  #")[0]
    run(ip, f"jpreds = None\n{code[0].split('  #')[0]}\nwith torch.no_grad():\n    for x in xs:\n        jlogits = jnet(x)\n"
            f"        {body}\n{code[2].split('  #')[0]}")
    assert torch.equal(ip.user_ns["jpreds"], torch.cat([ip.user_ns["jnet"](x) for x in ip.user_ns["xs"]]).detach())


def test_a_grad_on_join_detaches_and_a_loop_keeping_nothing_still_gets_a_smaller_batch(ip):
    run(ip, "knet = torch.nn.Linear(8, 8)\nkacc = torch.zeros(4, 8)")
    ctx = _caught(ip, "khist = torch.zeros(0, 4, 8)\nfor i in range(3):\n    kout = knet(torch.ones(4, 8))\n"
                      "    khist = torch.cat([khist, kout.unsqueeze(0)])\nraise RuntimeError('x')")
    assert ctx.grad and "khist" in ctx.joins
    ctx.joins["khist"] = (ctx.joins["khist"][0], 2 * MiB, "cpu")
    code = [f.code for f in _cpu_fixes(ctx, 2 * MiB) if f.what.startswith("`khist = ")][0]
    assert "khist_parts.append(kout.unsqueeze(0).detach())" in code
    # a running sum of the same shape is no join: nothing grows, the batch line stays
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        kacc = kacc + knet(torch.ones(4, 8))\n"
                      "    raise RuntimeError('x')")
    assert not ctx.joins and not ctx.grows
    ctx.forward = ("knet", "its input", (4, 8), (4, 8))  # the evidence the batch line needs (a failure in the forward)
    assert any(f.what.startswith("a smaller batch per evaluation step") for f in _cpu_fixes(ctx, MiB))


def test_the_printed_join_code_keeps_a_value_bound_before_the_loop(ip):
    """``preds = first`` before the loop, then ``preds = torch.cat([preds, out])`` in it: the printed
    list starts with that value, so the joined tensor is the same; a stack of unpacked rows gets no code."""
    run(ip, "torch.manual_seed(0)\nqnet = torch.nn.Linear(8, 8)\nqs = [torch.randn(4, 8) for _ in range(3)]")
    ctx = _caught(ip, "qpreds = qnet(qs[0])\nfor x in qs[1:]:\n    qpreds = torch.cat([qpreds, qnet(x)])\n"
                      "raise RuntimeError('x')")
    ctx.joins["qpreds"] = (ctx.joins["qpreds"][0], 2 * MiB, "cpu")
    code = [f.code for f in _cpu_fixes(ctx, 2 * MiB) if f.what.startswith("`qpreds = ")][0].splitlines()
    run(ip, f"qpreds = qnet(qs[0])\n{code[0].split('  #')[0]}\nfor x in qs[1:]:\n"
            f"    {code[1].split('  #')[0]}\n{code[2].split('  #')[0]}")
    expect = torch.cat([ip.user_ns["qnet"](x) for x in ip.user_ns["qs"]])
    assert torch.equal(ip.user_ns["qpreds"], expect)
    ctx = _caught(ip, "qh = []\nfor x in qs:\n    qh = torch.stack([*qh, qnet(x)])\nraise RuntimeError('x')")
    ctx.joins["qh"] = (ctx.joins["qh"][0], 2 * MiB, "cpu")
    line = [f for f in _cpu_fixes(ctx, 2 * MiB) if f.what.startswith("`qh = ")]
    assert line and line[0].code == ""


def test_a_cache_the_loop_computes_with_gets_no_collect_and_join_once_line(ip):
    """``k_cache = torch.cat([k_cache, k], dim=2)`` where the next pass's attention reads k_cache: the
    cache is not only collected, so "collect the parts in a list and join once after the loop" is no
    fix; the line is not printed (a loop that only collects still gets it)."""
    ctx = _caught(ip, "kc = torch.zeros(1, 2, 0, 8)\nq = torch.ones(1, 2, 1, 8)\nfor t in range(3):\n"
                      "    att = q @ kc.transpose(-1, -2) if t else None\n"
                      "    kc = torch.cat([kc, torch.ones(1, 2, 1, 8)], dim=2)\nraise RuntimeError('x')")
    assert ctx.joins["kc"][0].read
    ctx.joins["kc"] = (ctx.joins["kc"][0], 2 * MiB, "cpu")
    assert not any(f.what.startswith("`kc = ") for f in _cpu_fixes(ctx, 2 * MiB))
    got = self_joins(ast.parse("for i in range(2):\n    p = x if p is None else torch.cat((p, x))\n"))
    assert not got["p"].read  # read only inside its own statement


def test_an_is_none_test_is_no_read_of_a_collected_tensor():
    src = ("for t in range(3):\n    if kc is None:\n        kc, vc = k, v\n    else:\n"
           "        kc = torch.cat([kc, k], dim=2)\n        vc = torch.cat([vc, v], dim=2)\n")
    got = self_joins(ast.parse(src))
    assert not got["kc"].read and not got["vc"].read
    got = self_joins(ast.parse(src.replace("        vc = torch.cat", "        a = q @ kc\n        vc = torch.cat")))
    assert got["kc"].read and not got["vc"].read


def test_a_join_of_plain_tensors_is_not_offered_predictions(ip):
    """No model ran in the failing code (a cache of plain tensors): the line says nothing of
    predictions or argmax."""
    ctx = _caught(ip, "pc = None\nfor t in range(3):\n    k = torch.ones(1, 2, 1, 8)\n"
                      "    pc = k if pc is None else torch.cat([pc, k], dim=2)\nraise RuntimeError('x')")
    assert not ctx.trains
    ctx.joins["pc"] = (ctx.joins["pc"][0], 2 * MiB, "cpu")
    line = [f.what for f in _cpu_fixes(ctx, 2 * MiB) if f.what.startswith("`pc = ")]
    assert line and "argmax" not in line[0] and "predictions" not in line[0]
