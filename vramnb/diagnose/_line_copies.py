"""Which operation of the failing line made the request, and its non-copying form.

An out-of-memory error at one line names only the request's size. This module finds the
operation that asked for it and says what it copies and what does the same without the copy:

* ``.repeat(...)`` copies a tensor once per repetition where ``.expand(...)`` gives a view;
* a conversion (``.float()``, ``.to(dtype)``) of a fresh result (``torch.cat(...)``) makes a
  second whole copy beside the first;
* ``q @ k.transpose(-2, -1)`` with a softmax in the same code materialises the (n, m)
  attention-score matrix that ``torch.nn.functional.scaled_dot_product_attention`` never builds;
* an elementwise op on expanded / broadcast operands materialises the broadcast shape
  (pairwise differences: ``torch.cdist`` or the matmul form);
* boolean-mask indexing ``x[mask]`` builds int64 indices (8 bytes per kept element) and a copy;
* an out-of-place activation (``nn.ReLU()``, ``torch.relu(x)``) with gradients off allocates a
  second tensor of its input's size where the in-place form overwrites the input.

How: the failing line's syntax tree (:mod:`ast`, :mod:`linecache`) is evaluated on ``meta``
tensors of the shapes, strides and dtypes that its names hold in the failing frame; only torch
functions, tensor methods, :mod:`math` and a few builtins are called, on those meta copies (no
user code runs, nothing of the user's is touched). The first operation, in evaluation order,
whose result has exactly the requested bytes is the one named; nothing is said otherwise.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import math
import types
from typing import Any

import torch

from .._units import format_bytes

_CONVERT = frozenset({"float", "double", "half", "bfloat16", "to", "type"})
_ACTS = frozenset({"relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "elu", "leaky_relu", "hardtanh",
                   "hardswish", "mish", "selu", "celu"})
_DENY = frozenset({"manual_seed", "seed", "save", "load", "compile", "use_deterministic_algorithms", "numpy",
                   "tolist", "item", "backward", "register_hook", "cuda", "cpu", "pin_memory", "share_memory_"})
_BUILTINS = frozenset({builtins.int, builtins.float, builtins.len, builtins.min, builtins.max, builtins.abs,
                       builtins.tuple, builtins.list})
_BINOPS: dict[type, Any] = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                            ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
                            ast.Pow: lambda a, b: a ** b, ast.MatMult: lambda a, b: a @ b,
                            ast.FloorDiv: lambda a, b: a // b}
_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


class _Unknown(Exception):
    pass


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def _plain(v: Any) -> Any:
    """The value of a notebook name as the evaluator may use it, else :class:`_Unknown`."""
    if type(v) in (torch.Tensor, torch.nn.Parameter):
        return _meta(v)
    if v is None or type(v) in (int, float, bool, str, torch.dtype, torch.device, torch.Size):
        return v
    if isinstance(v, types.ModuleType) and (v.__name__ == "math" or v.__name__.split(".")[0] == "torch"):
        return v
    if type(v) in (list, tuple) and len(v) <= 100_000:
        return type(v)(_plain(x) for x in v)
    if _callable_ok(v):
        return v
    raise _Unknown


def _callable_ok(f: Any) -> bool:
    if isinstance(f, (type, torch.nn.Module)):
        return f in _BUILTINS
    if f in _BUILTINS:
        return True
    name = getattr(f, "__name__", "") or ""
    if name in _DENY or name.startswith("set"):
        return False
    mod = getattr(f, "__module__", None) or ""
    if mod == "math" or mod.split(".")[0] == "torch":
        return True
    owner = getattr(f, "__self__", None)
    return type(owner) is torch.Tensor and owner.device.type == "meta"


class _Eval:
    """Post-order evaluation of one line on meta tensors; ``order`` lists the nodes whose
    value is known, in the order Python computes them."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.values: dict[int, Any] = {}
        self.order: list[ast.AST] = []
        self.masks: list[tuple[ast.Subscript, torch.Tensor, torch.Tensor]] = []

    def lookup(self, name: str) -> Any:
        from ._transient import _lookup

        sentinel = object()
        v = _lookup(self.frame, name)
        if v is None:
            g = self.frame.f_globals
            b = dict.get(g, "__builtins__") if type(g) is dict else None
            bd = b if type(b) is dict else getattr(b, "__dict__", {})
            v = dict.get(bd, name, sentinel) if type(bd) is dict else sentinel
            if v is sentinel:
                if name in ("None",):
                    return None
                raise _Unknown
        return _plain(v)

    def ev(self, node: ast.AST) -> Any:
        v = self._ev(node)
        self.values[id(node)] = v
        self.order.append(node)
        return v

    def _ev(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.ev(e) for e in node.elts)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.ev(p) for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            if node.attr.startswith("_"):
                raise _Unknown
            if isinstance(base, torch.Tensor) or isinstance(base, types.ModuleType):
                out = getattr(base, node.attr)
                return _plain(out) if not callable(out) or _callable_ok(out) else _fail()
            raise _Unknown
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise _Unknown
            return op(self.ev(node.left), self.ev(node.right))
        if isinstance(node, ast.UnaryOp):
            v = self.ev(node.operand)
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.Invert):
                return ~v
            raise _Unknown
        if isinstance(node, ast.Subscript):
            base = self.ev(node.value)
            idx = self.ev(node.slice)
            if isinstance(base, torch.Tensor) and isinstance(idx, torch.Tensor) and idx.dtype == torch.bool:
                self.masks.append((node, base, idx))
                raise _Unknown  # the result's size depends on the data
            if isinstance(base, (torch.Tensor, tuple, torch.Size)):
                return base[idx]
            raise _Unknown
        if isinstance(node, ast.Call):
            f = self.ev(node.func)
            if not _callable_ok(f):
                raise _Unknown
            args = []
            for a in node.args:
                if isinstance(a, ast.Starred):
                    args.extend(self.ev(a.value))
                else:
                    args.append(self.ev(a))
            kw = {}
            for k in node.keywords:
                if k.arg is None:
                    raise _Unknown
                kw[k.arg] = self.ev(k.value)
            if "device" in kw:
                kw["device"] = "meta"  # a factory: its size, never its memory
            return f(*args, **kw)
        raise _Unknown


def _fail() -> Any:
    raise _Unknown


def _walk(ev: _Eval, node: ast.AST) -> None:
    """Evaluate every statement's expressions, keeping what could be computed; factory
    functions (``torch.ones(n, n)``) make meta tensors (``torch.device("meta")`` for the walk)."""
    with torch.device("meta"):
        _walk_in(ev, node)


def _walk_in(ev: _Eval, node: ast.AST) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            try:
                ev.ev(child)
            except Exception:  # noqa: BLE001 - an unknown value stops this subtree only
                _walk_in(ev, child) if not isinstance(child, (ast.Name, ast.Constant)) else None
        else:
            _walk_in(ev, child)


def _source(frame: Any) -> str:
    return "".join(linecache.getlines(frame.f_code.co_filename))


def line_copy(frame: Any, requested: int | None) -> tuple[str, str, bool] | None:
    """``(sentence, code, needs_grad_off)`` for the operation of the failing line of ``frame``
    that asked for exactly ``requested`` bytes, where a form without that copy exists, else
    ``None``. ``needs_grad_off``: the advice holds only with gradients off (an in-place form)."""
    if not requested:
        return None
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    if not text:
        return None
    try:
        tree = ast.parse(text.rstrip(":") if text.endswith(":") else text)
    except SyntaxError:
        return None
    ev = _Eval(frame)
    _walk(ev, tree)
    for sub, base, mask in ev.masks:
        found = _mask(sub, base, mask, requested, ev)
        if found is not None:
            return found
    inputs = {id(ev.values[id(n)]) for n in ev.order if isinstance(n, ast.Name)
              and isinstance(ev.values.get(id(n)), torch.Tensor)}
    for node in ev.order:
        v = ev.values.get(id(node))
        if not isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)) or not isinstance(v, torch.Tensor) \
                or id(v._base) in inputs or _nbytes(v) != requested:
            continue  # a name, or a view of one: no allocation of this line
        for rule in (_repeat, _convert, _matmul, _broadcast, _activation, _join):
            found = rule(node, v, ev, tree)
            if found is not None:
                return found
        return None  # the first operation of that size is the one that failed
    return None


def _chain(node: ast.AST) -> list[ast.AST]:
    """``node`` and what it computes from, down the receivers and operands."""
    out: list[ast.AST] = [node]
    for n in out:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            out.append(n.func.value)
        elif isinstance(n, ast.BinOp):
            out.extend((n.left, n.right))
        elif isinstance(n, ast.UnaryOp):
            out.append(n.operand)
    return out


def _top(tree: ast.AST, node: ast.AST) -> ast.expr | None:
    """The outermost expression of ``tree`` containing ``node`` (an assignment's value)."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)) and n.value is not None:
            if any(c is node for c in ast.walk(n.value)):
                return n.value
    return None


def _replace(root: Any, old: ast.AST, new: ast.expr) -> Any:
    class _R(ast.NodeTransformer):
        def visit(self, n: ast.AST) -> Any:
            return new if n is old else self.generic_visit(n)

    return _R().visit(root)


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def _repeat(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    rep = next((n for n in _chain(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "repeat"), None)
    if rep is None:
        return None
    assert isinstance(rep.func, ast.Attribute)
    src, out = ev.values.get(id(rep.func.value)), ev.values.get(id(rep))
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor) or len(rep.args) != src.dim():
        return None
    args = []
    for a, size in zip(rep.args, src.shape, strict=True):
        r = ev.values.get(id(a))
        if r == 1:
            args.append("-1")
        elif size == 1:
            args.append(ast.unparse(a))
        else:
            return _repeat_viewed(rep, src, out, ev, tree)  # repeating a dimension longer than 1 is no expand...
    what = ast.unparse(rep.func.value)
    times = out.numel() // max(src.numel(), 1)
    sentence = (f"`.repeat({', '.join(ast.unparse(a) for a in rep.args)})` on the failing line copies {what} "
                f"({format_bytes(_nbytes(src))}) {times} times into {_shape(out)}, {format_bytes(_nbytes(out))}")
    if node is not rep:
        sentence += (f", and `{ast.unparse(node)[len(ast.unparse(rep)):][:40] or ast.unparse(node)[:40]}` makes "
                     f"{format_bytes(requested_of(v))} more of it (the request)")
    sentence += ("; `.expand(...)` gives the same shape as a view of the original, no copy: do the per-element "
                 "work on the small tensor, then expand (read the result only: writing into an expanded view "
                 "writes every repetition)")
    top = _top(tree, node) or node
    topv = ev.values.get(id(top))
    base = top if isinstance(topv, torch.Tensor) and tuple(topv.shape) == tuple(out.shape) else node
    small = _replace(_clone(base), _find_same(_clone_map, rep), rep.func.value)
    code = f"({ast.unparse(small)}).expand({', '.join(args)})"
    return sentence, code, False


def _repeat_viewed(rep: ast.Call, src: torch.Tensor, out: torch.Tensor, ev: _Eval,
                   tree: ast.AST) -> tuple[str, str, bool] | None:
    """... unless only the first dimension repeats and the copies are then viewed as ``(n, ...)``:
    ``x.repeat(n, 1, 1).view(n, B * T, D)`` holds ``n`` copies of ``x.reshape(B * T, D)``, which
    ``x.reshape(1, B * T, D).expand(n, B * T, D)`` gives as a view (allennlp#605's review)."""
    reps = [ev.values.get(id(a)) for a in rep.args]
    if not reps or not isinstance(reps[0], int) or reps[0] < 2 or any(r != 1 for r in reps[1:]):
        return None
    parent = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                   and n.func.value is rep and n.func.attr in ("view", "reshape")), None)
    viewed = ev.values.get(id(parent)) if parent is not None else None
    if not isinstance(viewed, torch.Tensor) or viewed.dim() < 1 or viewed.shape[0] != reps[0] \
            or math.prod(viewed.shape[1:]) != src.numel():
        return None
    assert parent is not None and isinstance(parent.func, ast.Attribute) and isinstance(rep.func, ast.Attribute)
    n, rest = ast.unparse(rep.args[0]), [ast.unparse(a) for a in parent.args[1:]]
    if len(parent.args) != viewed.dim() or any(isinstance(a, ast.Starred) for a in parent.args):
        rest = [str(d) for d in viewed.shape[1:]]
    what = ast.unparse(rep.func.value)
    sentence = (f"`.repeat({', '.join(ast.unparse(a) for a in rep.args)})` on the failing line copies {what} "
                f"({format_bytes(_nbytes(src))}) {reps[0]} times into {_shape(out)}, {format_bytes(_nbytes(out))}, "
                f"which `.{parent.func.attr}(...)` then reads as {reps[0]} copies of the same {tuple(viewed.shape[1:])} "
                f"block; `.expand(...)` of {what} reshaped to one block gives that shape as a view, no copy (bmm, "
                "matmul and element-wise operations read it as it is; writing into it writes every copy)")
    code = f"{what}.reshape(1, {', '.join(rest)}).expand({n}, {', '.join(rest)})"
    return sentence, code, False


_clone_map: dict[int, ast.AST] = {}


def _clone(node: Any) -> Any:
    """A deep copy of ``node`` whose copied nodes are found again through :func:`_find_same`."""
    import copy

    _clone_map.clear()
    out = copy.deepcopy(node)
    for a, b in zip(ast.walk(node), ast.walk(out), strict=True):
        _clone_map[id(a)] = b
    return out


def _find_same(mapping: dict[int, ast.AST], node: ast.AST) -> ast.AST:
    return mapping.get(id(node), node)


def requested_of(v: torch.Tensor) -> int:
    return _nbytes(v)


def _convert(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CONVERT):
        return None
    recv = node.func.value
    src = ev.values.get(id(recv))
    if not isinstance(src, torch.Tensor) or src.dtype == v.dtype or not isinstance(recv, (ast.Call, ast.BinOp)):
        return None
    conv = ast.unparse(node)[len(ast.unparse(recv)):]
    parts = ""
    if isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) and recv.func.attr in ("cat", "stack") \
            and recv.args:
        seq = ast.unparse(recv.args[0])
        parts = (f"; or convert each part before joining (`torch.{recv.func.attr}([t{conv} for t in {seq}])`), "
                 f"which skips the {format_bytes(_nbytes(src))} {str(src.dtype).removeprefix('torch.')} copy")
    sentence = (f"`{conv}` on the failing line converts the fresh result of `{ast.unparse(recv)[:60]}` "
                f"({_shape(src)}, {format_bytes(_nbytes(src))} in {str(src.dtype).removeprefix('torch.')}) into a "
                f"second copy of {format_bytes(_nbytes(v))} in {str(v.dtype).removeprefix('torch.')}: both are alive "
                f"at once beside its inputs; keep {str(src.dtype).removeprefix('torch.')} (drop `{conv}`) where what "
                f"follows accepts it{parts}")
    stmt = next((n for n in ast.walk(tree) if isinstance(n, ast.stmt) and not isinstance(n, ast.Module)
                 and any(c is node for c in ast.walk(n))), None)
    code = ast.unparse(_replace(_clone(stmt), _find_same(_clone_map, node), recv)) if stmt is not None else \
        ast.unparse(recv)
    return sentence, code, False


_JOINS = ("cat", "concat", "concatenate", "stack")


def _joined_seq(node: ast.AST) -> ast.Name | None:
    """The name of the sequence ``node`` joins (``torch.cat(parts)``, ``torch.stack(parts, 0)``), else ``None``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _JOINS \
            and node.args and isinstance(node.args[0], ast.Name):
        return node.args[0]
    return None


def joined_names(frame: Any) -> set[str]:
    """Names of the sequences the failing line of ``frame`` joins into a new tensor
    (``torch.cat(parts)``): the join needs every part alive, so emptying them first is no fix."""
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    try:
        tree = ast.parse(text.rstrip(":") if text.endswith(":") else text)
    except SyntaxError:
        return set()
    return {seq.id for n in ast.walk(tree) if (seq := _joined_seq(n)) is not None}


def _join(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    """A sequence of tensors joined at once (``torch.cat(parts)``): the result is as large as every
    part together, and the parts are alive while it is made, so the join needs the whole twice."""
    seq = _joined_seq(node)
    parts = ev.values.get(id(seq)) if seq is not None else None
    if not isinstance(parts, (list, tuple)) or len(parts) < 2 or not all(isinstance(p, torch.Tensor) for p in parts):
        return None
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and seq is not None
    fn = node.func.attr
    shape = tuple(v.shape)
    dtype = str(v.dtype).removeprefix("torch.")
    from ._transient import _lookup

    real = _lookup(ev.frame, seq.id)
    first = real[0] if type(real) in (list, tuple) and real else None
    dev = first.device if isinstance(first, torch.Tensor) and type(first) in (torch.Tensor, torch.nn.Parameter) \
        else None
    where = f", device={str(dev)!r}" if dev is not None and dev.type != "cpu" else ""
    storages: dict[int, int] = {}
    for p in real if type(real) in (list, tuple) else ():
        if type(p) in (torch.Tensor, torch.nn.Parameter):  # what the parts hold: each storage once (views share)
            st = p.untyped_storage()
            storages[st.data_ptr() or id(st)] = st.nbytes()
    held = sum(storages.values()) if storages else sum(_nbytes(p) for p in parts)
    sentence = (f"`{ast.unparse(node)[:60]}` on the failing line joins the {len(parts)} tensors of {seq.id} "
                f"({format_bytes(held)}) into a new tensor of {format_bytes(_nbytes(v))} while every part is alive: "
                f"the join needs the whole twice; fill one tensor of the joined shape {shape} as the parts are made "
                f"(allocated once, before the loop), instead of keeping the parts and joining them at the end, or "
                f"write the parts to disk as they are made (torch.save) and join them where memory allows")
    if fn == "stack":
        code = (f"out = torch.empty({shape}, dtype=torch.{dtype}{where})  # once, before the loop\n"
                f"out[i] = part  # in the loop, instead of {seq.id}.append(part)")
    else:
        code = (f"out = torch.empty({shape}, dtype=torch.{dtype}{where})  # once, before the loop; start = 0\n"
                f"out[start:start + len(part)] = part; start += len(part)  # in the loop, instead of {seq.id}.append(part)")
    return sentence, code, False


def _root(node: ast.AST) -> str | None:
    for n in _chain(node):
        if isinstance(n, ast.Name):
            return n.id
    return None


def _matmul(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    from ._square import growth

    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        a, b = node.left, node.right
    elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) and len(node.args) >= 1 \
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in ("matmul", "bmm"):
        a, b = (node.func.value, node.args[0]) if len(node.args) == 1 and isinstance(node.func, ast.Attribute) \
            and not isinstance(ev.values.get(id(node.func.value)), types.ModuleType) else (node.args[0],
                                                                                           node.args[-1])
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "einsum" \
            and len(node.args) == 3:
        a, b = node.args[1], node.args[2]  # torch.einsum("bhid,bhjd->bhij", q, k)
    else:
        return None
    ta, tb = ev.values.get(id(a)), ev.values.get(id(b))
    if not isinstance(ta, torch.Tensor) or not isinstance(tb, torch.Tensor) or v.dim() < 2 or ta.dim() < 2:
        return None
    n, m, d = v.shape[-2], v.shape[-1], ta.shape[-1]
    if not (d < n and d < m):
        return None
    mats = v.numel() // (n * m)
    sentence = (f"`{ast.unparse(node)[:60]}` on the failing line materialises a ({n} x {m}) matrix for each of "
                f"{mats} batch entries: {_shape(v)}, {format_bytes(_nbytes(v))}, from operands of "
                f"{format_bytes(_nbytes(ta))} and {format_bytes(_nbytes(tb))} (inner size {d}): "
                f"{growth(a, b, n, m, ev.frame, tuple(ta.shape), tuple(tb.shape))}")
    if "softmax" in _source(ev.frame):
        q, k = _root(a) or "q", _root(b) or "k"
        sentence += ("; these are attention scores (a softmax follows): "
                     "torch.nn.functional.scaled_dot_product_attention computes softmax(q k^T / sqrt(d)) v with "
                     "fused kernels (flash / memory-efficient) that work block by block and never hold the "
                     "whole score matrix")
        code = (f"out = torch.nn.functional.scaled_dot_product_attention({q}, {k}, v)  # v: your values; "
                "attn_mask= or is_causal=True for a mask")
    else:
        sentence += "; compute it in chunks of rows (or only the entries you need)"
        code = ""
    return sentence, code, False


def _broadcast(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE)):
        return None
    ops = [ev.values.get(id(node.left)), ev.values.get(id(node.right))]
    ts = [t for t in ops if isinstance(t, torch.Tensor)]
    if len(ts) != 2:
        return None
    stored = [t.untyped_storage().nbytes() for t in ts]
    if max(stored) * 4 > _nbytes(v):
        return None  # not a broadcast that multiplies the data
    sentence = (f"`{ast.unparse(node)[:60]}` on the failing line materialises the broadcast shape {_shape(v)}, "
                f"{format_bytes(_nbytes(v))}, from operands whose own storage is {format_bytes(stored[0])} and "
                f"{format_bytes(stored[1])} (expanded or broadcast views cost nothing until an elementwise op "
                "writes the full result)")
    code = ""
    src = _source(ev.frame)
    if isinstance(node.op, ast.Sub) and (".sum(" in src or "norm" in src or "pow" in src or "**" in src):
        sentence += ("; for pairwise distances, torch.cdist(a, b) or the matmul form |a|^2 + |b|^2 - 2 a b^T "
                     "(torch.bmm / matmul) never builds it")
        code = ("# a: (B, n, d), b: (B, m, d), the tensors before unsqueeze / expand\n"
                "d2 = (a.pow(2).sum(-1, keepdim=True) + b.pow(2).sum(-1).unsqueeze(-2)\n"
                "      - 2 * torch.bmm(a, b.transpose(1, 2))).clamp_min(0)  # squared distances, (B, n, m)\n"
                "# or: torch.cdist(a, b) ** 2")
    return sentence, code, False


def _activation(node: ast.AST, v: torch.Tensor, ev: _Eval, tree: ast.AST) -> tuple[str, str, bool] | None:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name not in _ACTS or any(k.arg == "inplace" for k in node.keywords) \
            or not hasattr(torch.Tensor, name + "_"):
        return None  # no in-place form (torch has relu_, sigmoid_, tanh_ among these)
    if isinstance(f, ast.Attribute) and isinstance(ev.values.get(id(f.value)), torch.Tensor):
        x = f.value  # x.relu()
    elif node.args:
        x = node.args[0]
    else:
        return None
    t = ev.values.get(id(x))
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(v.shape):
        return None
    sentence = (f"`{ast.unparse(node)[:60]}` on the failing line is out of place: it allocates a second tensor of "
                f"{format_bytes(_nbytes(v))}, the same size as its input {_shape(t)}; with gradients off nothing "
                f"needs the input afterwards for a backward, and the in-place form `{ast.unparse(x)}.{name}_()` "
                "overwrites it instead (only where the input is not used again)")
    return sentence, f"{ast.unparse(x)}.{name}_()", True


def module_activation(frames: list[Any], requested: int | None, namespaces: list[Any]) -> tuple[str, str, bool] | None:
    """The same for an activation module (``nn.ReLU()``) running inside a model: the innermost
    ``forward`` frame of :mod:`torch.nn.modules.activation` whose module has ``inplace=False`` and
    whose input has exactly the requested bytes."""
    import os

    from .._graph import frame_locals

    if not requested:
        return None
    act_file = os.path.join("torch", "nn", "modules", "activation.py")
    for frame in frames:
        code = frame.f_code
        if code.co_name != "forward" or not code.co_filename.endswith(act_file):
            continue
        loc = dict(frame_locals(frame))
        mod, x = loc.get("self"), loc.get("input")
        if not isinstance(mod, torch.nn.Module) or not isinstance(x, torch.Tensor):
            return None
        if mod.__dict__.get("inplace") is not False or _nbytes(x) != requested:
            return None
        if _next_allocates(mod, x, requested, namespaces):
            return None  # the saving lasts one step: the peak is the next module's output beside this one's
        where = _module_path(mod, namespaces) or "the module"
        kind = type(mod).__name__
        sentence = (f"{kind} at {where} is out of place: it allocates its output, {format_bytes(requested)}, "
                    f"beside its input of the same size {_shape(x)} (two tensors at once); with gradients off no "
                    f"backward needs the input, and {kind}(inplace=True) overwrites it instead")
        return sentence, f"{where}.inplace = True  # or build it as torch.nn.{kind}(inplace=True)", True
    return None


def _next_allocates(mod: torch.nn.Module, x: torch.Tensor, requested: int, namespaces: list[Any]) -> bool:
    """Whether the module run right after ``mod`` (its next sibling in an ``nn.Sequential``, up to three
    levels up) is one of PyTorch's own (``torch.nn``) that makes a new output of at least ``requested``
    bytes from ``mod``'s output: then ``inplace=True`` lowers the memory at ``mod`` only, and the peak comes
    back one step later (x, the next layer's input and its output: an MLP of equal widths). Read with
    FakeTensorMode (shapes only; PyTorch's own forward runs, none of the user's); ``False`` where unknown."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    parents = {id(sub): (parent, i) for g in namespaces if type(g) is dict
               for obj in list(g.values()) if isinstance(obj, torch.nn.Module)
               for parent in obj.modules() if isinstance(parent, torch.nn.Sequential)
               for i, sub in enumerate(parent)}
    cur: torch.nn.Module = mod
    for _ in range(3):
        found = parents.get(id(cur))
        if found is None:
            return False
        parent, i = found
        if i + 1 < len(parent):
            nxt = parent[i + 1]
            if not type(nxt).__module__.startswith("torch.nn.modules.") or type(nxt).forward is torch.nn.Module.forward:
                return False
            try:
                with FakeTensorMode(allow_non_fake_inputs=True) as fake:
                    fx = fake.from_tensor(x)
                    out = nxt(fx)
                    # an identity (Dropout in eval) or a view makes no new memory
                    return (isinstance(out, torch.Tensor) and out is not fx and out._base is None
                            and out.untyped_storage().nbytes() >= requested)
            except Exception:  # noqa: BLE001 - a module the shapes alone cannot run: unknown
                return False
        cur = parent
    return False


def _module_path(mod: torch.nn.Module, namespaces: list[Any]) -> str | None:
    for g in namespaces:
        if type(g) is not dict:
            continue
        for name, obj in list(g.items()):
            if name.startswith("_") or not isinstance(obj, torch.nn.Module):
                continue
            for path, sub in obj.named_modules():
                if sub is mod:
                    out = name
                    for part in path.split(".") if path else []:
                        out += f"[{part}]" if part.isdigit() else f".{part}"
                    return out
    return None


def _mask(node: ast.Subscript, base: torch.Tensor, mask: torch.Tensor, requested: int,
          ev: _Eval) -> tuple[str, str, bool] | None:
    index = mask.numel() * 8 * max(mask.dim(), 1)
    copy = _nbytes(base) if tuple(mask.shape) == tuple(base.shape) else None
    if requested not in (index, copy):
        return None
    x, m = ast.unparse(node.value), ast.unparse(node.slice)
    what = (f"its int64 indices of the kept positions (8 bytes per element, up to {format_bytes(index)} here)"
            if requested == index else f"the copy of the kept elements (up to {format_bytes(copy or 0)})")
    sentence = (f"boolean-mask indexing `{x}[{m}]` on the failing line asked for {what}: it builds the mask, "
                f"then int64 indices of every kept position, then a copy of {x} (shape {_shape(base)}, "
                f"{format_bytes(_nbytes(base))}), all alive at once; skip the filter when there is nothing to "
                f"filter (check the mask's .any() first), and make at most one copy")
    inner = m[1:] if m.startswith("~") else f"~({m})"
    code = f"if ({inner}).any():\n    {x} = {x}[{m}]"
    return sentence, code, False


__all__ = ["line_copy", "module_activation"]
