"""Containers the failing code grows, for the evaluation fixes: where what grows is a container
of every step's results (``preds = torch.cat([preds, logits])`` in a loop, ``outs.append(y)``),
its size follows the samples seen, not the batch: "a smaller batch per step" is then no fix.
Only the syntax tree and the namespace's types (``dict.get``): no user code runs."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Join", "self_joins", "self_concatenated", "growing"]

_JOIN = {"cat", "concat", "concatenate", "stack", "vstack", "hstack", "row_stack", "column_stack", "dstack"}
_LOOPS = (ast.For, ast.While, ast.AsyncFor)


@dataclass(frozen=True)
class Join:
    """A name rebound, inside a loop, to a join of a sequence that holds its old value.

    Attributes:
        name: the name (``preds``).
        statement: the whole statement as source (``preds = torch.cat((preds, logits), dim=0)``).
        part: what each pass adds, as source (``logits``), or ``None`` where it is not one expression.
        tensor: a tensor join (``torch.cat``/``stack``, NumPy's): the join makes a new tensor of the old
            and the new parts together while the old one is alive; ``False`` for a list or tuple
            rebound to itself plus a display (``outs = outs + [y]``), which copies references only.
        func: the join's function as source (``torch.cat``), ``""`` for a list or tuple.
        keywords: its keyword arguments as source (``dim=0``), ``""`` where none.
        starred: the sequence unpacks the name (``[*h, y]``) rather than holding it whole.
        read: the loop reads the name outside this statement (a cache the next pass computes with:
            ``k_cache`` read by attention), so it is not only collected.
    """

    name: str
    statement: str
    part: str | None
    tensor: bool
    func: str = ""
    keywords: str = ""
    starred: bool = False
    read: bool = False


def _holds(seq: ast.AST, name: str) -> list[ast.expr] | None:
    """The other elements of the list/tuple display ``seq`` where one of them is ``name`` (or
    ``*name``); ``None`` where none is."""
    if not isinstance(seq, (ast.List, ast.Tuple)):
        return None
    elts = seq.elts
    mine = [e for e in elts if (isinstance(e, ast.Name) and e.id == name)
            or (isinstance(e, ast.Starred) and isinstance(e.value, ast.Name) and e.value.id == name)]
    if not mine:
        return None
    return [e for e in elts if e not in mine]


def _join_of(value: ast.AST, name: str) -> tuple[str | None, bool, str, str, bool] | None:
    """``(part, tensor, func, keywords, starred)`` where the expression ``value`` (anywhere in it: ``x if x is None else
    torch.cat((x, y))``) joins a sequence that holds ``name``; ``None`` where it does not."""
    for node in ast.walk(value):
        others = None
        tensor = False
        func = kws = ""
        seq: Any = None
        if isinstance(node, ast.Call):
            fn = node.func
            attr = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if attr in _JOIN:
                seq = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg in ("tensors", "arrays", "tup", "seq")), None)
                others = _holds(seq, name) if seq is not None else None
                tensor = True
                func = ast.unparse(fn)
                kws = ", ".join(ast.unparse(k) for k in node.keywords if k.arg not in ("tensors", "arrays", "tup", "seq"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = node.left, node.right
            if isinstance(left, ast.Name) and left.id == name and isinstance(right, (ast.List, ast.Tuple)):
                others = list(right.elts)
            elif isinstance(right, ast.Name) and right.id == name and isinstance(left, (ast.List, ast.Tuple)):
                others = list(left.elts)
        if others is not None:
            part = ast.unparse(others[0]) if len(others) == 1 else None
            seq_elts = seq.elts if tensor and isinstance(seq, (ast.List, ast.Tuple)) else []
            starred = any(isinstance(e, ast.Starred) for e in seq_elts)
            return part, tensor, func, kws, starred
    return None


def self_joins(tree: ast.AST) -> dict[str, Join]:
    """``{name: Join}`` for each name assigned, inside a loop, a join of a sequence that holds
    the name itself (``x = torch.cat([x, y])``, ``x = x if ... else np.concatenate((x, y))``,
    ``hist = torch.stack([*hist, y])``, ``outs = outs + [y]``)."""
    out: dict[str, Join] = {}
    for loop in ast.walk(tree):
        if not isinstance(loop, _LOOPS):
            continue
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            name = node.targets[0].id
            got = _join_of(node.value, name)
            if got is not None and name not in out:
                inside = {id(n) for n in ast.walk(node)}
                # `x is None` tests read no data: not a use of the tensor
                inside |= {id(c.left) for c in ast.walk(loop) if isinstance(c, ast.Compare)
                           and all(isinstance(op, (ast.Is, ast.IsNot)) for op in c.ops)
                           and all(isinstance(v, ast.Constant) and v.value is None for v in c.comparators)}
                read = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                           and id(n) not in inside for n in ast.walk(loop))
                out[name] = Join(name, ast.unparse(node), *got, read=read)
    return out


def self_concatenated(tree: ast.AST) -> set[str]:
    """The names of :func:`self_joins`."""
    return set(self_joins(tree))


def _keeps_tensor_list(obj: Any) -> bool:
    """Whether ``obj``'s own ``__dict__`` (read without running its code) has a public attribute
    bound to a non-empty ``list``/``deque`` whose last entry is a tensor: an object updated in place
    (a metric's ``update``, a logger's ``log``) that keeps every call's tensors."""
    import torch

    try:
        d = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return False
    if type(d) is not dict:
        return False
    for k, v in list(d.items())[:256]:
        if type(k) is str and not k.startswith("_") and type(v) in (list, deque) and v \
                and isinstance(v[-1], torch.Tensor):
            return True
    return False


def growing(mutated: set[str], source: str | None, namespace: Mapping[str, Any] | None) -> set[str]:
    """The containers the failing code grows: names it adds to in place that are bound to a
    ``list``/``dict``/``set``/``deque`` in ``namespace`` (a running float total is not one), or to
    an object whose public attribute is a list of tensors (a metric's ``update(preds, target)``
    keeping every call's tensors), and names its cell ``source`` joins onto themselves in a loop
    (:func:`self_joins`)."""
    out: set[str] = set()
    if namespace is not None and type(namespace) is dict:
        for n in mutated:
            obj = dict.get(namespace, n)
            if issubclass(type(obj), (list, dict, set, deque)) or _keeps_tensor_list(obj):
                out.add(n)
    if source:
        try:
            out |= self_concatenated(ast.parse(source))
        except (SyntaxError, ValueError):
            pass
    return out
