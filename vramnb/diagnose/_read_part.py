"""Only part of the failing line's result is read: compute that part alone.

A generation step keeps ``logits[:, -1, :]`` of ``logits = lm_head(hidden)``; an RL step reads
``logps[:, prompt_length - 1:]`` of the log-probabilities of every position. Where every later read
of the name the failing statement binds (in the cell's own source) is one and the same index, the
rest of the result is made and never read. The sentence gives the part read, its shape, and the
share of the result it is, from the shapes on ``meta`` tensors (nothing of the user's runs).

Where the result comes from a position-wise operation that leaves the indexed dimensions alone
(``nn.Linear`` acts on the last dimension only; ``log_softmax``/``softmax`` along the last one),
the index moves onto its input as code that keeps every later line valid: ``-1`` becomes ``-1:``
and ``-k:`` stays (taking them again after is the same); other indices get the sentence only.
A model whose ``forward`` takes ``logits_to_keep`` (Hugging Face's causal LMs) or
``num_logits_to_keep`` is named where the result derives from its output: it makes the logits of
the last positions only.
"""

from __future__ import annotations

import ast
import inspect
from typing import TYPE_CHECKING, Any

import torch

from .._units import format_bytes
from ._call_parts import _parents, _shape

if TYPE_CHECKING:
    from ._op_call import CallSite

__all__ = ["read_part"]

#: tensor methods that act along one dimension and position by position along the others
_ALONG = {"log_softmax", "softmax"}


def _index_key(node: ast.expr) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _assigned(site: CallSite) -> tuple[str, ast.expr] | None:
    """``(name, value)`` of the failing statement ``name = value`` where the failing call lies in ``value``."""
    s = site.stmt
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id, s.value
    return None


def _reads(site: CallSite, name: str) -> list[ast.Subscript] | None:
    """The later reads of ``name`` in the failing code's source, where every one is ``name[index]``
    with one and the same index (and at least one); else ``None``."""
    line = site.stmt.end_lineno if site.stmt is not None else getattr(site.node, "lineno", 0)
    parents = _parents(site.tree)
    reads: list[ast.Subscript] = []
    for n in ast.walk(site.tree):
        if not isinstance(n, ast.Name) or n.id != name or (n.lineno or 0) <= (line or 0):
            continue
        if not isinstance(n.ctx, ast.Load):
            return None  # bound again: what is read after may be another value
        p = parents.get(id(n))
        if not isinstance(p, ast.Subscript) or p.value is not n:
            return None  # read whole somewhere
        reads.append(p)
    if not reads or len({_index_key(r.slice) for r in reads}) != 1:
        return None
    return reads


def _meta_value(site: CallSite, node: ast.expr, bind: dict[str, Any] | None = None) -> Any:
    """``node``'s value on ``meta`` tensors (names in ``bind`` read from it); an ``nn.Linear`` held by a
    name and called on one tensor gives its output's shape (the input's, the last dim ``out_features``)
    without running the module."""
    from ._line_copies import _Eval

    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        mod = site.value(node.func)
        if isinstance(mod, torch.nn.Linear):
            x = _meta_value(site, node.args[0], bind)
            if isinstance(x, torch.Tensor) and x.shape[-1:] == (mod.in_features,):
                return torch.empty((*x.shape[:-1], mod.out_features), dtype=mod.weight.dtype, device="meta")
            return None

    class _Bound(_Eval):
        def lookup(self, name: str) -> Any:
            if bind and name in bind:
                return bind[name]
            return super().lookup(name)

    with torch.device("meta"):
        return _Bound(site.frame).ev(node)


def _suffix_index(index: ast.expr, dims: int) -> str | None:
    """The index that keeps every dimension (``-1`` as ``-1:``) where taking ``index`` again after it
    gives the same part: only whole dims, ``-1`` and ``-k:`` slices; else ``None``."""
    parts = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    out = []
    for p in parts:
        if isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None:
            out.append(":")
        elif isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.USub) and isinstance(p.operand, ast.Constant) \
                and p.operand.value == 1:
            out.append("-1:")
        elif isinstance(p, ast.Slice) and p.upper is None and p.step is None and isinstance(p.lower, ast.UnaryOp) \
                and isinstance(p.lower.op, ast.USub) and isinstance(p.lower.operand, ast.Constant):
            out.append(ast.unparse(p))
        else:
            return None
    if len(out) > dims:
        return None
    while out and out[-1] == ":":
        out.pop()
    return ", ".join(out) if out else None


def _moved(site: CallSite, value: ast.expr, index: ast.expr, dims: int) -> str | None:
    """``value`` with ``index`` moved onto the input of its position-wise call, as source; else ``None``."""
    keep = _suffix_index(index, dims)
    if keep is None or not isinstance(value, ast.Call):
        return None
    parts = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    last_whole = len(parts) < dims or (isinstance(parts[-1], ast.Slice) and parts[-1].lower is None
                                       and parts[-1].upper is None)
    if not last_whole:
        return None  # the index takes part of the dimension the operation works along
    f = value.func
    mod = site.value(f) if not isinstance(f, ast.Attribute) or f.attr not in _ALONG else None
    if isinstance(mod, torch.nn.Linear) and len(value.args) == 1 and not value.keywords:
        arg = value.args[0]
        return f"{ast.unparse(f)}({ast.unparse(arg)}[{keep}])"
    if isinstance(f, ast.Attribute) and f.attr in _ALONG:
        d = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "dim"), None)
        if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub) and isinstance(d.operand, ast.Constant) \
                and d.operand.value == 1:
            return f"{ast.unparse(f.value)}[{keep}].{f.attr}({', '.join(ast.unparse(a) for a in value.args)})"
    return None


def _root_model(site: CallSite, value: ast.expr) -> tuple[str, str] | None:
    """``(model's name, its parameter)`` where ``value`` derives from a tensor a statement before
    bound from a call of a module whose ``forward`` takes ``logits_to_keep``/``num_logits_to_keep``."""
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    line = site.stmt.lineno if site.stmt is not None else 0
    for s in ast.walk(site.tree):
        if not isinstance(s, ast.Assign) or (s.end_lineno or 0) >= line or len(s.targets) != 1:
            continue
        t = s.targets[0]
        if not isinstance(t, ast.Name) or t.id not in names:
            continue
        for c in ast.walk(s.value):
            if not isinstance(c, ast.Call) or not isinstance(c.func, ast.Name):
                continue
            mod = site.value(c.func)
            if not isinstance(mod, torch.nn.Module):
                continue
            try:
                params = inspect.signature(type(mod).forward).parameters
            except (TypeError, ValueError):
                continue
            for p in ("logits_to_keep", "num_logits_to_keep"):
                if p in params:
                    return c.func.id, p
    return None


def _share(part: int, whole: int) -> str:
    """What share of ``whole`` elements ``part`` is: ``12.5 %``, or ``1/2,048`` below one per cent."""
    pct = 100 * part / whole
    return f"{pct:.3g} %" if pct >= 1 else f"1/{whole / max(part, 1):,.0f}"


def _same_line(site: CallSite, requested: int, result: tuple[tuple[int, ...], torch.dtype] | None,
               ) -> tuple[str, str] | None:
    """The sentence where the failing call's result is indexed on its own line (``np.corrcoef(a, b)[0, 1:]``)."""
    p = _parents(site.tree).get(id(site.node))
    if not isinstance(p, ast.Subscript) or p.value is not site.node:
        return None
    try:
        whole = _meta_value(site, site.node)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a call not evaluated on meta tensors (NumPy's): the shape given, if any
        whole = None
    given = not isinstance(whole, torch.Tensor)
    if given:
        if result is None:
            return None
        whole = torch.empty(result[0], dtype=result[1], device="meta")
    part = _meta_value(site, ast.Subscript(value=ast.Name("_whole_", ast.Load()), slice=p.slice, ctx=ast.Load()),
                       {"_whole_": whole})
    if not isinstance(part, torch.Tensor) or part.numel() * 2 > whole.numel():
        return None
    share = _share(part.numel(), whole.numel())
    each = whole.element_size()
    idx = ", ".join(ast.unparse(e) for e in p.slice.elts) if isinstance(p.slice, ast.Tuple) else ast.unparse(p.slice)
    sizes = f"{share} of it: {format_bytes(part.numel() * each)} of {format_bytes(whole.numel() * each)}"
    if given:  # the shape of the array that could not be made, taken to be the result's
        return (f"only `[{idx}]` of `{site.text}`'s result is read: {_shape(part.shape)} of {_shape(whole.shape)} "
                f"where the result is the {_shape(whole.shape)} {str(whole.dtype).replace('torch.', '')} array that "
                f"could not be made ({sizes}): compute that part directly instead of the whole result"), ""
    return (f"only `[{idx}]` {_shape(part.shape)} of `{site.text}`'s {_shape(whole.shape)} result is read ({sizes}): "
            "compute that part directly instead of the whole result"), ""


def read_part(site: CallSite, requested: int,
              result: tuple[tuple[int, ...], torch.dtype] | None = None) -> tuple[str, str] | None:
    """``(sentence, code)`` where the failing call's result is indexed on its own line, or every later
    read of the name the failing statement binds takes one and the same index of it (``code`` empty
    where the index cannot move onto the inputs); else ``None``. ``result``: the call's result's
    ``(shape, dtype)`` where it cannot be computed on ``meta`` tensors (NumPy's, from its message)."""
    same = _same_line(site, requested, result)
    if same is not None:
        return same
    found = _assigned(site)
    if found is None:
        return None
    name, value = found
    reads = _reads(site, name)
    if reads is None:
        return None
    index = reads[0].slice
    whole = _meta_value(site, value)
    if not isinstance(whole, torch.Tensor) or whole.dim() == 0:
        return None
    part = _meta_value(site, reads[0], {name: whole})
    if not isinstance(part, torch.Tensor) or part.numel() * 2 > whole.numel():
        return None  # half of it or more is read: not worth a sentence
    each = whole.element_size()
    share = _share(part.numel(), whole.numel())
    text = ast.unparse(reads[0])
    sentence = (f"only `{text}` {_shape(part.shape)} of {name} {_shape(whole.shape)} is read after this line "
                f"({share} of it: {format_bytes(part.numel() * each)} of {format_bytes(whole.numel() * each)}); "
                f"the rest of it, and of the failing request ({format_bytes(requested)}) where it has the same "
                "positions, is made and never read: compute only that part")
    moved = _moved(site, value, index, whole.dim())
    model = _root_model(site, value)
    if model is not None:
        sentence += (f"; {model[0]}'s forward takes {model[1]}: {model[0]}(..., {model[1]}=N) makes the logits of the "
                     "last N positions only")
    if moved is None:
        return sentence, ""
    code = f"{name} = {moved}  # later reads of `{text}` stay as they are"
    return sentence + f" (`{moved}` takes that part of the input before the operation)", code
