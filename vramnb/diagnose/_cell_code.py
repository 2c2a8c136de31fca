"""What a failing notebook cell's code does, read from its text, for the out-of-memory fixes:
what it stores in the containers it adds to (so that the fix's example is the cell's own
expression, ``y_preds.append(model(xb).detach())``, never a name the cell lacks), and a loss
summed over parts in a loop before one backward (``loss = loss + f(part)`` ... ``loss.backward()``).
Only the syntax tree and, for the stored values, the type of what a container already holds
(built-in containers read through their own methods): no user code runs."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

import torch

from .._graph import container_items

__all__ = ["stored_instead", "summed_before_backward"]


def _call(expr: str, *methods: str) -> str:
    try:
        simple = isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    except SyntaxError:
        simple = False
    return (expr if simple else f"({expr})") + "".join(f".{m}()" for m in methods)


def _adds(tree: ast.AST) -> dict[str, tuple[str, str, str | None]]:
    """``{container: (how: "append", "+=" or "=", the expression it stores, the key as source or None)}``:
    ``xs.append(e)``, ``d[k] += e`` and ``d[k] = e`` (the first of each container)."""
    out: dict[str, tuple[str, str, str | None]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name) and len(node.args) == 1 and not node.keywords):
            out.setdefault(node.func.value.id, ("append", ast.unparse(node.args[0]), None))
        elif (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Subscript)
              and isinstance(node.target.value, ast.Name)):
            out.setdefault(node.target.value.id, ("+=", ast.unparse(node.value), ast.unparse(node.target.slice)))
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)
              and isinstance(node.targets[0].value, ast.Name)):
            t = node.targets[0]
            out.setdefault(t.value.id, ("=", ast.unparse(node.value), ast.unparse(t.slice)))  # type: ignore[attr-defined]
    return out


def _entry(obj: Any, key: str | None) -> Any:
    """A tensor ``obj`` already holds that the statement stored: a list's last entry, a dict's
    entry under the constant ``key`` (else its first tensor value); ``None`` where none."""
    try:
        if issubclass(type(obj), list):
            items = container_items(obj)
            return items[-1] if items else None
        if issubclass(type(obj), dict):
            if key is not None:
                try:
                    k = ast.literal_eval(key)
                    v = dict.get(obj, k)
                    if v is not None:
                        return v
                except (ValueError, SyntaxError, TypeError):
                    pass
            return next((v for v in dict.values(obj) if issubclass(type(v), torch.Tensor)), None)
    except Exception:  # noqa: BLE001 - no advice rather than a broken post-mortem
        return None
    return None


def stored_instead(text: str, namespace: Mapping[str, Any]) -> dict[str, str]:
    """``{container: sentence}`` for each container the cell ``text`` appends to (``xs.append(e)``)
    or stores or adds to by key (``d[k] = e``, ``d[k] += e``), where what it stores is a tensor (read from what the
    container in ``namespace`` holds now): the cell's own statement with ``e`` made into
    what to keep instead: ``.item()`` for a one-element tensor, ``.detach()`` for one with an
    autograd graph (``.detach().cpu()`` on a GPU), ``.cpu()`` for one on a GPU; none for a
    tensor on the CPU without a graph (there is nothing lighter to store than its values)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    out: dict[str, str] = {}
    for name, (how, expr, key) in _adds(tree).items():
        obj = dict.get(namespace, name) if type(namespace) is dict else namespace.get(name)
        t = _entry(obj, key)
        if not issubclass(type(t), torch.Tensor):
            continue
        graph = t.grad_fn is not None
        gpu = t.device.type != "cpu"
        if t.numel() == 1:
            new, why = _call(expr, "item"), "a number, not a tensor" + (" with its autograd graph" if graph else "")
        elif graph:
            new = _call(expr, "detach", *(["cpu"] if gpu else []))
            why = "the tensor without its autograd graph" + (", on the CPU" if gpu else "")
        elif gpu:
            new, why = _call(expr, "cpu"), "the tensor on the CPU"
        else:
            continue
        stmt = f"{name}.append({new})" if how == "append" else f"{name}[{key}] {how} {new}"
        out[name] = f"`{stmt}`: {why}"
    return out


def _summed_list(tree: ast.AST, loops: list[Any]) -> tuple[str, str, str, str] | None:
    """``losses.append(part)`` in a loop, then ``total = sum(losses)`` (or ``torch.stack(losses).sum()``)
    and ``total.backward()`` after it, or ``sum(losses).backward()`` directly: see
    :func:`summed_before_backward`."""
    def summed(node: Any) -> str | None:  # the list a sum of all its entries reads
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sum"
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name)):
            return node.args[0].id
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sum"
                and not node.args and isinstance(node.func.value, ast.Call)
                and isinstance(node.func.value.func, ast.Attribute) and node.func.value.func.attr == "stack"
                and len(node.func.value.args) == 1 and isinstance(node.func.value.args[0], ast.Name)):
            return node.func.value.args[0].id
        return None

    totals = {n.targets[0].id: (summed(n.value), n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and summed(n.value)}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "backward"):
            continue
        target = call.func.value
        if isinstance(target, ast.Name) and target.id in totals and sum(
                1 for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign))
                and any(isinstance(t, ast.Name) and t.id == target.id
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))) == 1:
            total, (lst, line) = target.id, totals[target.id]
        elif summed(target):
            total, lst, line = ast.unparse(target), summed(target), call.lineno
        else:
            continue
        for loop in loops:
            if (getattr(loop, "end_lineno", None) or loop.lineno) >= line:
                continue
            for node in (n for stmt in loop.body for n in ast.walk(stmt)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == lst and len(node.args) == 1):
                    part = ast.unparse(node.args[0])
                    return total, ast.unparse(node), part, f"{lst}.append({{part}}.item())"
    return None


def summed_before_backward(text: str) -> tuple[str, str, str, str] | None:
    """``(total, statement, part, what to keep of each part)`` where the cell ``text`` sums parts
    of a loss in a loop (``total = total + part`` / ``total += part`` in a ``for``/``while`` body,
    or ``parts.append(part)`` there and ``total = sum(parts)`` / ``torch.stack(parts).sum()`` after
    it) and later calls ``total.backward()`` on that very total (no other assignment to it after
    the loop: a scaling would change the gradients): every part's autograd graph stays alive until
    that one backward. The last item is a statement with ``{part}`` where the part's name goes
    (``total += {part}.item()``). ``None`` otherwise."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "backward" and isinstance(n.func.value, ast.Name)]
    for loop in loops:
        end = getattr(loop, "end_lineno", None) or loop.lineno
        backward = {c.func.value.id for c in calls if c.lineno > end}  # type: ignore[attr-defined]
        for node in (n for stmt in loop.body for n in ast.walk(stmt)):
            name = part = None
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
                name, part = node.target.id, node.value
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)):
                n = node.targets[0].id
                a, b = node.value.left, node.value.right
                if isinstance(a, ast.Name) and a.id == n:
                    name, part = n, b
                elif isinstance(b, ast.Name) and b.id == n:
                    name, part = n, a
            if name is None or part is None or name not in backward:
                continue
            # the total is what is backpropagated: no other assignment to it (a scaling, a reset) after the loop
            others = [n for n in ast.walk(tree) if n is not node and getattr(n, "lineno", 0) > loop.lineno
                      and isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                      and any(isinstance(t, ast.Name) and t.id == name
                              for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
            if others:
                return None
            return name, ast.unparse(node), ast.unparse(part), f"{name} += {{part}}.item()"
    return _summed_list(tree, loops)
