"""Containers the failing code grows, for the evaluation fixes: where what grows is a container
of every step's results (``preds = torch.cat([preds, logits])`` in a loop, ``outs.append(y)``),
its size follows the samples seen, not the batch: "a smaller batch per step" is then no fix.
Only the syntax tree and the namespace's types (``dict.get``): no user code runs."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["self_concatenated", "growing"]

_JOIN = {"cat", "concat", "concatenate", "stack", "vstack", "hstack", "row_stack", "column_stack"}
_LOOPS = (ast.For, ast.While, ast.AsyncFor)


def self_concatenated(tree: ast.AST) -> set[str]:
    """Names assigned, inside a loop, a join of a sequence that holds the name itself
    (``x = torch.cat([x, y])``, ``x = np.concatenate((x, y), axis=0)``)."""
    out: set[str] = set()
    for loop in ast.walk(tree):
        if not isinstance(loop, _LOOPS):
            continue
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            call, name = node.value, node.targets[0].id
            if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], (ast.List, ast.Tuple))):
                continue
            fn = call.func
            attr = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if attr in _JOIN and any(isinstance(e, ast.Name) and e.id == name for e in call.args[0].elts):
                out.add(name)
    return out


def growing(mutated: set[str], source: str | None, namespace: Mapping[str, Any] | None) -> set[str]:
    """The containers the failing code grows: names it adds to in place that are bound to a
    ``list``/``dict``/``set``/``deque`` in ``namespace`` (a running float total is not one), and
    names its cell ``source`` joins onto themselves in a loop (:func:`self_concatenated`)."""
    out = {n for n in mutated if namespace is not None and type(namespace) is dict
           and issubclass(type(dict.get(namespace, n)), (list, dict, set, deque))}
    if source:
        try:
            out |= self_concatenated(ast.parse(source))
        except (SyntaxError, ValueError):
            pass
    return out
