"""The small readers the call table's entries share (:mod:`._call_table`, :mod:`._call_shapes`,
:mod:`._call_data`): a tensor's or array's held bytes, a call's name, its target and its uses in the cell's
syntax tree, shapes and dtypes as printed. Nothing of the user's runs."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ._op_call import CallSite

__all__ = ["held_bytes", "func_name"]


def held_bytes(x: Any, seen: set[int] | None = None) -> tuple[tuple[int, ...], str, int] | None:
    """``(shape, dtype, bytes)`` of a tensor (its storages' bytes, each once across ``seen``; a
    ``meta`` tensor: elements × element size) or a NumPy array (``nbytes``); else ``None``."""
    seen = set() if seen is None else seen
    tp = type(x)
    if tp in (torch.Tensor, torch.nn.Parameter):
        shape, dtype = tuple(x.shape), _dt(x)
        if x.device.type == "meta":  # an expression evaluated on meta copies: its storage (a view's is its base's)
            held = int(x.untyped_storage().nbytes())
            return shape, dtype, held or _nb(x)  # a fresh result whose meta storage reads 0 B: its elements
        from .._storages import storages_of_tensor

        n = 0
        for key, st in storages_of_tensor(x):
            if key not in seen:
                seen.add(key)
                n += int(st.nbytes())
        return shape, dtype + ("" if x.layout == torch.strided else f" {str(x.layout).removeprefix('torch.')}"), n
    if tp.__module__ == "numpy" and tp.__name__ == "ndarray":
        return tuple(int(s) for s in x.shape), str(x.dtype), int(x.nbytes)
    return None


def func_name(node: ast.expr) -> str:
    if isinstance(node, ast.BinOp):  # `a @ b`, `gx + gy`: the operator
        return type(node.op).__name__
    if isinstance(node, ast.Compare):  # `a == b`
        return type(node.ops[0]).__name__
    if isinstance(node, ast.UnaryOp):  # `-a`, `~mask`
        return type(node.op).__name__
    if isinstance(node, ast.Subscript):  # `x[idx]`
        return "Subscript"
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    if isinstance(f, ast.Call):  # vmap(f)(x), jacrev(f)(x)
        return func_name(f)
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _call(site: CallSite) -> ast.Call:
    """The site's call (the table's entries run only for calls: :func:`cheaper`)."""
    if not isinstance(site.node, ast.Call):
        raise TypeError("an operator, not a call")
    return site.node


def _plain(v: Any) -> bool:
    return type(v) in (torch.Tensor, torch.nn.Parameter)


def _shape(s: Any) -> str:
    s = tuple(s)
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def _dt(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _nb(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _replaced(site: CallSite, node: ast.AST, new: str) -> str:
    """The statement holding ``node``, with ``node`` written as ``new`` (else ``new`` alone)."""
    if site.stmt is None or isinstance(site.stmt, (ast.With, ast.For, ast.While, ast.If, ast.Try)):
        return new
    from ._line_copies import _clone, _clone_map, _find_same, _replace

    copy = _clone(site.stmt)
    return ast.unparse(_replace(copy, _find_same(_clone_map, node), ast.parse(new, mode="eval").body))


def _target(site: CallSite) -> str | None:
    """The name the call's result is assigned to, where the statement is ``name = <the call>``."""
    s = site.stmt
    if isinstance(s, ast.Assign) and s.value is site.node and len(s.targets) == 1 \
            and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id
    return None


def _uses(site: CallSite, name: str) -> list[ast.AST]:
    """The nodes after the failing statement (same scope's source) that read ``name``."""
    line = site.stmt.end_lineno if site.stmt is not None else site.node.lineno
    out: list[ast.AST] = []
    for n in ast.walk(site.tree):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > (line or 0):
            out.append(n)
    return out


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
