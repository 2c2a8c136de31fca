"""What a measured cell leaves alive that its code no longer needs, with the ``del`` or call
that frees it: names a loop bound (a Python loop has no scope of its own), a dict holding a
second copy of a module's parameters (a loaded checkpoint), an optimizer whose model was
deleted, a small view that keeps a large storage (a name's, or an entry's of a dict or list the
cell fills: ``snapshot['head'] = x[:10]``). Each line names only the notebook's own
names and says the bytes that the fix frees (what deleting the name alone frees, from the
holders' walk: :func:`vramnb._holders.find_holders`)."""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .._optim_state import state_tensors
from .._graph import MAX_DEPTH
from .._holder_entries import MAX_LEVELS, items_of
from .._units import format_bytes
from ._kept_graphs import _entries, carried_states, cell_accumulators

__all__ = ["leftover_notes", "loop_names", "reassigned_peak_note"]

#: the least bytes a leftover must free to be worth a line
MIN_BYTES = 1 << 20


def _walk(tree: ast.AST) -> list[ast.AST]:
    """The nodes of ``tree`` at the cell's own (module) scope: not inside a function, a lambda
    or a class body, whose names are not the notebook's."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        todo += [c for c in ast.iter_child_nodes(node)
                 if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))]
    return out


def loop_names(source: str) -> list[str]:
    """The names a cell binds inside a ``for``/``while`` loop's body (assignments, not the loop
    targets), in order of first binding; running totals, carried states, containers the loop
    adds to and names the cell reads after the loop are not in it (their values are meant to
    outlive a pass)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    totals, appends = cell_accumulators(source)
    skip = set(totals) | set(appends) | set(carried_states(source))
    out: list[str] = []
    read_after: set[str] = set()  # names the cell reads after a loop ends: still needed there
    for parent in _walk(tree):
        body = getattr(parent, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
                read_after |= {n.id for later in body[i + 1:] for n in _walk(later)
                               if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    skip |= read_after
    from ._kept_results import conditionally_bound

    skip |= conditionally_bound(tree)  # a loop's kept result (the best state so far), not a pass's leftover
    for loop in _walk(tree):
        if not isinstance(loop, (ast.For, ast.While, ast.AsyncFor)):
            continue
        for stmt in loop.body:
            for node in _walk(stmt):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                            if isinstance(e, ast.Name) and e.id not in skip and e.id not in out:
                                out.append(e.id)
    return out


def _deleted(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [t.id for n in _walk(tree) if isinstance(n, ast.Delete) for t in n.targets if isinstance(t, ast.Name)]


def _bound(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n.id for n in _walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _filled(source: str) -> set[str]:
    """The names whose containers the cell fills: ``d[k] = …``, ``xs.append(…)``/``extend``/``insert``,
    ``d.update(…)``/``setdefault``, at the cell's own scope."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for n in _walk(tree):
        if isinstance(n, ast.Assign):
            out |= {t.value.id for t in n.targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)}
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
              and n.func.attr in ("append", "extend", "insert", "update", "setdefault")):
            out.add(n.func.value.id)
    return out


def _small_views(name: str, obj: Any, levels: int) -> list[tuple[str, torch.Tensor]]:
    """``[(path, tensor)]`` of the tensors the dict or list ``obj`` holds (through dicts and lists
    only, ``levels`` deep: an entry one can assign to) that view a storage at least four times
    (and :data:`MIN_BYTES`) larger than their own data; paths as the holders name entries
    (``snapshot['head']``)."""
    out: list[tuple[str, torch.Tensor]] = []
    if levels <= 0 or not issubclass(type(obj), (dict, list)):
        return out
    for suffix, v, _ in items_of(obj):
        path = name + suffix
        if issubclass(type(v), torch.Tensor):
            if v.untyped_storage().nbytes() >= max(MIN_BYTES, 4 * v.numel() * v.element_size()):
                out.append((path, v))
        else:
            out += _small_views(path, v, levels - 1)
    return out


def _training_objects(obj: Any, levels: int = 2) -> tuple[list[torch.nn.Module], list[torch.optim.Optimizer]]:
    """The modules and optimizers ``obj`` is or holds through dicts, lists and tuples, ``levels`` deep."""
    if issubclass(type(obj), torch.nn.Module):
        return [obj], []
    if issubclass(type(obj), torch.optim.Optimizer):
        return [], [obj]
    mods: list[torch.nn.Module] = []
    opts: list[torch.optim.Optimizer] = []
    if levels > 0 and issubclass(type(obj), (dict, list, tuple)):
        for _, v, _ in items_of(obj):
            m, o = _training_objects(v, levels - 1)
            mods += m
            opts += o
    return mods, opts


def _trained_entries(obj: Any) -> list[tuple[str, list[torch.nn.Module], list[torch.optim.Optimizer]]]:
    """``[(entry suffix, modules, optimizers)]`` of the dict or list ``obj``'s entries that hold a
    trained model or optimizer (a parameter with a gradient, or an optimizer with state)."""
    out = []
    for suffix, v, _ in items_of(obj) if issubclass(type(obj), (dict, list)) else []:
        mods, opts = _training_objects(v)
        trained = any(p.grad is not None for m in mods for p in m.parameters()) or any(o.state for o in opts)
        if trained:
            out.append((suffix, mods, opts))
    return out


def _looped(source: str) -> set[str]:
    """The names a ``for`` loop of the cell iterates over (``for k, v in d.items()``, ``for m in
    enumerate(ms)``: any name in the loop's iterable) or fills inside its body (``xs.append``,
    ``d[k] = …``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for loop in _walk(tree):
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            out |= {n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)}
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            out |= _filled("\n".join(ast.unparse(st) for st in loop.body))
    return out


def _bytes_once(tensors: list[Any]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if issubclass(type(t), torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _module_copies(obj: Any, modules: Mapping[str, torch.nn.Module]) -> tuple[list[str], int]:
    """(the modules whose parameters the tensors of the dict ``obj`` copy, by shape and dtype and
    not by storage; the bytes of those tensors)."""
    ts = [t for t in _entries(obj, MAX_DEPTH) if issubclass(type(t), torch.Tensor)]
    if not ts:
        return [], 0
    hits: list[str] = []
    matched: dict[int, int] = {}  # each of obj's storages once (two modules of one shape match the same tensors)
    for mname, m in modules.items():
        params: dict[tuple[tuple[int, ...], torch.dtype], list[int]] = {}
        for p in m.parameters():
            params.setdefault((tuple(p.shape), p.dtype), []).append(p.untyped_storage().data_ptr())
        got = [t for t in ts if (tuple(t.shape), t.dtype) in params
               and t.untyped_storage().data_ptr() not in params[(tuple(t.shape), t.dtype)]]
        n = sum(t.numel() * t.element_size() for t in got)
        if n and n * 2 >= sum(p.numel() * p.element_size() for p in m.parameters()):
            hits.append(mname)
            matched.update((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in got)
    return hits, sum(matched.values())


def _kept_off_device(name: str, model: str, device_kind: str, frees: int) -> str:
    """How to keep ``name``, a copy of ``model``'s weights that the notebook means to keep, off the
    device it runs out on: copied to the CPU where that device is another; saved to disk where it is
    the CPU. ``frees``: the bytes deleting ``name`` frees on the device (what either frees there)."""
    if device_kind != "cpu":
        return (f"keep it, but on the CPU: `{name} = {{k: v.detach().cpu() for k, v in {model}.state_dict().items()}}` "
                f"in place of the copy on the device frees {format_bytes(frees)} there "
                f"(`{model}.load_state_dict({name})` copies it back)")
    return (f"on the CPU it can only leave memory for disk: `torch.save({model}.state_dict(), '{name}.pt')` in place "
            f"of the copy, and `{model}.load_state_dict(torch.load('{name}.pt'))` where it is needed, frees "
            f"{format_bytes(frees)} (on a GPU: keep the copy on the CPU, "
            f"`{{k: v.detach().cpu() for k, v in {model}.state_dict().items()}}`)")


def leftover_notes(names: Mapping[str, Any], source: str, frees: Callable[[], dict[str, int]],
                   device_kind: str, kept_by: Callable[[list[str]], dict[str, str]] | None = None) -> list[str]:
    """The lines for what the cell ``source`` left alive that it may not need (see the module
    docstring). ``frees()`` gives ``{name or entry path: bytes deleting that name (entry) alone frees}``
    on the measured device (called only when a candidate exists; entries as the holders name them,
    ``snapshot['head']``); ``device_kind``: ``"cuda"``, ``"cpu"``...
    Each line's bytes are what the fix it names frees; nothing under :data:`MIN_BYTES`. ``kept_by(names)``:
    name -> what else keeps the name's object (:func:`._referrer_paths.kept_elsewhere`), for those whose
    deletion does not let it go; a name something else keeps gets no ``del``."""
    loops = [n for n in loop_names(source) if n in names and not n.startswith("_")  # a model or optimizer is kept
             and not issubclass(type(names[n]), (torch.nn.Module, torch.optim.Optimizer))]
    bound = _bound(source)
    modules = {n: o for n, o in names.items() if issubclass(type(o), torch.nn.Module) and not n.startswith("_")}
    # a dict of tensors shaped like a module's parameters is a copy of them only where the cell loads or takes a
    # state dict (gradients or moments kept by name have the same shapes)
    states = any(k in source for k in ("load_state_dict(", "torch.load(", "state_dict(", "load_file("))
    dicts = [n for n, o in names.items() if issubclass(type(o), dict) and n in bound and not n.startswith("_")
             and states]
    gone = [n for n in _deleted(source) if n not in names]
    opts = [n for n, o in names.items() if issubclass(type(o), torch.optim.Optimizer) and not n.startswith("_")] \
        if gone else []
    views = [n for n, o in names.items() if n in bound and issubclass(type(o), torch.Tensor) and not n.startswith("_")
             and o.untyped_storage().nbytes() >= max(MIN_BYTES, 4 * o.numel() * o.element_size())]
    filled = bound | _filled(source)
    entry_views = [pv for n, o in names.items() if n in filled and not n.startswith("_")
                   and issubclass(type(o), (dict, list)) for pv in _small_views(n, o, MAX_LEVELS)]
    # a list or dict whose every entry is such a view (slices appended in a loop): one line for it, with one fix
    all_views = [n for n, o in names.items() if n in filled and not n.startswith("_") and issubclass(type(o), (dict, list))
                 and len(items_of(o)) >= 2
                 and len([p for p, _ in entry_views if p.startswith(n + "[") and "][" not in p[len(n):]]) == len(items_of(o))]
    entry_views = [(p, t) for p, t in entry_views if not any(p.startswith(n + "[") for n in all_views)]
    from ._cell_code import backward_calls

    looped = _looped(source)
    trained = [(n, es) for n, o in names.items() if n in looped and not n.startswith("_")
               and issubclass(type(o), (dict, list)) for es in [_trained_entries(o)] if sum(1 for e in es if e[1]) >= 2] \
        if backward_calls(source)[0] else []
    if not (loops or dicts or opts or views or entry_views or trained or all_views):
        return []
    free = frees()
    out: list[str] = []
    kept = [(n, free.get(n, 0)) for n in loops if free.get(n, 0) > 0]
    kept_else = kept_by([n for n, _ in kept]) if kept_by is not None and kept else {}
    if kept_else:  # deleting these frees nothing: something else keeps them
        if sum(b for n, b in kept if n in kept_else) < MIN_BYTES:
            kept_else = {}
        kept = [(n, b) for n, b in kept if n not in kept_else]
    if kept_else:
        from ._referrer_paths import ENTRIES_KEPT

        out.append("bound in a loop, but deleting them frees nothing: " + "; ".join(
            f"{n}'s tensors are also kept by {w[len(ENTRIES_KEPT):]}" if w.startswith(ENTRIES_KEPT) else
            f"{n} is also kept by {w}" for n, w in list(kept_else.items())[:3]))
    if sum(b for _, b in kept) >= MIN_BYTES:
        listed = ", ".join(f"{n} ({format_bytes(b)})" for n, b in kept)
        out.append(f"bound in a loop and still alive after it (a Python loop has no scope of its own): {listed}; "
                   "each pass's values also stay alive while the next pass builds its own: "
                   f"`del {', '.join(n for n, _ in kept)}` at the end of the loop body (where the next pass does not "
                   "read them) or after the loop frees them (an object in a reference cycle at the next gc.collect()"
                   + ("" if gc.isenabled() else ", which only an explicit gc.collect() runs: the garbage collector "
                      "is off (gc.disable())") + "), as does running the loop in a function")
    from ._kept_results import conditionally_bound

    try:
        kept_results = conditionally_bound(ast.parse(source))
    except (SyntaxError, ValueError):
        kept_results = set()
    for n in dicts:
        which, copied = _module_copies(names[n], modules)
        if which and free.get(n, 0) >= MIN_BYTES:
            how = ("load_state_dict copied them into the model's own tensors" if "load_state_dict(" in source
                   else "the module keeps its own parameters")
            if n in kept_results and "load_state_dict(" not in source:
                # the loop's kept result (the best state so far): kept, off the device, never deleted
                out.append(f"{n} holds a second copy of the parameters of {', '.join(which)} "
                           f"({format_bytes(copied)}; {how}), the result the loop keeps (bound only where its "
                           f"condition holds): {_kept_off_device(n, which[0], device_kind, free[n])}")
                continue
            where = ("; load it with `torch.load(..., map_location='cpu')` so that the copy is never on the GPU"
                     if device_kind == "cuda" else "")
            out.append(f"{n} holds a second copy of the parameters of {', '.join(which)} ({format_bytes(copied)}; "
                       f"{how}): `del {n}`{' once loaded' if 'load_state_dict(' in source else ''} frees {format_bytes(free[n])}"
                       f"{where}")
    owned = {id(p) for m in modules.values() for p in m.parameters()}
    for n in opts:
        params = [p for g in names[n].param_groups for p in g["params"]]
        if params and not any(id(p) in owned for p in params) and free.get(n, 0) >= MIN_BYTES:
            out.append(f"{n} still holds the parameters it steps ({', '.join(gone)} deleted: no module of the notebook "
                       f"holds them now), their gradients and its state: `del {n}` frees {format_bytes(free[n])}")
    for n, entries in trained:
        mods = [m for _, ms, _ in entries for m in ms]
        optims = [o for _, _, os in entries for o in os]
        params = [p for m in mods for p in m.parameters()] + [p for o in optims for g in o.param_groups
                                                               for p in g["params"]]
        what = [f"{len(entries)} trained entries ({len(mods)} models, {len(optims)} optimizers)"]
        held = [f"parameters {format_bytes(_bytes_once(params))}",
                f"gradients {format_bytes(_bytes_once([p.grad for p in params]))}"]
        state = [v for o in optims for v in state_tensors(o)]
        if _bytes_once(state):
            held.append(f"optimizer state {format_bytes(_bytes_once(state))}")
        dels = [(f"{n}{suffix}", free.get(f"{n}{suffix}", 0)) for suffix, _, _ in entries]
        # a list's entry is dropped by index without shifting the others (`del xs[0]` would renumber them)
        drop = "`{} = None`" if issubclass(type(names[n]), list) else "`del {}`"
        freed = [f"{drop.format(p)} frees {format_bytes(b)}" for p, b in dels if b >= MIN_BYTES]
        shared = [p for p, b in dels if b < MIN_BYTES]
        keep = ("its `state_dict()` copied to the CPU" if device_kind == "cuda" else
                "its `state_dict()` saved to disk (torch.save)")
        out.append(f"{n} keeps {what[0]}, each model with its gradients and each optimizer with its state, after "
                   f"training ({', '.join(held)}): keep only what later cells use, e.g. the best model or {keep}"
                   + (f"; {', '.join(freed)}" if freed else "")
                   + (f" ({', '.join(shared)}: also held by other names)" if shared and freed else "")
                   + "; to keep a model but not its training state, set its gradients to None "
                     "(`zero_grad(set_to_none=True)`) and drop its optimizer")
    for n in all_views:
        ts = [v for _, v, _ in items_of(names[n])]
        own = sum(t.numel() * t.element_size() for t in ts)
        if free.get(n, 0) - own >= MIN_BYTES:
            stores = sum(st for st in {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}.values())
            again = (f"{n} = [t.clone() for t in {n}]" if issubclass(type(names[n]), list)
                     else f"{n} = {{k: v.clone() for k, v in {n}.items()}}")
            out.append(f"{n}'s {len(ts)} entries ({format_bytes(own)} of data) are views that keep whole storages of "
                       f"{format_bytes(stores)} alive: `{again}` keeps only their own bytes and frees "
                       f"{format_bytes(free[n] - own)} (or store `.clone()`s when adding to it)")
    for n, t in [(n, names[n]) for n in views] + entry_views:
        if free.get(n, 0) >= MIN_BYTES:
            own = t.numel() * t.element_size()
            out.append(f"{n} ({format_bytes(own)} of data) is a view that keeps a whole "
                       f"{format_bytes(t.untyped_storage().nbytes())} storage alive: `{n} = {n}.clone()` keeps only "
                       f"its own bytes and frees {format_bytes(free[n] - own)}")
    return out


def reassigned_peak_note(old_at_peak: Mapping[str, int], temporaries_at_peak: int, source: str) -> str | None:
    """One line for a peak at which a name's value from before the cell was still alive beside
    tensors the cell made, where the cell reassigns that name from itself (``z = layer(z)``):
    Python frees the old value only after the new one is assigned. ``old_at_peak``: ``{name:
    bytes of its old value alive at the peak and freed before the cell's end}`` (the cell's
    timeline); ``temporaries_at_peak``: bytes of tensors made in the cell and freed in it, alive
    at the peak. ``None`` where no such name."""
    carried = carried_states(source)
    hits = [(n, b) for n, b in old_at_peak.items() if n in carried and b > 0]
    if not hits or temporaries_at_peak <= 0:
        return None
    n, b = hits[0]
    return (f"at the peak the value {n} had before the cell ({format_bytes(b)}) was still alive beside "
            f"{format_bytes(temporaries_at_peak)} of tensors the cell made and freed: `{carried[n]}` computes the new "
            f"{n} while {n} still holds the old one, which Python frees only after the assignment (not a leak)")
