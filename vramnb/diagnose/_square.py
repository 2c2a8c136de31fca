"""How a materialised (n x m) product grows: with the square of one length only where both sides
are the same length of the same tensor (``x @ x.T``; ``q @ k.transpose(-2, -1)`` where ``q`` and
``k`` are both computed from ``x``), else with the product of the two sides' sizes, each named by
the tensor it comes from (4096 queries x 16384 database entries: no sequence, no square).

Reads the failing line's syntax tree and, for provenance, the assignments before it in the same
cell or function (:mod:`ast`, :mod:`linecache`); the names' values are only looked up (no user
code runs)."""

from __future__ import annotations

import ast
import linecache
from typing import Any

import torch

__all__ = ["growth"]


def _root(node: ast.AST) -> str | None:
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            return None


def _sources(frame: Any, name: str) -> set[str]:
    """The names of tensors the last assignment to ``name`` before the failing line (in the same
    cell or function) computes it from; empty where none is found."""
    from ._transient import _lookup

    code = frame.f_code
    text = "".join(linecache.getlines(code.co_filename))
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    lo = 1 if code.co_name == "<module>" else code.co_firstlineno
    best: ast.AST | None = None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        if not lo <= node.lineno < frame.f_lineno:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
            if best is None or node.lineno >= getattr(best, "lineno", 0):
                best = node
    if best is None:
        return set()
    out = set()
    for n in ast.walk(best.value):  # type: ignore[attr-defined]
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id != name:
            try:
                if isinstance(_lookup(frame, n.id), torch.Tensor):
                    out.add(n.id)
            except Exception:  # noqa: BLE001 - a name that cannot be read is no source
                continue
    return out


def growth(a: ast.AST, b: ast.AST, n: int, m: int, frame: Any, sa: tuple[int, ...] = (),
           sb: tuple[int, ...] = ()) -> str:
    """``"it grows with ..."`` for the (n x m) matrix of the two sides ``a`` and ``b`` (their syntax
    nodes, of shapes ``sa`` and ``sb``) of the failing line in ``frame``."""
    ra, rb = _root(a), _root(b)
    if sa and sb and n != m and n not in sa and n in sb and m in sa:  # an output that lists b's side first
        ra, rb = rb, ra
    if n == m and ra is not None and ra == rb:
        return f"it grows with the square of `{ra}`'s length {n} (both sides are `{ra}`)"
    if n == m and ra is not None and rb is not None:
        common = _sources(frame, ra) & _sources(frame, rb)
        if common:
            src = sorted(common)[0]
            return f"it grows with the square of the length {n} that `{ra}` and `{rb}` both take from `{src}`"
    left = f"`{ra}`'s side" if ra else "the left side"
    right = f"`{rb}`'s side" if rb else "the right side"
    return f"it grows with the product of {n} ({left}) and {m} ({right})"
