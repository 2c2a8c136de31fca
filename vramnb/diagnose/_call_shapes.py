"""Entries of :data:`vramnb.diagnose._call_table.TABLE` for calls whose result's *shape* is the waste.

* ``torch.diag(w) @ X`` / ``X @ torch.diag(w)``: a (n, n) matrix built to scale rows or columns;
* ``torch.linalg.svd(A)`` / ``torch.svd(A, some=False)`` / ``torch.linalg.qr(A, mode="complete")`` of a
  tall or wide matrix: the full orthogonal factors;
* ``a + b`` where the two operands' ranks differ and one size meets itself crosswise
  (``(N, 1)`` with ``(N,)`` gives ``(N, N)``), written without any explicit broadcast;
* ``F.interpolate`` of many channels whose result is reduced over them (``argmax(1)``);
* ``torch.stft`` of a whole signal.

Each entry reads the actual values (by name, or on ``meta`` copies), returns ``(sentence, code)`` with
byte counts computed from their shapes, or ``None`` where its evidence does not hold.
"""

from __future__ import annotations

import ast
import copy
import math
from typing import TYPE_CHECKING, Any

import torch

from .._units import format_bytes as fb
from ._call_parts import _dt, _parents, _plain, _replaced, _shape, _target, _uses, func_name

if TYPE_CHECKING:
    from ._op_call import CallSite, OpFacts

__all__ = ["ENTRIES", "MODULE_CALL", "rewrite"]

#: the table's key for a call of an ``nn.Module`` held by a name (its entries read the module's class)
MODULE_CALL = "<module call>"


def rewrite(stmt: ast.AST, changes: dict[int, str]) -> str:
    """``stmt``'s source with each node whose ``id`` is in ``changes`` written as its text."""
    pairs = list(ast.walk(stmt))
    out = copy.deepcopy(stmt)
    mapping = {id(a): b for a, b in zip(pairs, ast.walk(out), strict=True)}
    targets = {id(mapping[k]): ast.parse(v, mode="eval").body for k, v in changes.items() if k in mapping}

    class _R(ast.NodeTransformer):
        def visit(self, n: ast.AST) -> Any:
            return targets[id(n)] if id(n) in targets else self.generic_visit(n)

    return ast.unparse(_R().visit(out))


def _paren(node: ast.expr) -> str:
    s = ast.unparse(node)
    return s if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)) else f"({s})"


def _torch_call(node: ast.Call) -> bool:
    """``torch.x(...)`` / ``torch.linalg.x(...)``, not a method of a value."""
    f = node.func
    while isinstance(f, ast.Attribute):
        f = f.value
    return isinstance(f, ast.Name) and f.id in ("torch", "linalg", "F", "nn", "functional")


# -- torch.diag(w) multiplied ------------------------------------------------------------------------------------------
def _diag(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or len(node.args) != 1 or node.keywords or not _torch_call(node):
        return None  # an offset given, or a method: not read
    w = site.value(node.args[0])
    if not _plain(w) or w.dim() != 1:
        return None  # diag of a matrix reads its diagonal: no (n, n) matrix is built
    n = w.shape[0]
    parents = _parents(site.tree)
    p = parents.get(id(node))
    whole: ast.expr | None = None
    other: ast.expr | None = None
    left = True
    if isinstance(p, ast.BinOp) and isinstance(p.op, ast.MatMult):
        whole, left = p, p.left is node
        other = p.right if left else p.left
    elif isinstance(p, ast.Call) and func_name(p) in ("mm", "matmul") and _torch_call(p) and len(p.args) == 2:
        whole, left = p, p.args[0] is node
        other = p.args[1] if left else p.args[0]
    elif isinstance(p, ast.Attribute) and p.attr in ("mm", "matmul") and p.value is node:
        gp = parents.get(id(p))
        if isinstance(gp, ast.Call) and len(gp.args) == 1:
            whole, other = gp, gp.args[0]
    if whole is None or other is None:
        return None  # the matrix is not multiplied on this line: not said to be avoidable
    x = site.value(other)
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.is_sparse:
        return None
    if left and not (x.shape[0 if x.dim() == 1 else -2] == n) or not left and (x.dim() < 2 or x.shape[-1] != n):
        return None
    ws, xs = _paren(node.args[0]), _paren(other)
    new = (f"{ws} * {xs}" if x.dim() == 1 else f"{ws}[:, None] * {xs}") if left else f"{xs} * {ws}"
    dt = torch.promote_types(w.dtype, x.dtype)
    es_w = w.element_size()
    res = x.numel() * torch.empty((), dtype=dt).element_size()
    what = ("rows" if x.dim() > 1 else "elements") if left else "columns"
    sentence = (f"torch.diag({ast.unparse(node.args[0])}) builds a ({n}, {n}) {_dt(w)} matrix "
                f"({fb(n * n * es_w)}) whose only values from {ast.unparse(node.args[0])} are its {n:,} diagonal "
                f"elements (the rest are zeros), only to scale {ast.unparse(other)}'s {what}: `{new}` multiplies "
                f"each by its weight directly (broadcasting) and gives the same product without the matrix: its "
                f"result alone, {_shape(x.shape)} {str(dt).removeprefix('torch.')}, {fb(res)}")
    return sentence, _replaced(site, whole, new)


# -- a full SVD / QR of a tall or wide matrix ---------------------------------------------------------------------------
def _arg(site: CallSite, node: ast.Call, pos: int, kw: str, default: Any) -> Any:
    for k in node.keywords:
        if k.arg == kw:
            return site.value(k.value)
    return site.value(node.args[pos]) if len(node.args) > pos else default


def _without(node: ast.Call, pos: int, kw: str, value: str) -> str:
    new = copy.deepcopy(node)
    new.args = new.args[:pos]
    new.keywords = [k for k in new.keywords if k.arg != kw] + [ast.keyword(kw, ast.parse(value, mode="eval").body)]
    return ast.unparse(new)


def _factor(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    method = isinstance(f, ast.Attribute) and not _torch_call(node)
    linalg = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == "linalg"
    a_node = f.value if method and isinstance(f, ast.Attribute) else (node.args[0] if node.args else None)
    if a_node is None:
        return None
    off = 0 if method else 1  # a method's first argument is the option
    a = site.value(a_node)
    if not _plain(a) or a.dim() < 2 or a.layout != torch.strided:
        return None
    m, n = a.shape[-2], a.shape[-1]
    k, batch, es = min(m, n), math.prod(a.shape[:-2]), a.element_size()
    if m == n:
        return None  # square: the full factors are the reduced ones
    name = site.name if site.name in ("svd", "qr") else func_name(node)
    if name == "svd":
        if linalg:
            if _arg(site, node, off, "full_matrices", True) is not True:
                return None
            if _arg(site, node, 99, "driver", None) is not None:
                return None
            code = _without(node, off, "full_matrices", "False")
            how = "full_matrices=False"
        else:
            if _arg(site, node, off, "some", True) is not False or _arg(site, node, off + 1, "compute_uv", True) \
                    is not True:
                return None
            code = _without(node, off, "some", "True")
            how = "some=True"
        full = batch * (m * m + n * n) * es
        red = batch * (m * k + k * n) * es
        sentence = (f"`{site.text if site.node is node else ast.unparse(node)}` computes the full SVD of a "
                    f"({m}, {n}) matrix: U is ({m}, {m}) and {'Vh' if linalg else 'V'} ({n}, {n}), {fb(full)} "
                    f"together{f' for {batch:,} matrices' if batch > 1 else ''}; with {how} U is ({m}, {k}) and "
                    f"{'Vh' if linalg else 'V'} {'(%d, %d)' % (k, n) if linalg else '(%d, %d)' % (n, k)}, "
                    f"{fb(red)}, {fb(full - red)} less, with the same singular values and the {k} singular vectors "
                    f"of each side that go with them; the {max(m, n) - k} further vectors of the full form lie in the "
                    "orthogonal complement of A's "
                    f"{'column' if m > n else 'row'} space: keep it only where they are used")
    elif name == "qr":
        if linalg:
            if _arg(site, node, off, "mode", "reduced") != "complete":
                return None
            code, how = _without(node, off, "mode", "'reduced'"), "mode='reduced'"
        else:
            if _arg(site, node, off, "some", True) is not False:
                return None
            code, how = _without(node, off, "some", "True"), "some=True"
        if m < n:
            return None  # wide: Q is (m, m) in both modes
        full = batch * (m * m + m * n) * es
        red = batch * (m * k + k * n) * es
        sentence = (f"`{ast.unparse(node)}` computes the complete QR of a ({m}, {n}) matrix: Q is ({m}, {m}) and "
                    f"R ({m}, {n}), {fb(full)} together; with {how} Q is ({m}, {k}) and R ({k}, {n}), {fb(red)}, "
                    f"{fb(full - red)} less, still with A = Q R (the complete Q's further {m - k} columns lie in the "
                    "orthogonal complement of A's column space: keep it only where they are used)")
    else:
        return None
    return sentence, _replaced(site, node, code)


# -- an unintended broadcast -------------------------------------------------------------------------------------------
_EXPLICIT = frozenset({"unsqueeze", "view", "reshape", "expand", "expand_as", "view_as", "reshape_as", "T", "mT",
                       "t", "transpose", "permute", "movedim", "swapaxes", "outer", "broadcast_to", "flatten"})
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


def _explicit(node: ast.expr) -> bool:
    """Whether the operand's expression shapes it for broadcasting itself (``x[:, None]``, ``x.unsqueeze(1)``)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and any(isinstance(e, ast.Constant) and e.value is None for e in
                                                (n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice])):
            return True
        if isinstance(n, ast.Attribute) and n.attr in _EXPLICIT:
            return True
    return False


def _broadcast(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.BinOp) or type(node.op) not in _SYMBOL:
        return None
    a, b = site.value(node.left), site.value(node.right)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dim() == b.dim():
        return None  # the same rank: each operand's layout is as written (an outer sum of (N, 1) and (1, M))
    if _explicit(node.left) or _explicit(node.right):
        return None  # a None index, unsqueeze, view: shaped for this broadcast on purpose
    try:
        out = tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        return None
    r = len(out)
    ra = (1,) * (r - a.dim()) + tuple(a.shape)
    rb = (1,) * (r - b.dim()) + tuple(b.shape)
    cross = [(i, j) for i in range(r) for j in range(r) if i != j and ra[i] == rb[j] > 1 and rb[i] == 1 and ra[j] == 1]
    if not cross or math.prod(out) < 16 * max(a.numel(), b.numel()):
        return None  # no size that meets itself crosswise, or a result not much larger than its operands
    i, j = cross[0]
    big = math.prod(out) * torch.empty((), dtype=torch.promote_types(a.dtype, b.dtype)).element_size()
    ls, rs, sym = _paren(node.left), _paren(node.right), _SYMBOL[type(node.op)]
    sentence = (f"broadcasting aligns shapes from the right: {ast.unparse(node.left)} {_shape(a.shape)} {sym} "
                f"{ast.unparse(node.right)} {_shape(b.shape)} puts {ast.unparse(node.left)}'s dim "
                f"{i - (r - a.dim())} ({ra[i]}) and {ast.unparse(node.right)}'s dim {j - (r - b.dim())} ({rb[j]}) "
                f"on different axes of the result, {_shape(out)} ({fb(big)}): each of the {ra[i]} of one meets each of "
                f"the {rb[j]} of the other")
    if a.numel() != b.numel():
        return sentence + "; where they are meant to go element by element, give both operands the same shape", ""
    small = a.numel() * torch.empty((), dtype=torch.promote_types(a.dtype, b.dtype)).element_size()
    new = f"{ls} {sym} {rs}.reshape_as({ls})" if a.dim() > b.dim() else f"{ls}.reshape_as({rs}) {sym} {rs}"
    shape = a.shape if a.dim() > b.dim() else b.shape
    sentence += (f"; where {ast.unparse(node.left)}'s and {ast.unparse(node.right)}'s elements go together one by "
                 f"one, give both the same shape: `{new}` is {_shape(shape)}, {fb(small)}")
    return sentence, _replaced(site, node, new)


# -- a pointwise loss of an input and a target of different shapes ---------------------------------------------------------
#: the losses that compare input and target element by element after broadcasting them (torch.nn.functional's own
#: names; their nn.Module forms are read by class): PyTorch warns "Using a target size ... that is different to the
#: input size" for the first four
_POINTWISE_LOSSES = {"mse_loss": "MSELoss", "l1_loss": "L1Loss", "smooth_l1_loss": "SmoothL1Loss",
                     "huber_loss": "HuberLoss", "kl_div": "KLDivLoss", "poisson_nll_loss": "PoissonNLLLoss"}


def _loss_operands(site: CallSite, node: ast.Call) -> tuple[ast.expr, ast.expr] | None:
    """The input and target argument nodes of a pointwise loss call (``F.mse_loss(pred, y)``,
    ``criterion(pred, y)`` where ``criterion`` is an ``nn.MSELoss``), else ``None``."""
    name = func_name(node)
    if name not in _POINTWISE_LOSSES:
        mod = site.value(node.func)
        if type(mod).__name__ not in _POINTWISE_LOSSES.values() or not isinstance(mod, torch.nn.Module):
            return None
    kw = {k.arg: k.value for k in node.keywords}
    args = list(node.args[:2])
    if len(args) < 2:
        args += [kw[k] for k in ("input", "target")[len(args):] if k in kw]
    return (args[0], args[1]) if len(args) == 2 else None


def _loss_broadcast(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call):
        return None
    found = _loss_operands(site, node)
    if found is None:
        return None
    a_node, b_node = found
    a, b = site.value(a_node), site.value(b_node)
    if not _plain(a) or not _plain(b) or a.shape == b.shape:
        return None
    try:
        out = tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        return None
    if math.prod(out) < 16 * max(a.numel(), b.numel(), 1):
        return None  # a broadcast that does not multiply the work (a per-channel weight)
    each = math.prod(out) * torch.empty((), dtype=torch.promote_types(a.dtype, b.dtype)).element_size()
    x, y = ast.unparse(a_node), ast.unparse(b_node)
    sentence = (f"`{site.text}` compares {x} {_shape(a.shape)} with {y} {_shape(b.shape)} element by element after "
                f"broadcasting both to {_shape(out)} ({fb(each)} for each temporary of that shape): every one of one "
                "meets every one of the other, so the loss is also not the one meant (PyTorch warns: \"Using a target "
                "size ... that is different to the input size\")")
    if a.numel() != b.numel():
        return sentence + "; give the input and the target the same shape", ""
    small = a.numel() * torch.empty((), dtype=torch.promote_types(a.dtype, b.dtype)).element_size()
    ones = [i for i, n in enumerate(a.shape) if n == 1]
    squeezed = [n for i, n in enumerate(a.shape) if i != (ones[-1] if ones else -1)]
    if ones and tuple(squeezed) == tuple(b.shape):
        d = ones[-1] - a.dim()
        new, what = f"{_paren(a_node)}.squeeze({d})", a_node
    else:
        new, what = f"{_paren(b_node)}.reshape_as({_paren(a_node)})", b_node
    return (sentence + f"; give both the same shape: `{new}` makes them {_shape(a.shape if what is b_node else b.shape)}"
            f" ({fb(small)} per temporary)"), _replaced(site, what, new)


# -- torch.where with a tensor of zeros made for it -----------------------------------------------------------------------
_FILLS = {"zeros_like": "0", "ones_like": "1", "full_like": None, "zeros": "0", "ones": "1"}


def _where_fill(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``torch.where(mask, x, torch.zeros_like(x))``: a full tensor of one value made only to be chosen from, and a
    new result; ``x.masked_fill(~mask, 0)`` makes the result alone, ``masked_fill_`` nothing (in place)."""
    if not isinstance(node, ast.Call) or len(node.args) != 3:
        return None
    cond, a, b = node.args
    for keep, fill, negate in ((a, b, True), (b, a, False)):
        if not (isinstance(fill, ast.Call) and func_name(fill) in _FILLS):
            continue
        value = _FILLS[func_name(fill)]
        if value is None:  # full_like(x, v): its value
            if len(fill.args) < 2:
                continue
            value = ast.unparse(fill.args[1])
        x, m = site.value(keep), site.value(cond)
        if not _plain(x) or not _plain(m) or m.dtype != torch.bool:
            continue
        made = x.numel() * x.element_size()
        try:
            out = tuple(torch.broadcast_shapes(m.shape, x.shape))
        except RuntimeError:
            continue
        if out != tuple(x.shape):
            continue  # the mask widens the result: masked_fill keeps x's shape
        xs, ms = _paren(keep), _paren(cond)
        mask = f"~{ms}" if negate else ms
        new = f"{xs}.masked_fill({mask}, {value})"
        return (f"`{site.text}` makes a {_shape(x.shape)} {_dt(x)} tensor of {value}s ({fb(made)}) only to choose "
                f"from, then a new result of the same size: `{new}` makes the result alone, and "
                f"`{xs}.masked_fill_({mask}, {value})` changes {ast.unparse(keep)} in place (nothing new) where "
                f"{ast.unparse(keep)} is not needed as it was", _replaced(site, node, new))
    return None


# -- nn.MultiheadAttention returning its attention weights ---------------------------------------------------------------
def _attention_weights(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``attn(q, k, v)`` of an ``nn.MultiheadAttention`` with ``need_weights`` left True: PyTorch then takes the
    path that materialises the (batch × heads, target length, source length) attention weights (and averages
    them over heads to return them); with ``need_weights=False`` it calls ``scaled_dot_product_attention``,
    which need not (torch/nn/functional.py, ``multi_head_attention_forward``)."""
    if not isinstance(node, ast.Call):
        return None
    mod = site.value(node.func)
    if not isinstance(mod, torch.nn.MultiheadAttention):
        return None
    kw = {k.arg: k.value for k in node.keywords}
    need = kw.get("need_weights", node.args[4] if len(node.args) > 4 else None)
    if need is not None and not (isinstance(need, ast.Constant) and need.value is True):
        return None  # need_weights given: False, or a value the code chooses
    if len(node.args) < 2:
        return None
    q, k = site.value(node.args[0]), site.value(node.args[1])
    if not _plain(q) or not _plain(k) or q.dim() not in (2, 3):
        return None
    first = bool(getattr(mod, "batch_first", False))
    batch = 1 if q.dim() == 2 else q.shape[0 if first else 1]
    lq = q.shape[-2] if q.dim() == 2 else q.shape[1 if first else 0]
    lk = k.shape[-2] if k.dim() == 2 else k.shape[1 if first else 0]
    scores = (batch * mod.num_heads, lq, lk)
    nbytes = math.prod(scores) * q.element_size()
    if requested and nbytes < requested // 2:
        return None  # the request is not of the weights' size: something else failed
    name = ast.unparse(node.func)
    new = ast.unparse(node)[:-1] + ", need_weights=False)" if need is None else \
        ast.unparse(node).replace(ast.unparse(need), "False")
    return (f"{name} is an nn.MultiheadAttention called with need_weights=True (the default): PyTorch then "
            f"materialises the attention weights, {_shape(scores)} {_dt(q)} ({fb(nbytes)}) for each of the scores "
            "and their softmax, to return them; where the weights returned are not used, need_weights=False lets it "
            "call scaled_dot_product_attention (fused: no (L, S) matrix per head where a fused kernel applies)",
            _replaced(site, node, new))


def _embedding_bag(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``emb(bags).sum(1)`` (or ``.mean(1)``, ``torch.sum(emb(bags), 1)``) of an ``nn.Embedding``: the
    (B, L, D) embeddings are made whole before the reduction; ``F.embedding_bag`` sums or averages each bag
    without making them (pytorch#1803, ``nn.EmbeddingBag``)."""
    if not isinstance(node, ast.Call):
        return None
    mod = site.value(node.func)
    if type(mod) is not torch.nn.Embedding or len(node.args) != 1 or node.keywords:
        return None
    bags = site.value(node.args[0])
    if not _plain(bags) or bags.dim() != 2 or mod.padding_idx is not None or mod.max_norm is not None:
        return None  # (a padding index or max_norm: the bag function's own arguments, not read here)
    parents = _parents(site.tree)
    up = parents.get(id(node))
    mode, outer = None, None
    if isinstance(up, ast.Attribute) and up.attr in ("sum", "mean") and isinstance(parents.get(id(up)), ast.Call):
        call = parents[id(up)]
        assert isinstance(call, ast.Call)
        dims = [a for a in call.args] + [k.value for k in call.keywords if k.arg == "dim"]
        if len(dims) == 1 and isinstance(dims[0], ast.Constant) and dims[0].value in (1, -2) and \
                all(k.arg == "dim" for k in call.keywords):
            mode, outer = up.attr, call
    if mode is None or outer is None:
        return None
    made = bags.numel() * mod.embedding_dim * mod.weight.element_size()
    if requested and made < requested // 2:
        return None  # the request is not the embeddings' size
    code = f"torch.nn.functional.embedding_bag({ast.unparse(node.args[0])}, {ast.unparse(node.func)}.weight, mode={mode!r})"
    return (f"`{ast.unparse(outer)}` makes every embedding of every bag first, "
            f"{_shape((*bags.shape, mod.embedding_dim))} {_dt(mod.weight)} ({fb(made)}), only to {mode} them over the "
            f"bag; torch.nn.functional.embedding_bag (nn.EmbeddingBag) {mode}s each bag as it reads it, without that "
            f"tensor: the same {_shape((bags.shape[0], mod.embedding_dim))} result from the same weights "
            "(gradients reach them as before)", _replaced(site, outer, code))


def _diagonal_mvn(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``MultivariateNormal(mu, covariance_matrix=cov)`` where the code built ``cov = torch.diag_embed(var)``: a
    diagonal covariance, which the distribution factors (Cholesky) as a dense (..., d, d) matrix;
    ``Independent(Normal(mu, var.sqrt()), 1)`` is the same distribution, coordinate by coordinate (manify#52)."""
    if not isinstance(node, ast.Call):
        return None
    kw = {k.arg: k.value for k in node.keywords}
    cov_node = kw.get("covariance_matrix", node.args[1] if len(node.args) > 1 else None)
    mu_node = node.args[0] if node.args else kw.get("loc")
    if not isinstance(cov_node, ast.Name) or mu_node is None or "precision_matrix" in kw or "scale_tril" in kw:
        return None
    var_node, made_by = None, ""
    for st in ast.walk(site.tree):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                st.targets[0].id == cov_node.id and isinstance(st.value, ast.Call) and \
                func_name(st.value) in ("diag_embed", "diag") and len(st.value.args) == 1 and not st.value.keywords:
            var_node, made_by = st.value.args[0], func_name(st.value)
    cov, var, mu = site.value(cov_node), site.value(var_node) if var_node is not None else None, site.value(mu_node)
    if var_node is None or var is None or not _plain(cov) or not _plain(var) or not _plain(mu) or cov.dim() < 2 \
            or tuple(var.shape) != tuple(cov.shape[:-1]) or tuple(mu.shape[-1:]) != tuple(cov.shape[-1:]):
        return None
    d = cov.shape[-1]
    dense = cov.numel() * cov.element_size()
    v, m = ast.unparse(var_node), ast.unparse(mu_node)
    new = f"torch.distributions.Independent(torch.distributions.Normal({m}, {v}.sqrt()), 1)"
    return (f"`{cov_node.id}` is diagonal (`{ast.unparse(var_node)}` on the diagonal, made with {made_by}), yet "
            f"MultivariateNormal works on it as a dense {_shape(tuple(cov.shape))} matrix ({fb(dense)}, and its "
            f"Cholesky factor as large again); with a diagonal covariance the {d} coordinates are independent: "
            f"`{new}` is the same distribution (sample, rsample and log_prob), without any (d, d) matrix",
            _replaced(site, node, new))


def _repeated_batch(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``model(x.repeat(k, 1, ...))`` with gradients off: the model runs once on k stacked copies of the batch, so
    every activation inside it is k times as large; k passes over ``x`` (Monte Carlo dropout, test-time
    augmentation) can run one after another, keeping only their outputs (torch-uncertainty#49's review)."""
    if not isinstance(node, ast.Call) or len(node.args) != 1 or node.keywords or torch.is_grad_enabled():
        return None
    mod, arg = site.value(node.func), node.args[0]
    if not isinstance(mod, torch.nn.Module) or not isinstance(arg, ast.Call) or \
            not isinstance(arg.func, ast.Attribute) or arg.func.attr != "repeat" or not arg.args:
        return None
    x = site.value(arg.func.value)
    reps = [site.value(a) for a in arg.args]
    if not _plain(x) or len(reps) != x.dim() or not isinstance(reps[0], int) or reps[0] < 2 or any(r != 1 for r in reps[1:]):
        return None
    k, xs, m = ast.unparse(arg.args[0]), ast.unparse(arg.func.value), ast.unparse(node.func)
    new = f"torch.cat([{m}({xs}) for _ in range({k})])"
    return (f"`{ast.unparse(node)}` runs {m} once on {reps[0]} copies of {xs} stacked into one batch of "
            f"{reps[0] * x.shape[0]:,}, so every activation inside it is {reps[0]}× as large as for {xs}; with "
            f"gradients off the {reps[0]} passes can run one after another, each on {xs} alone, keeping only their "
            "outputs: the same outputs where the model treats the rows of a batch apart (no batch statistics; "
            "dropout draws a mask per row either way)", _replaced(site, node, new))


def _chain_module(*entries: Any) -> Any:
    """One entry of several for one key (a module's call; ``torch.tensor(array)`` and its dtype form), tried in
    order: the first that answers; one that cannot read its evidence (raises) gives none."""
    def first(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
        for e in entries:
            try:
                found = e(site, op, requested, node)
            except Exception:  # noqa: BLE001 - evidence unreadable: the next entry
                found = None
            if found is not None:
                return found
        return None

    return first


# -- interpolate of many channels, reduced over them after -----------------------------------------------------------------
def _reduced_over_channels(site: CallSite, node: ast.Call) -> tuple[str, ast.AST] | None:
    """``(name of the result of the reduction, its node)`` where the upsampled tensor is argmax-ed over dim 1."""
    parents = _parents(site.tree)

    def dim1(call: ast.Call, first: int) -> bool:
        args = call.args[first:]
        d = args[0] if args else next((k.value for k in call.keywords if k.arg == "dim"), None)
        return isinstance(d, ast.Constant) and d.value == 1

    cands: list[ast.AST] = [node]
    tgt = _target(site)
    if tgt is not None:
        cands += _uses(site, tgt)
    found = None
    for u in cands:
        p = parents.get(id(u))
        c = parents.get(id(p))
        if isinstance(p, ast.Attribute) and p.attr == "argmax" and p.value is u and isinstance(c, ast.Call) \
                and dim1(c, 0):
            found = found or ("pred", c)
        elif isinstance(p, ast.Call) and func_name(p) == "argmax" and p.args and p.args[0] is u and dim1(p, 1):
            found = found or ("pred", p)
        elif u is not node:
            return None  # the resized logits are used otherwise too: they are needed whole
    return found


def _interpolate(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    x = site.value(node.args[0])
    if not _plain(x) or x.dim() not in (3, 4, 5) or not x.is_floating_point():
        return None
    c = x.shape[1]
    outs = [o for o in (op.outputs or ()) if o[2] == requested] if op is not None and \
        op.packet.startswith("upsample") else []
    if not outs or len(outs[0][0]) != x.dim() or outs[0][0][1] != c or c < 2:
        return None  # the failing allocation is not the resized result
    shape = outs[0][0]
    es = requested // math.prod(shape)
    full = requested
    per = math.prod(shape) // c
    red = _reduced_over_channels(site, node)
    xs = ast.unparse(node.args[0])
    if red is None:
        if c < 8:
            return None
        return (f"F.interpolate resizes all {c} channels of {xs} to {_shape(shape)} ({fb(full)}): where the "
                f"result only feeds a reduction over the channels (an argmax for a label map), take it on "
                f"{c // 8 or 1} channels at a time and keep the running maximum (the largest tensor then "
                f"{fb(per * (c // 8 or 1) * es)})"), ""
    k = max(1, c // 8)
    chunk = copy.deepcopy(node)
    chunk.args[0] = ast.parse(f"{_paren(node.args[0])}[:, c0:c0 + {k}]", mode="eval").body
    reduce_stmt = next((s for s in ast.walk(site.tree) if isinstance(s, ast.Assign) and s.value is red[1]), None)
    name = reduce_stmt.targets[0].id if reduce_stmt is not None and isinstance(reduce_stmt.targets[0], ast.Name) \
        else red[0]
    code = (f"best = {name} = None\nfor c0 in range(0, {c}, {k}):  # {k} channels at a time: the same argmax\n"
            f"    v, i = {ast.unparse(chunk)}.max(1)\n"
            f"    if best is None:\n        best, {name} = v, i\n    else:\n"
            f"        better = v > best  # the first maximum wins, as in argmax\n"
            f"        best, {name} = torch.where(better, v, best), torch.where(better, i + c0, {name})")
    sentence = (f"F.interpolate resizes all {c} channels of {xs} to {_shape(shape)} ({fb(full)}), which the "
                f"argmax over dim 1 then reduces to one index per position ({fb(per * 8)} int64): each channel is "
                f"resized on its own, so {k} at a time with a running maximum gives the same argmax, the largest "
                f"tensor then {fb(per * k * es)}; or take the argmax at {xs}'s resolution and resize the label map "
                "with mode='nearest' (not the same labels near class boundaries)")
    return sentence, code


# -- the STFT of a whole signal ---------------------------------------------------------------------------------------------
def _stft(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or not node.args or not _torch_call(node):
        return None
    x = site.value(node.args[0])
    n_fft = _arg(site, node, 1, "n_fft", None)
    if not _plain(x) or x.dim() != 1 or x.is_complex() or not isinstance(n_fft, int):
        return None
    hop = _arg(site, node, 2, "hop_length", None) or n_fft // 4
    center = _arg(site, node, 99, "center", True)
    onesided = _arg(site, node, 99, "onesided", None)
    mode = _arg(site, node, 99, "pad_mode", "reflect")
    if not isinstance(hop, int) or center not in (True, False) or onesided is False or mode != "reflect":
        return None
    if any(k.arg in ("win_length", "normalized") for k in node.keywords) or len(node.args) > 2:
        return None
    length = x.shape[0] + (2 * (n_fft // 2) if center else 0)
    frames = 1 + (length - n_fft) // hop
    if frames < 64:
        return None
    bins = n_fft // 2 + 1
    ces = 2 * x.element_size()
    spec = frames * bins * ces
    per = -(-frames // 8)
    kws = [k for k in node.keywords if k.arg not in ("center", "n_fft", "hop_length")]
    rest = "".join(f", {k.arg}={ast.unparse(k.value)}" for k in kws)
    xs = _paren(node.args[0])
    pad = (f"sig = torch.nn.functional.pad({xs}[None], ({n_fft // 2}, {n_fft // 2}), mode='reflect')[0]"
           "  # the padding center=True adds\n") if center else f"sig = {xs}\n"
    code = (pad + f"specs = []\nfor t0 in range(0, {frames}, {per}):  # {per} frames at a time\n"
            f"    seg = sig[t0 * {hop}:(t0 + {per} - 1) * {hop} + {n_fft}]\n"
            f"    spec_k = torch.stft(seg, n_fft={n_fft}, hop_length={hop}{rest}, center=False)\n"
            "    specs.append(spec_k)  # derive this chunk's features here and keep only them\n"
            "spec = torch.cat(specs, -1)")
    windowed = f", and the windowed frames inside it {fb(frames * n_fft * x.element_size())}" if any(
        k.arg == "window" for k in node.keywords) else ""
    sentence = (f"torch.stft of all {x.shape[0]:,} samples of {ast.unparse(node.args[0])} makes {frames:,} frames "
                f"of {n_fft} samples (hop {hop}) at once: the spectrogram alone is {frames:,} × {bins} bins × {ces} B "
                f"= {fb(spec)} (complex){windowed}; "
                f"computed {per:,} frames at a time from the same padded signal, each chunk's spectrogram is "
                f"{fb(per * bins * ces)} and gives the same frames: derive the features per chunk and keep only them")
    return sentence, code


ENTRIES = {
    "diag": _diag, "diag_embed": _diag, "diagflat": _diag,
    "svd": _factor, "qr": _factor, "_linalg_svd": _factor, "linalg_qr": _factor,
    "Add": _broadcast, "Sub": _broadcast, "Mult": _broadcast, "Div": _broadcast, "FloorDiv": _broadcast,
    "Mod": _broadcast, "Pow": _broadcast,
    "interpolate": _interpolate,
    "stft": _stft,
    **dict.fromkeys(_POINTWISE_LOSSES, _loss_broadcast),
    "where": _where_fill,
    "MultivariateNormal": _diagonal_mvn,
    # a call of a module held by a name of the user's (``criterion(pred, y)``, ``attn(x, x, x)``): by its class
    MODULE_CALL: _loss_broadcast,
}
ENTRIES[MODULE_CALL] = _chain_module(_loss_broadcast, _attention_weights, _embedding_bag, _repeated_batch)
