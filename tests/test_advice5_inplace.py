"""An out-of-memory error at ``res = g * w`` (``torch.mul``, a product einsum) whose request is a
new tensor of ``g``'s size: the line offers computing it in place into ``g`` (where ``g`` is not
needed afterwards), only where that is possible: the result has ``g``'s shape and dtype, ``g``
needs no gradient, and the line binds another name than ``g``. The printed code gives the same
values (CPU)."""

from __future__ import annotations

import linecache
import types

import torch

from vramnb.diagnose._transient import transient_copy


def _frame(line: str, **values):  # type: ignore[no-untyped-def]
    """A module-level frame stand-in whose current line is ``line`` (registered as a notebook cell)."""
    name = f"<advice5-cell-{abs(hash(line))}>"
    linecache.cache[name] = (len(line), None, [line + "\n"], name)
    code = types.SimpleNamespace(co_filename=name, co_name="<module>")
    return types.SimpleNamespace(f_code=code, f_lineno=1, f_globals=dict(values), f_back=None)


def test_a_product_einsum_and_a_product_offer_the_in_place_form_and_it_computes_the_same():
    torch.manual_seed(0)
    g, w = torch.rand(4, 3, 16, 16), torch.rand(16, 16)
    nbytes = g.numel() * 4
    line = "res = torch.einsum('ijkl,kl->ijkl', [g, w])"
    got = transient_copy(_frame(line, g=g, w=w), nbytes)
    assert got is not None and "(this einsum is g * w, broadcast)" in got[0] and "as large as g" in got[0]
    assert got[1] == "g.mul_(w)  # in place: g now holds the result\nres = g"
    expect = torch.einsum("ijkl,kl->ijkl", [g, w])
    ns = {"g": g.clone(), "w": w}
    exec(got[1], ns)
    assert torch.equal(ns["res"], expect)
    for line, method in (("res = g * w", "mul_"), ("res = torch.add(g, w)", "add_"), ("res = g / 2", "div_")):
        got = transient_copy(_frame(line, g=g, w=w), nbytes)
        assert got is not None and got[1].startswith(f"g.{method}("), line


def test_no_in_place_line_where_it_would_be_wrong():
    g, w = torch.rand(64, 1024), torch.rand(1024)
    nbytes = g.numel() * 4
    assert transient_copy(_frame("res = g * w", g=g, w=w.double()), nbytes) is None  # the result is float64
    assert transient_copy(_frame("res = g * w", g=g.requires_grad_(), w=w), nbytes) is None  # g needs a gradient
    g = g.detach()
    assert transient_copy(_frame("res = g * w", g=g, w=torch.rand(3, 64, 1024)), 3 * nbytes) is None  # larger result
    assert transient_copy(_frame("g = g * w", g=g, w=w), nbytes) is None  # g rebound: not this shape
    assert transient_copy(_frame("res = g * w", g=g, w=w), 2 * nbytes) is None  # another request
    assert transient_copy(_frame("res = torch.einsum('ij,jk->ik', g, w2)", g=g, w2=torch.rand(1024, 1024)), nbytes) is None
