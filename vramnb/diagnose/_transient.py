"""Transient copies at the failing line of an out-of-memory error.

Three shapes of code ask for a whole tensor's bytes again for a moment:

* a copy before a slice: ``logits.clone().float()[:, -1, :]`` copies (and converts) the
  whole ``logits`` before keeping one position; slicing first copies only the slice;
* ``x = torch.cat([x, new])`` in a loop: cat allocates a new tensor and copies the old
  one into it, so old and new are alive together and every step copies the whole
  tensor again; a tensor allocated once at its final length and written in place
  needs neither;
* ``res = g * w`` (``torch.mul(g, w)``, an einsum that is such a product): the result is a new
  tensor as large as ``g`` while ``g`` stays alive; where ``g`` is not needed afterwards,
  ``g.mul_(w)`` computes it in place (only where the result has ``g``'s shape and dtype and
  ``g`` needs no gradient).

Read from the failing line's syntax tree (:mod:`ast`, :mod:`linecache`) and the sizes of
the tensors its names hold in the failing frame (read by name, no user code runs); a
sentence only where the request equals the bytes that shape of code asks for.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

import torch

from .._units import format_bytes

#: methods that return a new tensor of the same shape (a copy, or a conversion that copies)
_COPIES = frozenset({"clone", "float", "double", "half", "bfloat16", "to", "type", "contiguous", "cpu",
                     "cuda", "detach"})
_CATS = frozenset({"cat", "concat", "concatenate"})
_ROUND = 512  # the CUDA caching allocator rounds requests to 512 bytes


def _same(a: int, b: int) -> bool:
    return -(-a // _ROUND) == -(-b // _ROUND)


def _line(frame: Any) -> tuple[ast.AST, str] | None:
    code = frame.f_code
    text = linecache.getline(code.co_filename, frame.f_lineno).strip()
    if not text:
        return None
    try:
        return ast.parse(text), text
    except SyntaxError:
        return None


def _lookup(frame: Any, name: str) -> Any:
    from .._graph import frame_locals

    for n, v in frame_locals(frame) if frame.f_code.co_name != "<module>" else ():
        if n == name:
            return v
    g = frame.f_globals
    return dict.get(g, name) if type(g) is dict else None


def _tensor_bytes(t: torch.Tensor, itemsize: int | None = None) -> int:
    return t.numel() * (itemsize if itemsize is not None else t.element_size())


def transient_copy(frame: Any, requested: int | None) -> tuple[str, str] | None:
    """``(sentence, code)`` for the failing line of ``frame`` where ``requested`` bytes are a
    transient copy that code of another shape would not make, else ``None``."""
    if not requested:
        return None
    parsed = _line(frame)
    if parsed is None:
        return None
    tree, _ = parsed
    for node in ast.walk(tree):
        found = _cat(node, frame, requested) if isinstance(node, ast.Assign) else None
        if found is None and isinstance(node, ast.Assign):
            found = _out_of_place(node, frame, requested)
        if found is None and isinstance(node, ast.Subscript):
            found = _copy_then_slice(node, frame, requested)
        if found is not None:
            return found
    return None


def _in_loop(frame: Any, depth: int = 4) -> bool:
    """Whether the current line of ``frame`` or of one of its ``depth`` callers lies inside a
    ``for``/``while`` loop of its source (parsed whole from :mod:`linecache`); the walk stops
    at the first frame of IPython, torch or an installed package."""
    while frame is not None and depth > 0:
        name = frame.f_code.co_filename
        if "/site-packages/" in name or "/IPython/" in name or name.startswith("<frozen") or "/torch/" in name:
            return False  # past the notebook's own code (its caller is IPython's)
        try:
            tree = ast.parse("".join(linecache.getlines(frame.f_code.co_filename)))
        except (SyntaxError, ValueError):
            tree = None
        line = frame.f_lineno
        if tree is not None and any(isinstance(n, (ast.For, ast.While, ast.AsyncFor))
                                    and n.lineno <= line <= (n.end_lineno or n.lineno) for n in ast.walk(tree)):
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _cat(node: ast.Assign, frame: Any, requested: int) -> tuple[str, str] | None:
    """``x = torch.cat([x, new], dim)`` whose request is the new ``x``."""
    call = node.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _CATS
            and call.args and isinstance(call.args[0], (ast.List, ast.Tuple))):
        return None
    targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
    parts = call.args[0].elts
    grown = [p.id for p in parts if isinstance(p, ast.Name) and p.id in targets]
    if not grown or not all(isinstance(p, ast.Name) for p in parts):
        return None
    tensors = [_lookup(frame, p.id) for p in parts if isinstance(p, ast.Name)]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    new = sum(_tensor_bytes(t, tensors[0].element_size()) for t in tensors)
    if not _same(new, requested):
        return None
    x = grown[0]
    old = _tensor_bytes(_lookup(frame, x))
    dim = ast.unparse(call.args[1]) if len(call.args) > 1 else next(
        (ast.unparse(k.value) for k in call.keywords if k.arg == "dim"), "0")
    again = f", and each step copies the whole {x} again" if _in_loop(frame) else ""
    return (f"torch.cat on the failing line allocates a new {x} of {format_bytes(requested)} and copies the old "
            f"{x} ({format_bytes(old)}) into it: old and new are alive together{again}; allocate {x} once at its "
            "final length and write each step into it in place",
            f"# once, before the loop: a shape with the final length along dim {dim}\n"
            f"{x}_buf = torch.empty(final_shape, dtype={x}.dtype, device={x}.device)\n"
            f"# each step: write the new entries at positions [t, t + n) along dim {dim}\n"
            f"{x}_buf.narrow({dim}, t, n).copy_(new)")


def _copy_then_slice(node: ast.Subscript, frame: Any, requested: int) -> tuple[str, str] | None:
    """``x.clone().float()[...]``: the whole ``x`` copied before the slice keeps a part."""
    chain: list[ast.Call] = []
    cur: ast.AST = node.value
    while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) and cur.func.attr in _COPIES:
        chain.append(cur)
        cur = cur.func.value
    if not chain or not isinstance(cur, ast.Name):
        return None
    t = _lookup(frame, cur.id)
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    if requested % t.numel() or requested // t.numel() not in (1, 2, 4, 8):
        return None  # not the whole tensor in some dtype
    if not _same(t.numel() * (requested // t.numel()), requested):
        return None
    # the same calls on the slice: x[...].clone().float()
    inner: ast.expr = ast.Subscript(value=ast.Name(id=cur.id, ctx=ast.Load()), slice=node.slice, ctx=ast.Load())
    for c in reversed(chain):
        assert isinstance(c.func, ast.Attribute)
        inner = ast.Call(func=ast.Attribute(value=inner, attr=c.func.attr, ctx=ast.Load()), args=c.args,
                         keywords=c.keywords)
    return (f"the failing line makes a full copy of {cur.id} ({tuple(t.shape)}, {format_bytes(requested)} for the "
            f"copy) before slicing it: slice first, then copy or convert, so only the slice is copied",
            ast.unparse(inner))


#: elementwise operations with an in-place method: the operator, and torch's function names
_IN_PLACE = {ast.Mult: "mul_", ast.Add: "add_", ast.Sub: "sub_", ast.Div: "div_"}
_FUNCS = {"mul": "mul_", "multiply": "mul_", "add": "add_", "sub": "sub_", "subtract": "sub_", "div": "div_",
          "divide": "div_", "true_divide": "div_"}


def _einsum_product(call: ast.Call) -> tuple[ast.expr, ast.expr] | None:
    """``(g, w)`` where ``call`` is ``torch.einsum('ijkl,kl->ijkl', g, w)`` (operands also as one
    list): a product of ``g`` with ``w`` broadcast along ``g``'s leading dimensions."""
    if not (call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
        return None
    ops = call.args[1:]
    if len(ops) == 1 and isinstance(ops[0], (ast.List, ast.Tuple)):
        ops = ops[0].elts
    eq = call.args[0].value.replace(" ", "")
    if len(ops) != 2 or "->" not in eq or "." in eq:
        return None
    ins, out = eq.split("->")
    subs = ins.split(",")
    if len(subs) != 2 or subs[0] != out or not out.endswith(subs[1]) or len(set(out)) != len(out):
        return None
    return ops[0], ops[1]


def _out_of_place(node: ast.Assign, frame: Any, requested: int) -> tuple[str, str] | None:
    """``res = g * w`` (or ``torch.mul(g, w)``, a product einsum) whose request is a new tensor of
    ``g``'s shape and dtype, assigned to another name than ``g``: in place into ``g`` needs none."""
    val = node.value
    method = None
    operands: tuple[ast.expr, ast.expr] | None = None
    how = ""
    if isinstance(val, ast.BinOp) and type(val.op) in _IN_PLACE:
        method, operands = _IN_PLACE[type(val.op)], (val.left, val.right)
    elif isinstance(val, ast.Call) and isinstance(val.func, ast.Attribute):
        if val.func.attr in _FUNCS and len(val.args) == 2 and not val.keywords:
            method, operands = _FUNCS[val.func.attr], (val.args[0], val.args[1])
        elif val.func.attr == "einsum":
            operands = _einsum_product(val)
            method = "mul_" if operands is not None else None
            how = f" (this einsum is {ast.unparse(operands[0])} * {ast.unparse(operands[1])}, broadcast)" \
                if operands is not None else ""
    if method is None or operands is None or not isinstance(operands[0], ast.Name):
        return None
    g_name = operands[0].id
    targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
    if len(targets) != len(node.targets) or g_name in targets:
        return None  # already rebinding g itself: a different shape of code
    g = _lookup(frame, g_name)
    other = _lookup(frame, operands[1].id) if isinstance(operands[1], ast.Name) else None
    if type(g) is not torch.Tensor or (isinstance(operands[1], ast.Name) and type(other) is not torch.Tensor):
        return None
    if not isinstance(operands[1], (ast.Name, ast.Constant)):
        return None
    w: Any = other if isinstance(operands[1], ast.Name) else operands[1].value
    if not isinstance(w, (torch.Tensor, int, float)) or isinstance(w, bool):
        return None
    try:
        shape = torch.broadcast_shapes(g.shape, w.shape) if isinstance(w, torch.Tensor) else g.shape
        dtype = torch.result_type(g, w)
    except Exception:  # noqa: BLE001 - not an elementwise pair after all
        return None
    if shape != g.shape or dtype != g.dtype or g.requires_grad or not _same(_tensor_bytes(g), requested):
        return None
    if isinstance(w, torch.Tensor) and w.device != g.device:
        return None
    res = targets[0]
    return (f"the failing line{how} makes its result as a new tensor as large as {g_name} "
            f"({format_bytes(requested)}) while {g_name} stays alive: where {g_name} is not needed afterwards, "
            f"compute it in place into {g_name} (no second tensor of that size)",
            f"{g_name}.{method}({ast.unparse(operands[1])})  # in place: {g_name} now holds the result\n{res} = {g_name}")
