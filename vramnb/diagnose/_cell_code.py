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

__all__ = ["stored_instead", "summed_before_backward", "summed_parts", "summed_parts_note"]


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


def _added_names(node: Any) -> list[str] | None:
    """The names an addition of plain names adds (``a + b + c``); ``None`` where it is anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _added_names(node.left), _added_names(node.right)
        return None if left is None or right is None else left + right
    return None


def summed_parts(text: str) -> tuple[str, str, list[str], str | None] | None:
    """``(total, statement, parts, zero_grad)`` where the cell ``text``, at its own top level and
    outside any loop, binds two or more names each once (``loss_src = model(x_src)...``), then sums
    exactly those names into a total (``loss = loss_src + loss_mix``, bound once), then calls
    ``total.backward()``, and no part's own expression reads an earlier part (their graphs are then
    separate as far as the cell shows). ``zero_grad``: the source of a ``.zero_grad(...)`` call
    between the first part and the backward (a backward per part must come after it), else
    ``None``. ``None`` where the cell has no such shape."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    body = tree.body
    binds: dict[str, list[int]] = {}
    for i, stmt in enumerate(body):
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                binds.setdefault(n.id, []).append(i)
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "backward"
                and isinstance(stmt.value.func.value, ast.Name)):
            continue
        total = stmt.value.func.value.id
        if len(binds.get(total, [])) != 1 or binds[total][0] >= i:
            continue
        j = binds[total][0]
        sums = body[j]
        if not (isinstance(sums, ast.Assign) and len(sums.targets) == 1):
            continue
        parts = _added_names(sums.value)
        if not parts or len(set(parts)) != len(parts) or len(parts) < 2:
            continue
        at = []
        for p in parts:
            where = binds.get(p, [])
            if len(where) != 1 or where[0] >= j or not isinstance(body[where[0]], ast.Assign):
                break
            at.append(where[0])
        else:
            first = min(at)
            earlier: set[str] = set()
            ok = True
            for k in sorted(at):
                reads = {n.id for n in ast.walk(body[k].value) if isinstance(n, ast.Name)}  # type: ignore[attr-defined]
                if reads & earlier:
                    ok = False
                earlier.add(next(p for p in parts if binds[p][0] == k))
            if not ok:
                continue
            zero = next((ast.unparse(n) for st in body[first + 1:i] for n in ast.walk(st)
                         if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                         and n.func.attr == "zero_grad"), None)
            return total, ast.unparse(sums), sorted(parts, key=lambda p: binds[p][0]), zero
    return None


def summed_parts_note(names: Mapping[str, Any], text: str, activations_at_peak: int, backward_runs: int) -> str | None:
    """One line for a cell that sums separately computed losses before one backward
    (:func:`summed_parts`): every part's autograd graph (the activations its forward saved) stays
    alive until that backward, so the peak holds them all. Said only where a backward ran in the
    cell, the activations at the peak are at least a MiB, and each part is now bound to a tensor
    that autograd made (``grad_fn`` set); the fix calls backward on each part as it is computed."""
    if backward_runs <= 0 or activations_at_peak < 1 << 20:
        return None
    got = summed_parts(text)
    if got is None:
        return None
    total, stmt, parts, zero = got
    for p in parts:
        v = names.get(p)
        if type(v) not in (torch.Tensor, torch.nn.Parameter) or v.grad_fn is None:  # type: ignore[union-attr]
            return None
    from .._units import format_bytes

    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}"
    order = "; ".join(f"`{p}.backward()` right after {p} is computed" for p in parts)
    moved = f" (move `{zero}` before the first of them: it would clear what the earlier ones accumulated)" if zero else ""
    return (f"`{stmt}` keeps the autograd graphs of {listed} (the activations each forward saved) alive together "
            f"until the one `{total}.backward()` (activations at the peak: {format_bytes(activations_at_peak)}): "
            f"call backward on each part instead, {order}{moved}; the gradients accumulate in .grad to the same sum, "
            f"and each part's graph is freed before the next forward runs (pass retain_graph=True where the parts "
            f"share a graph made before them)")


def backward_calls(source: str) -> tuple[bool, set[str]]:
    """(whether the cell's code calls a backward or an optimizer step anywhere: ``x.backward(``,
    ``torch.autograd.grad(``/``backward(``, ``opt.step(``; the names ``x`` it calls
    ``.backward()`` on). A cell that raised before reaching its backward ran none, yet is a
    training cell: its total is the loss to differentiate, not a number to ``.item()``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False, set()
    trains, on = False, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("backward", "step", "grad", "manual_backward"):
                trains = True
            if node.func.attr == "backward" and isinstance(node.func.value, ast.Name):
                on.add(node.func.value.id)
            if node.func.attr in ("backward", "manual_backward") and node.args and isinstance(node.args[0], ast.Name):
                on.add(node.args[0].id)
    return trains, on
