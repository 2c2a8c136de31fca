"""The autograd graphs a ``%%vram --breakdown`` cell leaves alive: which notebook name keeps
each one, and the one fix that fits the cell (``torch.no_grad()`` when no backward ran,
``.item()`` for a running total, ``.detach()`` for a list that collects results)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .._graph import MAX_DEPTH, container_items, graph_tensors, is_tooling
from .._units import format_bytes

__all__ = ["cell_accumulators", "kept_graph_note"]


def cell_accumulators(source: str) -> tuple[dict[str, str], dict[str, str]]:
    """``({name: added expression}, {list name: appended expression})`` of a cell: running
    totals (``total += loss``, ``total = total + loss``) and ``xs.append(v)`` calls, each
    expression as source text (:func:`_statements` has the statements). An unparsable cell has
    neither."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}, {}
    totals: dict[str, str] = {}
    appends: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            totals.setdefault(node.target.id, ast.unparse(node.value))
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)):
            n, (a, b) = node.targets[0].id, (node.value.left, node.value.right)
            if isinstance(a, ast.Name) and a.id == n:
                totals.setdefault(n, ast.unparse(b))
            elif isinstance(b, ast.Name) and b.id == n:
                totals.setdefault(n, ast.unparse(a))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
              and isinstance(node.func.value, ast.Name) and len(node.args) == 1):
            appends.setdefault(node.func.value.id, ast.unparse(node.args[0]))
    return totals, appends


def _graph_bytes(obj: Any, key: Callable[[torch.Tensor], int | None], named: set[int]) -> tuple[dict[int, int], bool]:
    """(bytes of the storages that the autograd graphs of the tensors ``obj`` holds saved for
    backward, not counting leaves nor those tensors themselves; whether any of them has a graph)."""
    roots, own = [], set()
    for t in _entries(obj, MAX_DEPTH):
        if issubclass(type(t), torch.Tensor):
            k = key(t)
            if k is not None:
                own.add(k)
            if t.grad_fn is not None:
                roots.append(t.grad_fn)
    seen: dict[int, Any] = {}
    sizes: dict[int, int] = {}
    for root in roots:
        for s in graph_tensors(root, seen, grads=False):
            if not isinstance(s, torch.Tensor):
                continue
            k = key(s)
            if k is None:
                continue
            if s.is_leaf and s.requires_grad:  # a parameter or input (a view of one is saved too): its owner's
                own.add(k)
            else:
                sizes[k] = s.untyped_storage().nbytes()
    seen.clear()
    return {k: b for k, b in sizes.items() if k not in own and k not in named}, bool(roots)


def _statements(source: str) -> dict[str, str]:
    """``{name: the first running-total statement of name, as source text}``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.AugAssign, ast.Assign)) and cell_accumulators(ast.unparse(node))[0]:
            name = next(iter(cell_accumulators(ast.unparse(node))[0]))
            out.setdefault(name, ast.unparse(node))
    return out


def _assigned(source: str) -> set[str]:
    """The names a cell binds or appends to."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return out | set(cell_accumulators(source)[1])


def _entries(obj: Any, depth: int) -> list[Any]:
    """The tensors ``obj`` is or holds as entries of lists, tuples and dict values."""
    if issubclass(type(obj), torch.Tensor):
        return [obj]
    if depth <= 0 or not issubclass(type(obj), (list, tuple, dict)):
        return []
    items = container_items(obj)  # through the built-in types' own methods: a subclass's are the user's code
    return [t for it in items for t in _entries(it, depth - 1)]


def kept_graph_note(names: Mapping[str, Any], source: str, key: Callable[[torch.Tensor], int | None],
                    backward_runs: int) -> str | None:
    """One line naming the notebook names whose tensors keep an autograd graph alive after the
    cell, what each graph's saved tensors take (bytes on the measured device) and the fix that
    fits: ``backward_runs`` is the number of autograd engine runs seen during the cell (0: a
    ``torch.no_grad()`` cell builds none of these graphs). ``None`` when no name keeps one."""
    totals, appends = cell_accumulators(source)
    stmts = _statements(source)
    assigned = _assigned(source)  # a name the cell does not set keeps a graph of an earlier cell
    kept: list[tuple[str, int]] = []
    union: dict[int, int] = {}  # a graph two names keep (loss's, inside total's) counts once
    named: set[int] = set()  # storages a name holds itself (an input in a list, a parameter): theirs
    for obj in list(names.values()):
        try:
            ts = [*obj.parameters(), *obj.buffers()] if issubclass(type(obj), torch.nn.Module) else _entries(obj, MAX_DEPTH)
            named.update(k for k in map(key, ts) if k is not None)
        except Exception:  # noqa: BLE001 - a note must never break the report
            continue
    fixes: list[str] = []
    for name, obj in list(names.items()):
        if name.startswith("_") or issubclass(type(obj), (torch.nn.Module, torch.optim.Optimizer)) or is_tooling(obj):
            continue
        if name not in assigned or (name not in totals and name not in appends and not issubclass(type(obj), torch.Tensor)):
            continue  # other containers: the holders' view (%vram) names what they keep
        try:
            sizes, has_graph = _graph_bytes(obj, key, named)
        except Exception:  # noqa: BLE001 - a note must never break the report
            continue
        nbytes = sum(sizes.values())
        n_kept = len(kept)
        if name in totals and issubclass(type(obj), torch.Tensor) and has_graph:
            kept.append((name, nbytes))
            fixes.append(f"`{stmts.get(name, name + ' += ' + totals[name])}` chains each graph onto {name}: "
                         f"add `{_item(totals[name])}` instead")
        elif name in appends and issubclass(type(obj), list) and has_graph:
            kept.append((name, nbytes))
            fixes.append(f"`{name}.append({appends[name]})` keeps each graph: append "
                         f"`{_call(appends[name], 'detach')}` (or `{_item(appends[name])}` for a scalar)")
        elif issubclass(type(obj), torch.Tensor) and has_graph and nbytes and backward_runs == 0 and name in assigned:
            kept.append((name, nbytes))
        if len(kept) > n_kept:
            union.update(sizes)
    if not kept:
        return None
    what = ", ".join(f"{n} ({format_bytes(b)})" if b else f"{n} (nodes only, no saved tensor)"
                     for n, b in kept)
    line = f"autograd graphs kept after the cell by {what}"
    total = sum(union.values())
    if backward_runs == 0 and total:
        fixes.insert(0, "no backward ran in this cell: if none will run on these results, wrap the cell in "
                        "`with torch.no_grad():` (or `torch.inference_mode()`) so that it builds no graph "
                        f"(these keep {format_bytes(total)})")
    if not fixes:
        return None
    return line + ": " + "; ".join(fixes)


def _call(expr: str, method: str) -> str:
    try:
        simple = isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    except SyntaxError:
        simple = False
    return f"{expr}.{method}()" if simple else f"({expr}).{method}()"


def _item(expr: str) -> str:
    return _call(expr, "item")


def grad_graph_note(names: Mapping[str, Any], device: torch.device) -> str | None:
    """One line for the gradients that carry an autograd graph (left by
    ``backward(create_graph=True)``): which ``name.param.grad`` / ``x.grad``, the bytes on
    ``device`` of what their graphs keep beyond the parameters and gradients the notebook's
    names hold, and how to drop them. ``None`` when no gradient has a graph."""
    from .._attribution import key_fn, keys_of
    from .._holder_entries import _grad_graphs

    key = key_fn(device)
    found: list[tuple[str, Any]] = []
    resets: list[str] = []
    owned: set[int] = set()  # parameters, inputs and their gradients: their names hold them
    mods = {n: o for n, o in names.items() if issubclass(type(o), torch.nn.Module) and not n.startswith("_")}
    opts = {n: o for n, o in names.items() if issubclass(type(o), torch.optim.Optimizer) and not n.startswith("_")}
    for n, m in mods.items():
        hit = False
        for pn, p in m.named_parameters():
            owned |= keys_of([p, p.grad], key)
            if p.grad is not None and p.grad.grad_fn is not None:
                found.append((f"{n}.{pn}.grad", p))
                hit = True
        if hit:
            params = {id(p) for p in m.parameters()}
            opt = next((o for o, v in opts.items() if any(id(q) in params for g in v.param_groups for q in g["params"])),
                       None)
            resets.append(f"`{opt}.zero_grad(set_to_none=True)`" if opt else f"`{n}.zero_grad(set_to_none=True)`")
    for n, t in names.items():
        if n.startswith("_") or not issubclass(type(t), torch.Tensor) or not t.is_leaf:
            continue
        g = t.grad
        owned |= keys_of([t, g], key)
        if g is not None and g.grad_fn is not None:
            found.append((f"{n}.grad", t))
            resets.append(f"`{n}.grad = None`")
    if not found:
        return None
    sizes: dict[int, int] = {}
    for t in _grad_graphs([p for _, p in found]):
        k = key(t)
        if k is not None and k not in owned:
            sizes[k] = t.untyped_storage().nbytes()
    shown = ", ".join(n for n, _ in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    verb = "keeps an autograd graph" if len(found) == 1 else "keep autograd graphs"
    return (f"{shown} {verb} of {format_bytes(sum(sizes.values()))} (backward(create_graph=True)): set the "
            f"gradients to None after use ({' / '.join(dict.fromkeys(resets))}), or use "
            "`torch.autograd.grad(..., create_graph=True)`, which returns the gradients instead of storing them")
