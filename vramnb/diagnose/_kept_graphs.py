"""The autograd graphs a ``%%vram --breakdown`` cell leaves alive: which notebook name keeps
each one, and the one fix that fits the cell (``torch.no_grad()`` when no backward ran,
``.item()`` for a running total, ``.detach()`` for a list that collects results)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .._graph import MAX_DEPTH, container_items, graph_tensors, is_tooling, tensor_items
from .._units import format_bytes
from ._cell_code import backward_calls

__all__ = ["carried_states", "cell_accumulators", "kept_graph_note", "regrowth_advice"]



def _detach_or_item(expr: str, last: Any) -> str:
    """`` `expr.detach()` ``, with `` `expr.item()` `` as the other way only where the last value appended is one
    number (or not known); a (N, 3) tensor gets no ``.item()``."""
    try:
        one = last is None or not issubclass(type(last), torch.Tensor) or last.numel() == 1
    except Exception:  # noqa: BLE001
        one = True
    return f"`{_call(expr, 'detach')}`" + (f" (or `{_item(expr)}` for a scalar)" if one else "")

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


def carried_states(source: str) -> dict[str, str]:
    """``{name: statement}`` of the names a cell assigns from an expression that reads the same
    name (``hidden = rnn(data, hidden)``, ``h, c = lstm(x, (h, c))``, ``out, h = gru(x, h)``):
    state carried from one step to the next, each with the first such statement as source text.
    Running totals (``total += x``, ``total = total + x``: :func:`cell_accumulators`) are not
    in it. An unparsable cell has none."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    totals = cell_accumulators(source)[0]
    out: dict[str, str] = {}
    todo: list[ast.AST] = [tree]  # the cell's own scope: a function's locals are no notebook names
    nodes: list[ast.AST] = []
    while todo:
        n = todo.pop()
        nodes.append(n)
        todo += [c for c in ast.iter_child_nodes(n)
                 if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))]
    for node in reversed(nodes):
        if not isinstance(node, ast.Assign):
            continue
        targets: list[str] = []
        for t in node.targets:
            elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
            targets += [e.id for e in elts if isinstance(e, ast.Name)]
        read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for name in targets:
            if name in read and name not in totals:
                out.setdefault(name, ast.unparse(node))
    return out


def _len_over(test: ast.expr, name: str) -> bool:
    """``test`` is ``len(name) > limit`` (or ``>=``)."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Gt, ast.GtE))
            and isinstance(test.left, ast.Call) and isinstance(test.left.func, ast.Name) and test.left.func.id == "len"
            and len(test.left.args) == 1 and isinstance(test.left.args[0], ast.Name) and test.left.args[0].id == name)


def _pops(stmt: ast.stmt, name: str, methods: tuple[str, ...]) -> bool:
    """``stmt`` is ``name.<method>(...)`` for one of ``methods`` (``pop``, ``popleft``)."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr in methods and isinstance(stmt.value.func.value, ast.Name)
            and stmt.value.func.value.id == name)


def _capped_by_count(source: str, name: str, obj: Any, device: torch.device,
                     names: Mapping[str, Any] | None = None) -> str | None:
    """Where the cell trims ``name`` (a list or deque) to a number of entries (``while len(episodes) >
    maximum_episodes: episodes.popleft()``) and it grows all the same: its entries get larger (episodes that
    get longer), so the count is no bound on the bytes; the fix bounds the bytes too (HandyRL#189: a buffer of
    episodes bounded by their count while episodes get longer)."""
    import collections

    if not issubclass(type(obj), (list, collections.deque)) or len(obj) < 2:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.While) or len(node.body) != 1:
            continue
        t, body = node.test, node.body[0]
        if not _len_over(t, name) or not _pops(body, name, ("pop", "popleft")):
            continue
        from .._holders import storages_held

        assert isinstance(t, ast.Compare)
        cap_node = t.comparators[0]
        cap = cap_node.value if isinstance(cap_node, ast.Constant) else \
            (names or {}).get(cap_node.id) if isinstance(cap_node, ast.Name) else None
        if type(cap) is not int or len(obj) < cap:
            return None  # below its count: growing in number, which the count bounds
        each = sum(storages_held(obj, device).values()) // len(obj)
        limit, pop = ast.unparse(cap_node), ast.unparse(body)
        return (f"`while {ast.unparse(t)}: {pop}` keeps {name} at {cap} entries, and it is at that count, yet it "
                f"grows: its entries get larger (about {format_bytes(each)} each now), so the count is no bound on the "
                f"memory; bound the bytes too: `while len({name}) > {limit} or sum(map(nbytes, {name})) > budget: "
                f"{pop}` with `nbytes = lambda e: sum(t.nbytes for t in (e if isinstance(e, (list, tuple)) else [e]))` "
                "and budget the bytes you allow (or keep a running total as entries come and go)")
    return None


def _trimmed_once(source: str, name: str) -> tuple[str, str, str] | None:
    """``(test, limit, removal)`` where the cell trims ``name`` with an ``if`` (``if len(replay) >
    memory_limit: replay.pop(0)``, or ``del replay[0]``) outside any loop, while a loop of the cell appends
    to it: one entry removed per run, many added (a replay memory that still grows)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))]
    in_loop = {id(c) for lp in loops for c in ast.walk(lp)}
    appended = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend")
                   and isinstance(n.func.value, ast.Name) and n.func.value.id == name and id(n) in in_loop
                   for n in ast.walk(tree))
    if not appended:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or id(node) in in_loop or len(node.body) != 1:
            continue
        t, body = node.test, node.body[0]
        if not _len_over(t, name):
            continue
        assert isinstance(t, ast.Compare)
        pop = _pops(body, name, ("pop",))
        delete = isinstance(body, ast.Delete) and len(body.targets) == 1 and \
            isinstance(body.targets[0], ast.Subscript) and isinstance(body.targets[0].value, ast.Name) and \
            body.targets[0].value.id == name and not isinstance(body.targets[0].slice, ast.Slice)
        if pop or delete:
            return ast.unparse(t), ast.unparse(t.comparators[0]), ast.unparse(body)
    return None


def _has_graph(obj: Any) -> bool:
    return issubclass(type(obj), torch.Tensor) and obj.grad_fn is not None


def _detached(expr: str, names: Mapping[str, Any], last: Any = None) -> str | None:
    """``expr`` (a tuple or list display) with each element that holds a graph detached:
    ``(obs, h, c)`` → ``(obs, h.detach(), c.detach())``. An element holds a graph when it is a
    name of ``names`` bound to a tensor with one, or when the same position of ``last`` (the
    entry the display made last, a tuple or list) is such a tensor. ``None`` when ``expr`` is no
    such display or no element has a graph."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, (ast.Tuple, ast.List)):
        return None
    made = list(last) if issubclass(type(last), (tuple, list)) and len(last) == len(node.elts) else None
    parts, hit = [], False
    for i, e in enumerate(node.elts):
        graph = (isinstance(e, ast.Name) and _has_graph(names.get(e.id))) or (made is not None and _has_graph(made[i]))
        parts.append(_call(ast.unparse(e), "detach") if graph else ast.unparse(e))
        hit = hit or graph
    if not hit:
        return None
    inner = ", ".join(parts) + ("," if len(parts) == 1 and isinstance(node, ast.Tuple) else "")
    return f"({inner})" if isinstance(node, ast.Tuple) else f"[{inner}]"


def _is_display(expr: str) -> bool:
    try:
        return isinstance(ast.parse(expr, mode="eval").body, (ast.Tuple, ast.List))
    except SyntaxError:
        return False


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
    items = tensor_items(obj)  # through the built-in types' own methods: a subclass's are the user's code
    return [t for it in items for t in _entries(it, depth - 1)]


def kept_graph_note(names: Mapping[str, Any], source: str, key: Callable[[torch.Tensor], int | None],
                    backward_runs: int) -> str | None:
    """One line naming the notebook names whose tensors keep an autograd graph alive after the
    cell, what each graph's saved tensors take (bytes on the measured device) and the fix that
    fits: ``backward_runs`` is the number of autograd engine runs seen during the cell (0: a
    ``torch.no_grad()`` cell builds none of these graphs). ``None`` when no name keeps one."""
    totals, appends = cell_accumulators(source)
    trains, differentiated = backward_calls(source)
    totals = {n: e for n, e in totals.items() if n not in differentiated}  # the loss the cell backpropagates
    carried = carried_states(source)
    carried_said: set[str] = set()
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
            each = _detached(appends[name], names, obj[-1] if obj else None)
            if each or not _is_display(appends[name]):
                fixes.append(f"`{name}.append({appends[name]})` keeps each graph: append " +
                             (f"`{each}`" if each else _detach_or_item(appends[name], obj[-1] if obj else None)))
        elif name in carried and issubclass(type(obj), torch.Tensor) and has_graph:
            kept.append((name, nbytes))
            stmt = carried[name]
            if stmt not in carried_said:
                carried_said.add(stmt)
                same = [n for n, st in carried.items() if st == stmt and _has_graph(names.get(n))]
                whose = " and ".join(same)
                detach = (f"{same[0]} = {same[0]}.detach()" if len(same) == 1 else
                          f"{', '.join(same)} = {', '.join(n + '.detach()' for n in same)}")
                fixes.append(f"`{stmt}` carries {whose} from one step to the next, so each step's graph is chained "
                             f"onto the last: detach {'it' if len(same) == 1 else 'them'} where a step starts "
                             f"(`{detach}`; truncated backpropagation through time)")
        elif issubclass(type(obj), torch.Tensor) and has_graph and nbytes and backward_runs == 0 and name in assigned \
                and not trains:
            kept.append((name, nbytes))
        if len(kept) > n_kept:
            union.update(sizes)
    from ._attr_sums import attribute_sums

    for found in attribute_sums(names, source):  # `self.sum += val` in a method the cell calls
        try:
            sizes, _ = _graph_bytes(found.tensors, key, named)
        except Exception:  # noqa: BLE001 - a note must never break the report
            continue
        kept.append((found.path, sum(sizes.values())))
        union.update(sizes)
        fixes.append(found.fix())
    if not kept:
        return None
    what = ", ".join(f"{n} ({format_bytes(b)})" if b else f"{n} (nodes only, no saved tensor)"
                     for n, b in kept)
    line = f"autograd graphs kept after the cell by {what}"
    total = sum(union.values())
    if backward_runs == 0 and total and not trains:
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
    return (f"{shown} {verb} of {format_bytes(sum(sizes.values()))} (a .grad carries a graph where backward ran "
            "with create_graph=True, or where code assigned a tensor with a graph to .grad): set the gradients to None "
            f"after use ({' / '.join(dict.fromkeys(resets))}); assign detached tensors to .grad (`.detach()`), and "
            "for a second-order gradient use `torch.autograd.grad(..., create_graph=True)`, which returns the "
            "gradients instead of storing them")


def _subscript_totals(source: str) -> dict[str, str]:
    """``{name: statement}`` of running totals kept in a container's entries
    (``epoch_loss[key] += loss[key]``), the first statement of each name as source text."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Subscript)
                and isinstance(node.target.value, ast.Name)):
            out.setdefault(node.target.value.id, ast.unparse(node))
    return out


def regrowth_advice(name: str, obj: Any, source: str, device: torch.device | None = None,
                    names: Mapping[str, Any] | None = None) -> str | None:
    """The fix for a notebook name that grows on every run of the cell ``source``, from what it
    is and what the cell does with it: a running total (``x += loss``: ``loss.item()``), a
    carried state (``h = rnn(x, h)``: ``h.detach()``), a container whose tensors keep their
    graphs (``.detach()`` what is stored, with the cell's own expression); else how the object
    holds its bytes on ``device`` (:func:`._holding.holding_note`: stored exceptions' tracebacks,
    copies of weights, a class attribute, an object's state and its ``reset()``); else a container
    whose tensors keep no graph (store less), one the cell does not name (code it calls fills
    it). ``None`` where none of these fits (the caller's general line then). ``names``: the
    notebook's namespace."""
    from ._holding import holding_note

    def how() -> str | None:
        return holding_note(name, obj, device or torch.device("cpu"), names, source=source)

    totals, appends = cell_accumulators(source)
    if issubclass(type(obj), torch.Tensor):
        if not _has_graph(obj):
            return None
        if name in totals and name not in backward_calls(source)[1]:
            stmt = _statements(source).get(name, f"{name} += {totals[name]}")
            return f"`{stmt}` chains each step's graph onto {name}: add `{_item(totals[name])}` instead"
        carried = carried_states(source).get(name)
        if carried:
            return (f"`{carried}` carries {name} from one step to the next, so {name} keeps every step's graph: detach "
                    f"it where a step starts (`{name} = {name}.detach()`), or run the cell under `torch.no_grad()` "
                    "if no backward needs it")
        return None
    capped = _capped_by_count(source, name, obj, device or torch.device("cpu"), names)
    if capped is not None:
        return capped
    if not issubclass(type(obj), (list, dict)):
        from ._attr_sums import attribute_sums

        found = [f for f in attribute_sums({name: obj}, source) if f.path.startswith(name)]
        return "; ".join(f.fix() for f in found) or how()
    try:
        tree = ast.parse(source)
        named = any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))
    except (SyntaxError, ValueError):
        return None
    empty = f"`{name}.clear()`"
    if not named:
        return how() or (f"this cell does not name {name}: code it calls (a function, a hook) adds to it on every "
                         f"run; empty it when done ({empty}) or stop what fills it")
    graph = any(t.grad_fn is not None for t in _entries(obj, MAX_DEPTH) if issubclass(type(t), torch.Tensor))
    if not graph and issubclass(type(obj), list):
        from ._kept_models import model_payload

        pay = model_payload(list(container_items(obj)))
        if pay is not None:  # each entry is a trained model: the result; what it keeps beside its weights goes
            return (f"{name} keeps a model per run, and each keeps {format_bytes(pay.nbytes)} in `.{pay.attr}` beside "
                    f"its weights (the last one's): drop that from the models you keep (`for m in {name}: "
                    f"m.{pay.attr} = None`) rather than emptying {name}")
    trim = _trimmed_once(source, name) if issubclass(type(obj), list) else None
    if trim is not None:
        test, limit, pop = trim
        return (f"`if {test}: {pop}` removes one entry per run while the cell adds more than one (in its loop), so "
                f"{name} still grows by the difference on every run: trim until the limit holds (`while {test}: {pop}`),"
                f" or keep it as `collections.deque(maxlen={limit})`, which drops the oldest entry as each new one "
                "comes")
    if not graph:
        return how() or (f"{name} is added to on every run and its tensors keep no graph: what grows is what it "
                         f"stores; store less in it (reduced values, not whole tensors), or empty it once what it "
                         f"holds has been used ({empty})")
    if name in appends:
        expr = appends[name]
        each = _detached(expr, {}, obj[-1] if issubclass(type(obj), list) and obj else None)
        if each or not _is_display(expr):
            return (f"`{name}.append({expr})` keeps each step's graph: append "
                    + (f"`{each}`" if each else _detach_or_item(expr, obj[-1] if issubclass(type(obj), list) and obj
                                                                else None)))
    sub = _subscript_totals(source).get(name)
    if sub:
        value = sub.split("+=", 1)[1].strip()
        return f"`{sub}` chains each step's graph onto {name}'s entries: add `{_item(value)}` instead"
    return how() or (f"{name}'s tensors keep their autograd graphs: store them detached (`.detach()`, or `.item()` "
                     f"for a scalar)")
