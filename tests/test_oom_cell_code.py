"""Out-of-memory fixes written from the failing cell's own code (field categories: a loss summed
over parts before one backward, a container the loop adds to, a training cell with no
optimizer): every printed piece of code uses only names the cell or notebook has, and each
suggestion is checked to do what it says (the per-part backward gives the same gradients). CPU."""

from __future__ import annotations

import ast
import dataclasses

import torch

import vramnb
from tests.conftest import run
from vramnb.diagnose import verdict
from vramnb.diagnose._cell_code import stored_instead, summed_before_backward

MiB = 2**20
HUGE = "torch.empty(1 << 60, dtype=torch.uint8)"  # the CPU allocator refuses 1 EiB


def _fixes(ip, cell: str, **state) -> list[tuple[str, str]]:
    """The fixes for ``cell``'s failure, read from its real frames, with a request of 100 MiB, 300 MiB allocated, 60 MiB
    is free (the 1 EiB request that makes the CPU allocator fail is larger than any device: no fix but the shapes)."""
    res, _ = run(ip, "%%vram -d cpu\n" + cell)
    assert isinstance(res.error_in_exec, RuntimeError), res.error_in_exec
    state.setdefault("frames_graph", None)  # what the graphs saved is not scaled with the numbers set here: not read
    s = dataclasses.replace(vramnb.history()[-1].oom.state, requested=100 * MiB, allocated=300 * MiB,
                            available=60 * MiB, cap=None, cap_room=None, **state)
    return [(f.what, f.code) for f in verdict(s).fixes]


def test_a_loss_summed_over_parts_before_one_backward_gets_backward_per_part(ip):
    run(ip, "torch.manual_seed(0)\nnet = torch.nn.Linear(64, 64)\nchunks = [torch.randn(8, 64) for _ in range(4)]")
    fixes = _fixes(ip, "loss = 0\nfor c in chunks:\n    loss = loss + net(c).pow(2).mean()\n"
                       f"    if len(chunks) == 4 and c is chunks[-1]:\n        {HUGE}\nloss.backward()")
    stmt = "loss = loss + net(c).pow(2).mean()"
    fix = next(f for f in fixes if f[0].startswith(f"`{stmt}`"))
    assert fix == (f"`{stmt}` keeps every part's autograd graph (its activations) alive until the one "
                   "`loss.backward()`: call backward on each part as it is computed instead; the gradients accumulate "
                   "in .grad to the same sum, and each part's graph is freed at once (pass retain_graph=True where the "
                   "parts share a graph made before the loop)",
                   f"loss_part = net(c).pow(2).mean()  # in the loop, instead of `{stmt}`\nloss_part.backward()\n"
                   "loss += loss_part.item()  # and no loss.backward() after the loop")
    # no optimizer in the notebook: the compare code names none (it was `…, loss_fn, optimizer, …`)
    cmp = next(c for _, c in fixes if c.startswith("vramnb.compare("))
    assert cmp.startswith("vramnb.compare(net, batch, loss_fn, toggles=") and cmp.endswith("# batch and loss_fn: yours")
    # what the fix says is true: the per-part backward gives the summed loss's gradients, and the same total
    ns = ip.user_ns
    net, chunks = ns["net"], ns["chunks"]
    net.zero_grad(set_to_none=True)
    whole = sum(net(c).pow(2).mean() for c in chunks)
    whole.backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    loss = 0.0
    for c in chunks:
        exec(fix[1], {"net": net, "c": c, "loss": loss} | {"__builtins__": __builtins__}, scope := {"loss": loss})
        loss = scope["loss"]
    assert all(torch.allclose(p.grad, w, atol=1e-6) for p, w in zip(net.parameters(), want))
    assert abs(loss - whole.item()) < 1e-4


def test_no_per_part_backward_where_the_total_is_scaled_or_backpropagated_inside_the_loop():
    assert summed_before_backward("loss = 0\nfor p in ps:\n    loss = loss + f(p)\nloss = loss / len(ps)\n"
                                  "loss.backward()") is None
    assert summed_before_backward("total = 0\nfor p in ps:\n    total += f(p)\n    total.backward(retain_graph=True)"
                                  ) is None
    assert summed_before_backward("total = 0\nfor p in ps:\n    total += f(p)\nprint(total)") is None
    # other shapes of the same mistake: `+=`, a while loop, the part first
    assert summed_before_backward("t = 0\ni = 0\nwhile i < 3:\n    t += crit(m(x[i]), y[i])\n    i += 1\nt.backward()"
                                  ) == ("t", "t += crit(m(x[i]), y[i])", "crit(m(x[i]), y[i])", "t += {part}.item()")
    assert summed_before_backward("l = 0\nfor b in bs:\n    l = m(b).sum() + l\nl.backward()") == (
        "l", "l = m(b).sum() + l", "m(b).sum()", "l += {part}.item()")
    # the parts kept in a list and summed after the loop, with sum() or torch.stack(...).sum()
    assert summed_before_backward("ls = []\nfor p in ps:\n    ls.append(m(p).mean())\nloss = sum(ls)\nloss.backward()"
                                  ) == ("loss", "ls.append(m(p).mean())", "m(p).mean()", "ls.append({part}.item())")
    assert summed_before_backward("ls = []\nfor p in ps:\n    ls.append(m(p).mean())\ntorch.stack(ls).sum().backward()"
                                  )[0] == "torch.stack(ls).sum()"
    # a mean (or any scaling) of the parts: per-part gradients would differ by the scale, no fix offered
    assert summed_before_backward("ls = []\nfor p in ps:\n    ls.append(m(p).mean())\n"
                                  "loss = sum(ls) / len(ls)\nloss.backward()") is None
    assert summed_before_backward("ls = []\nfor p in ps:\n    ls.append(m(p).mean())\nloss = sum(ls)\n"
                                  "loss = loss / 2\nloss.backward()") is None


def test_a_container_the_failing_loop_adds_to_gets_the_cells_own_expression(ip):
    """Never the generic ``loss.item()`` of a cell that has no ``loss``: the cell's own statement,
    with ``.detach()`` for outputs that keep a graph and ``.item()`` for a scalar."""
    run(ip, "lin = torch.nn.Linear(64, 256)\npreds = []\nscores = {'mse': 0}")
    fixes = _fixes(ip, "for i in range(6):\n    xb = torch.randn(32, 64)\n    preds.append(lin(xb))\n"
                       "    scores['mse'] += lin(xb).pow(2).mean() * 2\n    if i == 5:\n        " + HUGE,
                   holders=[("preds", 200 * MiB, 200 * MiB, "list"), ("scores", 60 * MiB, 60 * MiB, "dict")])
    text = " ".join(w for w, _ in fixes)
    assert "loss" not in text, text
    assert ("keep less in it (`preds.append(lin(xb).detach())`: the tensor without its autograd graph), or empty it"
            in text), text
    assert ("keep less in it (`scores['mse'] += (lin(xb).pow(2).mean() * 2).item()`: a number, not a tensor with its "
            "autograd graph), or empty it") in text, text
    # each printed statement parses and uses only names the cell binds or the notebook has
    for what in (w for w, _ in fixes if "keep less in it" in w):
        stmt = what.split("(`", 1)[1].split("`:", 1)[0]
        used = {n.id for n in ast.walk(ast.parse(stmt)) if isinstance(n, ast.Name)}
        assert used <= set(ip.user_ns), used


def test_stored_instead_says_nothing_for_cpu_tensors_without_a_graph():
    """On the CPU a tensor without a graph has nothing lighter to store than itself (``.cpu()`` is
    no fix there): no example, the general sentence."""
    ns = {"outs": [torch.ones(4, 4)], "acc": [torch.ones(4, 4, requires_grad=True) * 2], "n": [torch.ones(())]}
    ns["cache"] = {3: torch.ones(2, 2, requires_grad=True) + 1}
    got = stored_instead("outs.append(f(x))\nacc.append(g(x) + 1)\nn.append(h(x))\nfor i in r:\n    cache[i] = f(i)", ns)
    assert got == {"acc": "`acc.append((g(x) + 1).detach())`: the tensor without its autograd graph",
                   "n": "`n.append(h(x).item())`: a number, not a tensor",
                   "cache": "`cache[i] = f(i).detach()`: the tensor without its autograd graph"}


def test_parts_kept_in_a_list_and_summed_after_the_loop_get_backward_per_part(ip):
    run(ip, "torch.manual_seed(1)\nenc = torch.nn.Linear(32, 32)\nbatches = [torch.randn(4, 32) for _ in range(3)]")
    fixes = _fixes(ip, "parts = []\nfor b in batches:\n    parts.append(enc(b).pow(2).mean())\n"
                       f"    if b is batches[-1]:\n        {HUGE}\nloss = sum(parts)\nloss.backward()")
    fix = next(f for f in fixes if f[0].startswith("`parts.append(enc(b).pow(2).mean())` keeps every part's"))
    assert fix[1] == ("loss_part = enc(b).pow(2).mean()  # in the loop, instead of `parts.append(enc(b).pow(2).mean())`"
                      "\nloss_part.backward()\nparts.append(loss_part.item())  # and no loss.backward() after the loop")
    enc, batches = ip.user_ns["enc"], ip.user_ns["batches"]
    enc.zero_grad(set_to_none=True)
    sum(enc(b).pow(2).mean() for b in batches).backward()
    want = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad(set_to_none=True)
    parts: list[float] = []
    for b in batches:
        exec(fix[1], {"enc": enc, "b": b, "parts": parts})
    assert all(torch.allclose(p.grad, w, atol=1e-6) for p, w in zip(enc.parameters(), want))
    assert len(parts) == 3 and all(isinstance(v, float) for v in parts)
