"""The cheaper form of a library call that made a result or an intermediate far larger than its inputs.

One table, :data:`TABLE`, keyed by the public function's name as the line calls it (``einsum``,
``sort``, ``to_dense``, ``vmap``) and by the ATen operator that failed (``im2col``, ``sort``):
each entry reads the call's actual arguments (:class:`vramnb.diagnose._op_call.CallSite`) and the
failing operator (:class:`vramnb.diagnose._op_call.OpFacts`) and returns ``(sentence, code)`` with
the costs computed from those shapes, or ``None`` where the evidence does not support it (no
advice is printed then; the generic reading of :func:`vramnb.diagnose._op_call.call_reading`
still is). Nothing of the user's runs: values are read by name, expressions on ``meta`` tensors.
"""

from __future__ import annotations

import ast
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .._units import format_bytes
from ._call_shapes import MODULE_CALL, _chain_module
from ._call_parts import _call, _dt, _nb, _parents, _plain, _replaced, _shape, _target, _uses, func_name, held_bytes

if TYPE_CHECKING:
    from ._op_call import CallSite, OpFacts

__all__ = ["TABLE", "cheaper", "python_objects", "einsum_path", "held_bytes", "func_name"]

Entry = Callable[["CallSite", "OpFacts | None", int, Any], "tuple[str, str] | None"]


# -- einsum: the contraction order ------------------------------------------------------------------------------------
def einsum_path(equation: str, shapes: list[tuple[int, ...]]) -> list[tuple[int, int, str, tuple[int, ...]]] | None:
    """A pairwise contraction order for ``equation`` (no ellipsis), greedy: at each step the pair whose
    result (the indices still needed by another operand or the output) has the fewest elements.
    ``(i, j, "ab,bc->ac", result shape)`` per step, ``i``/``j`` indexing the list as it shrinks
    (results appended last); ``None`` where the equation cannot be read."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.split("->")
    ops = lhs.split(",")
    if len(ops) != len(shapes) or any(len(o) != len(s) for o, s in zip(ops, shapes, strict=True)):
        return None
    size: dict[str, int] = {}
    for o, s in zip(ops, shapes, strict=True):
        for c, d in zip(o, s, strict=True):
            if size.setdefault(c, d) != d and d != 1 and size[c] != 1:
                return None
            size[c] = max(size[c], d)
    steps = []
    cur = list(ops)
    while len(cur) > 1:
        best: tuple[int, int, int, str] | None = None
        for i in range(len(cur)):
            for j in range(i + 1, len(cur)):
                rest = "".join(c for k, o in enumerate(cur) if k not in (i, j) for c in o) + out
                keep = "".join(dict.fromkeys(c for c in cur[i] + cur[j] if c in rest))
                if len(cur) == 2:
                    keep = out
                n = math.prod(size[c] for c in keep)
                if best is None or n < best[0]:
                    best = (n, i, j, keep)
        assert best is not None
        _, i, j, keep = best
        steps.append((i, j, f"{cur[i]},{cur[j]}->{keep}", tuple(size[c] for c in keep)))
        cur = [o for k, o in enumerate(cur) if k not in (i, j)] + [keep]
    return steps


def _einsum(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if len(node.args) < 4 or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
        return None  # two operands: a single product (read by the generic reading); a list form: not read
    args = node.args[1:]
    vals = [site.value(a) for a in args]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    shapes = [tuple(v.shape) for v in vals]
    steps = einsum_path(node.args[0].value, shapes)
    if steps is None:
        return None
    es = max(v.element_size() for v in vals)
    largest = max(math.prod(s[3]) for s in steps) * es
    if largest * 4 > requested:
        return None  # no order found that is much cheaper than what failed
    from torch.backends import opt_einsum

    names = [ast.unparse(a) for a in args]
    lines, target = [], _target(site) or "out"
    for k, (i, j, eq, _) in enumerate(steps):
        res = target if k == len(steps) - 1 else f"t{k + 1}"
        lines.append(f'{res} = torch.einsum("{eq}", {names[i]}, {names[j]})')
        names = [n for m, n in enumerate(names) if m not in (i, j)] + [res]
    if not opt_einsum.is_available():
        how = ("torch.einsum contracts its operands left to right when the opt_einsum package is not installed "
               "(torch.backends.opt_einsum.is_available() is False here), keeping every index a later operand "
               "still needs")
        other = "; or `pip install opt-einsum`, and torch.einsum chooses a contraction order itself"
    elif not opt_einsum.enabled:
        how = "torch.einsum contracts its operands left to right: torch.backends.opt_einsum.enabled is False"
        other = "; or set torch.backends.opt_einsum.enabled = True"
    else:
        how, other = "the order torch.einsum used builds this intermediate", ""
    sentence = (f"{how}; contracted pairwise in the order below, its largest intermediate is "
                f"{format_bytes(largest)} instead of the {format_bytes(requested)} asked for{other}")
    return sentence, "\n".join(lines)


# -- a full sort where one value or the k largest are read -----------------------------------------------------------------


def _sort(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    x_node = node.args[0] if node.args else (node.func.value if isinstance(node.func, ast.Attribute) else None)
    x = site.value(x_node) if x_node is not None else None
    s = site.stmt
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not isinstance(s, ast.Assign) or s.value is not node:
        return None
    t = s.targets[0]
    values = t.elts[0] if isinstance(t, ast.Tuple) and t.elts else t if site.name != "argsort" else None
    if not isinstance(values, ast.Name):
        return None
    parents = _parents(site.tree)
    uses = _uses(site, values.id)
    subs = [parents.get(id(u)) for u in uses]
    if not uses or not all(isinstance(p, ast.Subscript) and p.value is u for p, u in zip(subs, uses, strict=True)):
        return None  # the sorted values are used whole somewhere: the sort may be needed
    n, es = x.numel(), x.element_size()
    kept = n * (es + 8)
    xs = ast.unparse(x_node) if x_node is not None else ""
    idx = [p.slice for p in subs if isinstance(p, ast.Subscript)]
    if all(not isinstance(i, ast.Slice) for i in idx) and len(idx) == 1:
        k = ast.unparse(idx[0])
        return (f"the sort's whole result (values and int64 indices: {n:,} × ({es} + 8) B = {format_bytes(kept)}) "
                f"serves to read one value, `{values.id}[{k}]`: torch.kthvalue returns that value alone (k counts "
                f"from 1); its working space, a copy of {xs} and int64 indices ({format_bytes(kept)}), is freed "
                "before it returns",
                f"{values.id}_k = torch.kthvalue({xs}, {k} + 1).values  # = {values.id}[{k}] (ascending)")
    # every read of the values (and of the indices, where the statement binds them too) is the same first k: topk
    names = [e for e in t.elts if isinstance(e, ast.Name)] if isinstance(t, ast.Tuple) else [values]
    reads = [(p, u) for nm in names for u in _uses(site, nm.id) for p in [parents.get(id(u))]]
    firsts = {ast.unparse(p.slice.upper) for p, u in reads if isinstance(p, ast.Subscript) and p.value is u
              and isinstance(p.slice, ast.Slice) and p.slice.lower is None and p.slice.step is None
              and p.slice.upper is not None}
    if len(firsts) != 1 or len(reads) != sum(1 for p, u in reads if isinstance(p, ast.Subscript) and p.value is u
                                             and isinstance(p.slice, ast.Slice)):
        return None
    k = firsts.pop()
    kv = site.value(ast.parse(k, mode="eval").body)
    if not isinstance(kv, int) or kv <= 0 or kv * 4 > n:
        return None
    desc = next((kw.value for kw in node.keywords if kw.arg == "descending"), None)
    largest = ast.unparse(desc) if desc is not None else "False"
    lhs = ", ".join(ast.unparse(e) for e in t.elts) if isinstance(t, ast.Tuple) else ast.unparse(t)
    new = f"{lhs} = {xs}.topk({k}, largest={largest})"
    return (f"the sort's whole result (values and int64 indices: {n:,} × ({es} + 8) B = {format_bytes(kept)}) serves "
            f"to read its first {kv:,} entries (`[:{k}]`): torch.topk returns those alone, sorted "
            f"({kv:,} × ({es} + 8) B); where a 1-d topk's own working space is still too large, topk of the rows of a "
            f"reshaped view, then topk of those", new + f"  # later reads of [:{k}] stay as they are")


# -- a sparse operand densified --------------------------------------------------------------------------------------------
def _to_dense(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if not isinstance(node.func, ast.Attribute):
        return None
    b = site.value(node.func.value)
    if not _plain(b) or b.layout != torch.sparse_coo:
        return None
    dense = b.numel() * b.element_size()
    held = _nb(b._indices()) + _nb(b._values())
    bs = ast.unparse(node.func.value)
    sentence = (f"`{bs}.to_dense()` writes every element of the sparse {bs} ({_shape(b.shape)} {_dt(b)}: "
                f"{format_bytes(dense)} dense, from {format_bytes(held)} of indices and values, "
                f"{b._nnz():,} non-zeros)")
    outer = _call(site)
    mm = site.name in ("mm", "matmul", "spmm", "addmm") and outer is not node and \
        any(a is node for a in outer.args)
    others = [site.value(a) for a in outer.args if a is not node] if mm else []
    if mm and others and all(_plain(o) and o.layout == torch.sparse_coo for o in others):
        a = ast.unparse(outer.args[0]) if outer.args[0] is not node else bs
        c = bs if outer.args[0] is not node else ast.unparse(outer.args[1])
        sentence += (f"; torch.sparse.mm multiplies two sparse COO matrices and returns a sparse result "
                     f"(its size follows its non-zeros): keep {bs} sparse")
        return sentence, _replaced(site, outer, f"torch.sparse.mm({a}, {c})")
    return sentence + "; keep it sparse where what follows accepts a sparse operand", ""


# -- vmap / jacrev over the whole batch -------------------------------------------------------------------------------------
def _vmap(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    inner = _call(site).func
    if not isinstance(inner, ast.Call) or inner is not node or not inner.args:
        return None
    kws = {k.arg: k.value for k in inner.keywords}
    if "chunk_size" in kws:
        return None
    dims_node = kws.get("in_dims", inner.args[1] if len(inner.args) > 1 else None)
    dims = site.value(dims_node) if dims_node is not None else 0
    args = [site.value(a) for a in _call(site).args]
    dims = dims if isinstance(dims, tuple) else (dims,) * len(args)
    if len(dims) != len(args):
        return None
    batch = next((a.shape[d] for a, d in zip(args, dims, strict=True) if isinstance(a, torch.Tensor)
                  and isinstance(d, int)), None)
    if not batch or batch < 2:
        return None
    f = ast.unparse(inner.args[0])
    chunk = max(1, batch // 8)
    sentence = (f"vmap runs `{f}` on all {batch} samples at once: every tensor inside it carries the batch "
                f"dimension of {batch}; vmap(..., chunk_size={chunk}) runs {chunk} at a time, so each of those "
                f"intermediates is {batch // chunk}x smaller")
    g = inner.args[0]
    if isinstance(g, ast.Call) and isinstance(g.func, (ast.Name, ast.Attribute)) and \
            (g.func.id if isinstance(g.func, ast.Name) else g.func.attr) == "grad" and args and dims[0] is None:
        seen: set[int] = set()
        p = args[0]
        items = list(dict.values(p)) if type(p) is dict else list(p) if type(p) in (list, tuple) else [p]
        pb = sum((held_bytes(t, seen) or ((), "", 0))[2] for t in items)
        if pb:
            sentence += (f"; the result itself, one gradient per sample, is {batch} × {format_bytes(pb)} = "
                         f"{format_bytes(batch * pb)}: where that does not fit either, loop over micro-batches "
                         "of the batch and reduce each one's per-sample gradients (a norm, a sum) before the next")
    code = _replaced(site, inner, ast.unparse(inner)[:-1] + f", chunk_size={chunk})")
    return sentence, code


def _jacrev(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    inner = _call(site).func
    if not isinstance(inner, ast.Call) or inner is not node or not inner.args or not _call(site).args:
        return None
    if any(k.arg in ("chunk_size", "argnums", "has_aux") for k in inner.keywords):
        return None
    w = site.value(_call(site).args[0])
    if not isinstance(w, torch.Tensor) or op is None:
        return None
    n_in = w.numel()
    # jacrev's basis: an identity of outputs x outputs, vmapped over; a square (m, m) operand of the failing op
    sq = [s for s, *_ in op.inputs if len(s) >= 2 and s[0] == s[1]] + \
        [s for s, *_ in (op.outputs or ()) if len(s) >= 2 and s[0] == s[1]]
    m = max((s[0] for s in sq), default=0)
    f = ast.unparse(inner.args[0])
    chunk = max(1, m // 8) if m else 0
    sentence = (f"jacrev computes one vector-Jacobian product per output element of `{f}`, all at once (vmap over "
                f"an identity basis of outputs × outputs)")
    if m > n_in:
        sentence += (f": here {m} outputs, so the failing operator works on ({m}, {m}) tensors; jacfwd computes one "
                     f"Jacobian-vector product per input element instead, and {ast.unparse(_call(site).args[0])} has "
                     f"{n_in}: ({n_in}, {m}) tensors; or jacrev(..., chunk_size={chunk}) computes {chunk} rows at a "
                     "time")
        code = _replaced(site, inner, ast.unparse(inner).replace("jacrev", "jacfwd", 1))
        return sentence, code
    return None


# -- torch.tensor(ndarray) ---------------------------------------------------------------------------------------------------
def _tensor(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if node is not site.node or len(node.args) != 1 or node.keywords:
        return None
    a = site.value(node.args[0])
    tp = type(a)
    if not (tp.__module__ == "numpy" and tp.__name__ == "ndarray"):
        return None
    name = ast.unparse(node.args[0])
    return (f"torch.tensor({name}) copies the NumPy array ({_shape(a.shape)} {a.dtype}, {format_bytes(int(a.nbytes))}) "
            f"into new memory; torch.from_numpy({name}) makes a tensor that shares the array's memory (0 B more; "
            f"writing one writes the other)",
            _replaced(site, node, f"torch.from_numpy({name})"))


# -- unfold (im2col) ---------------------------------------------------------------------------------------------------------
def _unfold(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if node is not site.node or not node.args:
        return None
    x = site.value(node.args[0])
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return None
    kws = {k.arg: site.value(k.value) for k in node.keywords}
    k = kws.get("kernel_size", site.value(node.args[1]) if len(node.args) > 1 else None)
    kh, kw = (k, k) if isinstance(k, int) else tuple(k) if isinstance(k, (tuple, list)) and len(k) == 2 else (0, 0)
    if not kh:
        return None
    sentence = (f"unfold copies every {kh}×{kw} patch of {ast.unparse(node.args[0])} {_shape(x.shape)} into its "
                f"own column: the result holds each element up to {kh * kw} times")
    target = _target(site)
    parents = _parents(site.tree)
    mm = [p for u in (_uses(site, target) if target is not None else []) if isinstance(p := parents.get(id(u)), ast.BinOp)
          and isinstance(p.op, ast.MatMult) and p.right is u]
    weight = None
    if mm:
        w = mm[0].left
        while isinstance(w, (ast.Call, ast.Attribute)):  # weight.view(64, -1) -> weight
            w = w.func if isinstance(w, ast.Call) else w.value
        weight = w.id if isinstance(w, ast.Name) else None
    if weight is not None:
        pad = kws.get("padding", 0)
        sentence += (f"; multiplying {weight} with these columns (`{ast.unparse(mm[0])[:50]}`) is a convolution: "
                     "F.conv2d computes it with its kernels and never writes the columns")
        return sentence, (f"out = torch.nn.functional.conv2d({ast.unparse(node.args[0])}, {weight}, padding={pad!r})"
                          f"  # {weight}: (out_channels, in_channels, {kh}, {kw})")
    return sentence, ""


# -- combinations / cartesian_prod --------------------------------------------------------------------------------------------
def _combinations(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if node is not site.node or not node.args:
        return None
    x = site.value(node.args[0])
    kws = {k.arg: site.value(k.value) for k in node.keywords}
    r = kws.get("r", site.value(node.args[1]) if len(node.args) > 1 else 2)
    repl = bool(kws.get("with_replacement", False))
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not isinstance(r, int) or r < 2:
        return None
    n, es = x.numel(), x.element_size()
    grid = n ** r
    kept = math.comb(n + r - 1, r) if repl else math.comb(n, r)
    xs = ast.unparse(node.args[0])
    sentence = (f"torch.combinations works on the whole {n}^{r} grid of index tuples ({grid:,} elements: a boolean "
                f"mask of {format_bytes(grid)}, and each of the {r} index grids, {format_bytes(grid * es)} in "
                f"{_dt(x)}, as it selects from it) to keep the {kept:,} combinations "
                f"({format_bytes(kept * r * es)}); build them in pieces, one first element at a time, each with "
                f"torch.combinations of the elements after it (r - 1 = {r - 1}): the largest grid is then "
                f"{n - 1}^{r - 1}")
    code = (f"parts = [torch.cat([{xs}[i].expand(len(rest), 1), rest], 1)\n"
            f"         for i in range(len({xs})) if len(rest := torch.combinations({xs}[i + 1:], r={r - 1})"
            f"{'.reshape(-1, 1)' if r == 2 else ''})]\n"
            f"{_target(site) or 'out'} = torch.cat(parts)")
    if repl:
        return sentence.split("; build")[0], ""
    return sentence, code


# -- one_hot ------------------------------------------------------------------------------------------------------------------
def _one_hot(site: CallSite, op: OpFacts | None, requested: int, node: ast.Call) -> tuple[str, str] | None:
    if not node.args:
        return None
    labels = site.value(node.args[0])
    c = site.value(node.args[1]) if len(node.args) > 1 else None
    if not isinstance(labels, torch.Tensor) or not isinstance(c, int) or c < 2:
        return None
    n = labels.numel()
    ls = ast.unparse(node.args[0])
    sentence = (f"F.one_hot({ls}, {ast.unparse(node.args[1])}) makes an int64 tensor of {ls}'s shape × {c} classes: "
                f"{n:,} × {c} × 8 B = {format_bytes(n * c * 8)} (each conversion of it, .float(), "
                f"{format_bytes(n * c * 4)} more), from {format_bytes(n * labels.element_size())} of class indices")
    src = "".join(__import__("linecache").getlines(site.frame.f_code.co_filename))
    logits = None
    for call in ast.walk(site.tree):
        if isinstance(call, ast.Call) and (getattr(call.func, "attr", None) or getattr(call.func, "id", None)) \
                == "log_softmax" and call.args and isinstance(call.args[0], ast.Name):
            logits = call.args[0].id
    if logits is not None and "log_softmax" in src:
        sentence += (f"; the loss built from it with log_softmax({logits}) is a cross-entropy: F.cross_entropy takes "
                     f"the class indices {ls} directly (the class dimension is dim 1) and never builds the one-hot "
                     "tensor")
        return sentence, f"loss = torch.nn.functional.cross_entropy({logits}, {ls})"
    return sentence, ""


#: the knowledge: each public function's name (as the line calls it) and ATen operator, and its entry
TABLE: dict[str, Entry] = {
    "einsum": _einsum,
    "sort": _sort, "argsort": _sort, "msort": _sort,
    "to_dense": _to_dense,
    "vmap": _vmap,
    "jacrev": _jacrev,
    "tensor": _tensor,
    "unfold": _unfold, "im2col": _unfold,
    "combinations": _combinations,
    "one_hot": _one_hot,
}


def cheaper(site: CallSite, op: OpFacts | None, requested: int) -> tuple[str, str] | None:
    """The table's ``(sentence, code)`` for the call running on the failing line (or a call inside its
    arguments: ``B.to_dense()`` in ``torch.sparse.mm(A, B.to_dense())``), else ``None``."""
    nodes: list[ast.AST] = [site.node]
    if isinstance(site.node, ast.Call) and isinstance(site.node.func, ast.Call):
        nodes.append(site.node.func)  # vmap(f)(x): the vmap call itself
    # calls inside its arguments and its receiver chain (`F.one_hot(labels, C).permute(...).float()`)
    nodes += [n for n in ast.walk(site.node) if isinstance(n, ast.Call) and n not in nodes]
    for n in nodes:
        name = func_name(n) if n is not site.node else site.name  # type: ignore[arg-type]
        entry = TABLE.get(name)
        if entry is None and isinstance(n, ast.Call) and isinstance(site.value(n.func), torch.nn.Module):
            entry = TABLE.get(MODULE_CALL)  # a module held by a name of the user's: read by its class
        if entry is not None:
            found = _run(entry, site, op, requested, n.func if n is site.node and isinstance(n, ast.Call)
                         and isinstance(n.func, ast.Call) else n)
            if found is not None:
                return found
    if op is not None and op.packet in TABLE and op.packet != site.name:
        found = _run(TABLE[op.packet], site, op, requested, site.node)
        if found is not None:
            return found
    from ._dense_grid import dense_grid
    from ._read_part import read_part  # no family of its own: is only part of what the line makes read?

    return (_run(lambda s, o, r, n: read_part(s, r), site, op, requested, site.node)
            or _run(lambda s, o, r, n: dense_grid(s), site, op, requested, site.node))


def _run(entry: Entry, site: CallSite, op: OpFacts | None, requested: int, node: Any) -> tuple[str, str] | None:
    """One entry's answer; an entry that cannot read what it needs gives none (the next entry is tried)."""
    try:
        return entry(site, op, requested, node)
    except Exception:  # noqa: BLE001 - an entry's evidence unreadable: no advice from it
        return None


# -- Python objects: .tolist() -------------------------------------------------------------------------------------------------
def python_objects(site: CallSite) -> str | None:
    """What ``x.tolist()`` of a tensor makes, from ``sys.getsizeof`` of the objects it makes (CPython's own
    sizes: a float object, an int object of the tensor's largest magnitude, a list's header and its 8-byte
    slots), and the ways round; ``None`` for another call."""
    calls = [n for n in ast.walk(site.node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "tolist" and not n.args]
    if not calls or not isinstance(calls[0].func, ast.Attribute):
        return None  # no .tolist() on the failing line (json.dumps(x.tolist()) has one inside)
    recv = calls[0].func.value
    t = site.value(recv)
    if not _plain(t) or t.layout != torch.strided or t.dim() == 0:
        return None
    serialised = site.name != "tolist"  # its objects handed on: to json.dumps, pickle, a file
    n = t.numel()
    if t.is_floating_point():
        each, kind = sys.getsizeof(0.0), "float"
    elif t.dtype == torch.bool:
        each, kind = 0, "bool"  # True and False are two shared objects
    elif t.is_complex():
        each, kind = sys.getsizeof(0j), "complex"
    else:
        each, kind = sys.getsizeof(2 ** 62 if t.element_size() == 8 else 2 ** 30), "int"
    dims = list(t.shape)
    lists = sum(math.prod(dims[:k]) for k in range(len(dims)))  # one list per row of every level
    slots = sum(math.prod(dims[:k + 1]) for k in range(len(dims)))
    empty = sys.getsizeof([])
    total = n * each + lists * empty + slots * 8
    x = ast.unparse(recv)
    objs = (f"{n:,} Python {kind} objects × {each} B (sys.getsizeof(0.0))" if kind == "float" else
            f"{n:,} Python int objects, up to {each} B each (sys.getsizeof of a {t.element_size() * 8}-bit int; "
            "-5..256 are shared)" if kind == "int" else f"{n:,} references to the two bool objects" if kind == "bool"
            else f"{n:,} Python complex objects × {each} B")
    line = (f"{x}.tolist() of a {_shape(t.shape)} {_dt(t)} tensor ({format_bytes(_nb(t))}) makes {objs} + {lists:,} "
            f"lists × {empty} B (sys.getsizeof([])) + {slots:,} list slots × 8 B = "
            f"{'up to ' if kind == 'int' else ''}{format_bytes(total)}, {total / max(_nb(t), 1):.1f}x the tensor "
            f"(CPython's object sizes, before the allocator's own overhead)")
    if serialised:
        from ._call_data import raw_bytes

        return line + f"; `{site.text}` then works on all of them: " + raw_bytes(t, x)
    if t.dim() >= 2:
        line += (f"; convert one row at a time where each row is used alone (`for i in range(len({x})): "
                 f"row = {x}[i].tolist()`: one row's objects at a time), or keep it a tensor, or use .numpy(), "
                 "which shares the tensor's memory (0 B more)")
    else:
        line += "; keep it a tensor, or use .numpy(), which shares the tensor's memory (0 B more)"
    return line


def _register() -> None:
    """The families kept in their own modules (:mod:`._call_shapes`, :mod:`._call_data`)."""
    from ._call_data import ENTRIES as data
    from ._call_shapes import ENTRIES as shapes

    for entries in (shapes, data):
        for k, v in entries.items():
            # two entries for one name (``torch.tensor(array)``, ``torch.tensor(array, dtype=...)``): the first that answers
            TABLE[k] = _chain_module(TABLE[k], v) if k in TABLE else v


_register()
