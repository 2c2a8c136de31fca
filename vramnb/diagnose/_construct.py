"""Out-of-memory errors whose cause is not a step's activations: a module's constructor, and
an embedding table's dense gradient.

* A failure inside a module's ``__init__`` ran no forward and no backward: techniques that shrink
  activations or precision of a step do nothing there. What is built is parameters and buffers:
  a model built again while the notebook name it is assigned to still holds the previous one
  (and an optimizer the previous one's state), or a buffer that every layer registers anew.
* ``nn.Embedding`` / ``nn.EmbeddingBag`` with ``sparse=False`` get, in backward, a dense
  gradient as large as the whole table however few rows a batch uses; ``sparse=True`` gives a
  sparse gradient of the used rows (optimizers that accept it: ``torch.optim.SGD``,
  ``torch.optim.SparseAdam``, ``torch.optim.Adagrad``).

Read from the failing frames (names and objects by reference, no user code runs) and the
request's size; a sentence only where the bytes match what that cause allocates.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

import torch

from .._units import format_bytes


def constructing(frames: list[Any]) -> Any:
    """The innermost frame running an ``nn.Module``'s ``__init__`` (the module being built), else ``None``."""
    from .._graph import frame_locals

    for frame in frames:
        if frame.f_code.co_name != "__init__":
            continue
        for name, val in frame_locals(frame):
            if name == "self" and isinstance(val, torch.nn.Module):
                return frame
    return None


def _module_bytes(m: torch.nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for t in [*m.parameters(), *m.buffers(), *(p.grad for p in m.parameters() if p.grad is not None)]:
        s = t.untyped_storage()
        if id(s) not in seen and s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def _optim_bytes(opt: torch.optim.Optimizer) -> int:
    total = 0
    for st in opt.state.values():
        for v in st.values() if isinstance(st, dict) else ():
            if isinstance(v, torch.Tensor):
                total += v.untyped_storage().nbytes()
    return total


def constructor_fixes(frames: list[Any], requested: int | None) -> list[tuple[str, str]]:
    """``(sentence, code)`` for a failure inside a module's constructor (``frames`` innermost
    first): the previous model still bound to the name the new one is assigned to, a buffer
    registered in the failing constructor."""
    out: list[tuple[str, str]] = []
    init = constructing(frames)
    if init is None:
        return out
    # the notebook's statement that builds the model: the innermost frame at a cell's top level
    cell = next((f for f in frames if f.f_code.co_name == "<module>" and "/site-packages/" not in f.f_code.co_filename
                 and not f.f_code.co_filename.startswith("<frozen")), None)
    if cell is not None:
        out += _rebuilt(cell)
    buf = _buffer(init, requested)
    if buf is not None:
        out.append(buf)
    return out


def _rebuilt(cell: Any) -> list[tuple[str, str]]:
    text = linecache.getline(cell.f_code.co_filename, cell.f_lineno).strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    stmt = tree.body[0] if tree.body else None
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return []
    names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    g = cell.f_globals
    if len(names) != 1 or type(g) is not dict:
        return []
    name = names[0]
    old = dict.get(g, name)
    if not isinstance(old, torch.nn.Module):
        return []
    held = _module_bytes(old)
    params = {id(p) for p in old.parameters()}
    opts = [(k, v) for k, v in list(g.items()) if not k.startswith("_") and isinstance(v, torch.optim.Optimizer)
            and any(id(p) in params for grp in v.param_groups for p in grp["params"])]
    state = sum(_optim_bytes(o) for _, o in opts)
    also = "".join(f", and `{k}` refers to its parameters (its state: {format_bytes(_optim_bytes(o))})"
                   for k, o in opts)
    sentence = (f"the failure is in a constructor, building a new model into `{name}` while `{name}` still holds the "
                f"previous {type(old).__name__} ({format_bytes(held)} of parameters, buffers and gradients){also}: "
                f"both are alive until the assignment; delete the old ones before building the next "
                f"({format_bytes(held + state)} back)")
    dels = ", ".join([name, *(k for k, _ in opts)])
    from ._transient import _in_loop

    when = " (at the end of each iteration)" if _in_loop(cell) else ""
    return [(sentence, f"del {dels}  # before `{text[:60]}`{when}")]


def _buffer(init: Any, requested: int | None) -> tuple[str, str] | None:
    from ._line_copies import _Eval, _walk

    text = linecache.getline(init.f_code.co_filename, init.f_lineno).strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr == "register_buffer" and len(n.args) >= 2), None)
    if call is None:
        return None
    ev = _Eval(init)
    _walk(ev, tree)
    t = ev.values.get(id(call.args[1]))
    if not isinstance(t, torch.Tensor) or requested is None or requested > t.numel() * t.element_size():
        return None
    from .._graph import frame_locals

    mod = dict(frame_locals(init)).get("self")
    cls = type(mod).__name__
    bname = ast.unparse(call.args[0])
    size = t.numel() * t.element_size()
    sentence = (f"the failure is in {cls}.__init__, registering the buffer {bname} of shape {tuple(t.shape)} "
                f"({format_bytes(size)}): every {cls} built registers its own copy, so the model holds one per "
                f"layer; build it once and register the same tensor in every layer (one storage), or make it in "
                "forward at the length in use; no forward or backward ran, so step techniques (autocast, "
                "checkpointing, a smaller batch) do not apply")
    return sentence, (f"# once, outside the layers: mask = <the tensor>; in {cls}.__init__:\n"
                      f"self.register_buffer({bname}, mask, persistent=False)  # the same storage in each layer")


def dense_embedding_grad(model: Any, name: str | None, requested: int | None) -> tuple[str, str] | None:
    """``(sentence, code)`` where the request is the dense gradient of an ``nn.Embedding`` /
    ``nn.EmbeddingBag`` of ``model`` with ``sparse=False`` (the whole table's bytes)."""
    if not isinstance(model, torch.nn.Module) or not requested:
        return None
    for path, m in model.named_modules():
        if not isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) or m.sparse:
            continue
        w = m.weight
        if not w.requires_grad or w.numel() * w.element_size() != requested:
            continue
        where = (name or "the model") + (f".{path}" if path else "")
        kind = type(m).__name__
        sentence = (f"the backward allocates the gradient of {where} ({kind} {tuple(w.shape)}) as a dense tensor "
                    f"the size of the whole table, {format_bytes(requested)}, however few rows a batch uses; "
                    f"{kind}(..., sparse=True) gives a sparse gradient of the used rows only (step it with "
                    "torch.optim.SGD, torch.optim.SparseAdam or torch.optim.Adagrad; Adam and AdamW reject sparse "
                    "gradients)")
        code = (f"# build it with sparse=True: torch.nn.{kind}({m.num_embeddings}, {m.embedding_dim}, ..., "
                "sparse=True)\n"
                f"{where}.sparse = True  # or set it on the existing module, before the next forward")
        return sentence, code
    return None
