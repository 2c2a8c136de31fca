"""What the one library call on the failing line asked for, read against its inputs.

An out-of-memory error inside one call (``torch.einsum``, ``torch.sort``, ``F.unfold``,
``vmap(...)(...)``) whose inputs are small and sane is no capacity problem: the call makes a
result or an intermediate far larger than what it was given. This module says so, with numbers:

    `torch.sort(scores)` asked for 256.0 MiB for one of its outputs, (33554432,) int64, from 128.0 MiB
    of inputs (×2.0): scores (33554432,) float32

From what is known at the failure, bytes and names only:

* the failing ATen operator and its inputs' shapes and dtypes (:class:`OpFacts`: the one record
  :func:`vramnb.diagnose._failing_op.record` the CPU storage tracker's dispatch mode makes where the
  operator raised, which the autocast gate reads too; its outputs' shapes from running it once on
  ``meta`` tensors of the inputs' shapes: no memory, no user code);
* the call that was running on the user's line: the exact expression, from the failing frame's
  instruction (``code.co_positions()`` at ``f_lasti``, Python 3.11+) and the cell's syntax tree;
* its arguments' tensors (read by name from the frame; other expressions evaluated on ``meta``
  tensors by :class:`vramnb.diagnose._line_copies._Eval`), NumPy arrays (``nbytes``) and
  containers of tensors, each storage counted once.

The cheaper way, where one is known for the call's family, comes from one table
(:mod:`vramnb.diagnose._call_table`), derived from the same shapes. A Python-side ``MemoryError``
(``.tolist()`` of a large tensor, NumPy's "Unable to allocate") gets its own reading
(:func:`python_memory_note`).
"""

from __future__ import annotations

import ast
import linecache
import os
import sysconfig
from dataclasses import dataclass
from typing import Any

import torch

from .._units import format_bytes
from ._call_table import cheaper, func_name, held_bytes, python_objects
from ._failing_op import FailedOp

__all__ = ["OpFacts", "CallSite", "call_site", "call_reading", "python_memory_note", "ratio",
           "value_of"]


#: the operators read like a call (their instruction's position is the whole expression)
_OPERATORS = (ast.BinOp, ast.Compare, ast.UnaryOp, ast.Subscript)
_Operator = ast.BinOp | ast.Compare | ast.UnaryOp | ast.Subscript


#: the failing operator's record, made once by the tracker where it raised (the name :mod:`._call_table` reads)
OpFacts = FailedOp


# -- the call on the failing line -----------------------------------------------------------------------------------
@dataclass
class CallSite:
    """The call expression running on the failing line, with what its arguments hold.

    Attributes:
        node: the ``ast.Call`` (or the operator: ``a @ b``, ``a == b``, ``-a``, ``a[idx]``) whose positions
            match the frame's instruction.
        text: its source, as written (shortened to 90 characters).
        name: the called function's own name: ``sort`` for ``torch.sort(x)``, ``tolist`` for
            ``x.tolist()``, ``vmap`` for ``vmap(f)(x)``.
        tree: the parsed source the node belongs to; ``stmt``: the statement that holds it.
        inputs: ``(text, shape, dtype, bytes)`` of each tensor (or NumPy array) the call is given
            (its receiver, its arguments, the items of a dict/list/tuple argument), each storage once.
        unknown: an argument could not be read (then no total of the inputs is claimed).
        frame: the failing frame (read only, by name).
    """

    node: ast.Call | _Operator
    text: str
    name: str
    tree: ast.AST
    stmt: ast.stmt | None
    inputs: list[tuple[str, tuple[int, ...], str, int]]
    unknown: bool
    frame: Any

    @property
    def input_bytes(self) -> int:
        return sum(i[3] for i in self.inputs)

    def value(self, node: ast.expr) -> Any:
        """What ``node`` holds in the failing frame (:func:`value_of`)."""
        return value_of(self, node)


def _parse(filename: str) -> ast.AST | None:
    text = "".join(linecache.getlines(filename))
    if not text:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _position(frame: Any, lasti: int | None = None) -> tuple[int, int, int, int] | None:
    """``(line, column, end line, end column)`` of the instruction ``frame`` runs (or ran last)."""
    try:
        i = (frame.f_lasti if lasti is None else lasti) // 2
        pos = list(frame.f_code.co_positions())[i]
    except (AttributeError, IndexError):
        return None
    if any(p is None for p in pos):
        return None
    line, end_line, col, end_col = pos  # co_positions: (line, end line, column, end column)
    return line, col, end_line, end_col  # type: ignore[return-value]


def call_site(frame: Any, lasti: int | None = None) -> CallSite | None:
    """The :class:`CallSite` the frame's current instruction belongs to (``lasti``: a traceback's
    ``tb_lasti``), else ``None`` (no source, no call at that position)."""
    pos = _position(frame, lasti)
    tree = _parse(frame.f_code.co_filename) if pos is not None else None
    if tree is None or pos is None:
        return None
    line, col, end_line, end_col = pos
    found: ast.Call | _Operator | None = None
    stmt: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.lineno <= line and (node.end_lineno or node.lineno) >= end_line:
            if stmt is None or node.lineno >= stmt.lineno:
                stmt = node
        if isinstance(node, (ast.Call, *_OPERATORS)) and (node.lineno, node.col_offset, node.end_lineno,
                                                        node.end_col_offset) == (line, col, end_line, end_col):
            found = node
    if found is None:
        return None
    text = ast.get_source_segment("".join(linecache.getlines(frame.f_code.co_filename)), found) or \
        ast.unparse(found)
    text = " ".join(text.split())
    site = CallSite(found, text if len(text) <= 90 else text[:89] + "…", func_name(found), tree, stmt, [], False,
                    frame)
    _read_inputs(site)
    return site


def _operands(node: ast.Call | _Operator) -> list[ast.expr]:
    """The expressions a call is given: a method's receiver (``x`` of ``x.tolist()``), its
    arguments, and for ``f(g)(x)`` the outer arguments (what ``g`` runs on); an operator's operands
    (an index's tensor too: ``x[idx]``)."""
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Subscript):
        return [node.value, node.slice]
    out: list[ast.expr] = []
    f = node.func
    if isinstance(f, ast.Attribute) and not isinstance(f.value, (ast.Name, ast.Attribute)) or (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id not in _MODULES):
        out.append(f.value)
    out += [a.value if isinstance(a, ast.Starred) else a for a in node.args]
    out += [k.value for k in node.keywords]
    return out


#: names that are modules, not values (``torch.sort``: ``torch`` is no input)
_MODULES = frozenset({"torch", "F", "nn", "np", "numpy", "math", "functional", "fft", "linalg", "sparse", "special"})


def _value(site: CallSite, node: ast.expr) -> Any:
    """The value ``node`` holds in the failing frame: a name's own object, else the expression on
    ``meta`` tensors; raises where it cannot be read."""
    from ._line_copies import _Eval, _Unknown
    from ._transient import _lookup

    if isinstance(node, ast.Name):
        v = _lookup(site.frame, node.id)
        if v is None:
            raise _Unknown
        return v
    if isinstance(node, ast.Constant):
        return node.value
    for n in ast.walk(node):  # a sparse (or other non-strided) tensor has no meta copy of its size: not read
        v = _lookup(site.frame, n.id) if isinstance(n, ast.Name) else None
        if isinstance(v, torch.Tensor) and v.layout != torch.strided:
            raise _Unknown
    ev = _Eval(site.frame)
    with torch.device("meta"):
        return ev.ev(node)


def value_of(site: CallSite, node: ast.expr) -> Any:
    """:func:`_value`, ``None`` where it cannot be read."""
    try:
        return _value(site, node)
    except Exception:  # noqa: BLE001
        return None


def _read_inputs(site: CallSite) -> None:
    seen: set[int] = set()
    for node in _operands(site.node):
        if not any(isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) for n in ast.walk(node)):
            continue  # constants and operators on them (`1 << 22`, "ij->i"): no tensor
        try:
            v = _value(site, node)
        except Exception:  # noqa: BLE001 - an argument we cannot read: no total is claimed
            site.unknown = True
            continue
        text = ast.unparse(node)
        items: list[tuple[str, Any]]
        if type(v) is dict:
            items = [(f"{text}[{k!r}]", x) for k, x in list(dict.items(v))[:10_000]]
        elif type(v) in (list, tuple):
            items = [(f"{text}[{i}]", x) for i, x in enumerate(v[:10_000])]
        else:
            items = [(text, v)]
        root = _view_root(site, node)
        for t, x in items:
            if isinstance(node, ast.Name) and any(i[0] == t for i in site.inputs):
                continue  # the same expression given twice (einsum's B, B): listed once, counted once
            held = held_bytes(x, seen)
            if held is not None and root is not None:  # a view of a name's tensor holds that tensor's memory
                of_root = held_bytes(root, seen)
                held = (held[0], held[1], of_root[2] if of_root is not None else 0)
            if held is not None:
                site.inputs.append((t, held[0], held[1], held[2]))


#: tensor methods and attributes that return a view of their tensor (no memory of their own)
_VIEWS = frozenset({"view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "expand_as",
                    "flatten", "unflatten", "narrow", "select", "t", "T", "mT", "H", "mH", "view_as", "unfold",
                    "movedim", "swapaxes", "diagonal"})


def _basic_index(node: ast.expr) -> bool:
    """Whether an index only slices (``:``, ``None``, ``...``, integers): a view, no gather."""
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    return all(isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and (p.value is None or p.value is Ellipsis
                                                                             or type(p.value) is int))
               for p in parts)


def _view_root(site: CallSite, node: ast.expr) -> Any:
    """The notebook's tensor ``node`` is a view of (``x[:, None]``, ``x.T``, ``x.view(...)``), else
    ``None``: its bytes are that tensor's, counted once however many views of it the call is given."""
    from ._transient import _lookup

    if isinstance(node, ast.Name):
        return None
    while True:
        if isinstance(node, ast.Subscript) and _basic_index(node.slice):
            node = node.value
        elif isinstance(node, ast.Attribute) and node.attr in _VIEWS:
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            node = node.func.value
        else:
            break
    v = _lookup(site.frame, node.id) if isinstance(node, ast.Name) else None
    return v if isinstance(v, torch.Tensor) and v.device.type != "meta" else None


def ratio(n: int, m: int) -> str:
    """``×2.0``, ``×64``, ``×2,560``: ``n`` over ``m``."""
    k = n / m
    return f"×{k:,.0f}" if k >= 10 else f"×{k:.1f}"


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def _what(site: CallSite | None, op: OpFacts | None, requested: int) -> str:
    """What the request was for, from the failing operator's outputs."""
    if op is None:
        return ""
    outs = op.outputs
    mine = site is not None and op.packet.strip("_").lower() == site.name.strip("_").lower()  # sort, Add
    if outs is None:
        return f" inside aten::{op.packet}"
    match = [o for o in outs if o[2] == requested]
    if not match:
        shown = ", ".join(f"{_shape(o[0])} {o[1]}" for o in outs)
        return f" for a buffer inside aten::{op.packet}, not one of its outputs ({shown})"
    shape, dtype, _ = match[0]
    if mine:
        return f" for its result, {_shape(shape)} {dtype}" if len(outs) == 1 else \
            f" for one of its {len(outs)} outputs, {_shape(shape)} {dtype}"
    return f" for the {_shape(shape)} {dtype} output of aten::{op.packet} inside it"


def call_reading(frame: Any, requested: int | None, op: OpFacts | None, lasti: int | None = None
                 ) -> tuple[str, tuple[str, str] | None] | None:
    """``(reading, cheaper)`` for the call running on ``frame``'s line where ``requested`` bytes
    failed: the reading says what the call asked for and from how much input; ``cheaper``
    ``(sentence, code)`` the cheaper form from :mod:`._call_table` where its family has one.
    ``None`` where no call is found at the frame's instruction."""
    if not requested:
        return None
    frame, lasti = _caller_of_library(frame, lasti)
    site = call_site(frame, lasti)
    if site is None:
        return None
    head = f"`{site.text}` asked for {format_bytes(requested)}{_what(site, op, requested)}"
    if site.inputs and not site.unknown and site.input_bytes:
        listed = ", ".join(f"{t} {_shape(s)} {d}" for t, s, d, _ in site.inputs[:4])
        more = f" and {len(site.inputs) - 4} more" if len(site.inputs) > 4 else ""
        head += (f" from {format_bytes(site.input_bytes)} of inputs ({ratio(requested, site.input_bytes)}): "
                 f"{listed}{more}")
    elif site.inputs:
        head += " (inputs not all readable: " + ", ".join(f"{t} {_shape(s)} {d} {format_bytes(n)}"
                                                          for t, s, d, n in site.inputs[:4]) + ")"
    try:
        better = cheaper(site, op, requested)
    except Exception:  # noqa: BLE001 - the reading stands without the table's advice
        better = None
    return head, better


def _caller_of_library(frame: Any, lasti: int | None) -> tuple[Any, int | None]:
    """The user's frame that called the library function ``frame`` runs in (copy.py's ``copier(memo)`` ->
    the cell's ``copy.deepcopy(model)``; ``torch_geometric.utils.scatter``'s line -> the cell's ``scatter(...)``),
    where only library frames (the standard library's, site-packages') lie between; ``(frame, lasti)`` unchanged
    where a frame of torch's lies between (a module's forward in a library: its line is the one read)."""
    f = frame
    while f is not None and (f.f_code.co_filename.startswith(_STDLIB) or "-packages" + os.sep in f.f_code.co_filename):
        if f.f_code.co_filename.startswith(_SKIP) and f.f_code.co_name in _MODULE_CALLS:
            return frame, lasti
        # torch's other frames (Tensor.__deepcopy__ calling copy.deepcopy on its storage) are the library's too
        f = f.f_back
    return (frame, lasti) if f is None or f is frame else (f, None)


#: torch's module-call frames: a library's module forward lies beyond them (its own line is the one read)
_MODULE_CALLS = frozenset({"_call_impl", "_wrapped_call_impl", "__call__"})


# -- a MemoryError raised by Python or NumPy ----------------------------------------------------------------------------
def python_memory_note(exc: BaseException) -> str | None:
    """One line for a ``MemoryError`` (Python's or NumPy's own allocation failed, not torch's):
    the call on the failing line and, for ``.tolist()`` of a tensor, the Python objects it makes
    (:mod:`._call_table`); ``None`` where ``exc`` is no ``MemoryError``."""
    if not isinstance(exc, MemoryError):
        return None
    tb, users = exc.__traceback__, []
    while tb is not None:  # the frames of the user's code (a cell, a function of theirs), outermost first
        f = tb.tb_frame
        fn = f.f_code.co_filename
        if "-packages" + os.sep in fn or fn.startswith(_STDLIB):
            pass  # a library's frame (NumPy's, the standard library's): not the user's line
        elif not fn.startswith(_SKIP) and "/IPython/" not in fn and not fn.startswith("<frozen"):
            users.append((f, tb.tb_lasti))
        tb = tb.tb_next
    inner = users[-1] if users else None
    msg = ""
    try:
        msg = str(exc).strip()
    except Exception:  # noqa: BLE001 - a user's exception class
        pass
    head = ("MemoryError: Python (or NumPy) could not allocate memory for its own objects, outside torch's "
            "allocator (the tensors' bytes above do not include them)")
    if msg:
        head += f" ({msg[:160]})"
    if inner is None:
        return head
    site = None
    for where in reversed(users):  # the innermost line that makes a call (a helper's `raise MemoryError`: its caller's)
        site = call_site(*where)
        if site is not None:
            break
    if site is None:
        return head
    head += f"; it failed in `{site.text}` (line {site.node.lineno})"
    extra = python_objects(site)
    if not extra:  # the call's family in the table: a view pickled whole, a dense grid
        try:
            better = cheaper(site, None, 0)
        except Exception:  # noqa: BLE001 - the line stands without the table's advice
            better = None
        if better is None:  # only part of an array NumPy failed to make is read (its shape: NumPy's message)
            from ._read_part import read_part

            try:
                better = read_part(site, 0, _numpy_array(msg))
            except Exception:  # noqa: BLE001
                better = None
        if better is not None:
            extra = better[0] + (f"; as code: `{better[1]}`" if better[1] and "\n" not in better[1] else "")
    return head + (f": {extra}" if extra else "")


def _numpy_array(msg: str) -> tuple[tuple[int, ...], torch.dtype] | None:
    """``(shape, dtype)`` from NumPy's "Unable to allocate 374. MiB for an array with shape (7001, 7001) and data
    type float64", else ``None``."""
    import re

    m = re.search(r"shape \(([\d, ]*)\) and data type (\w+)", msg)
    if m is None:
        return None
    dtype = getattr(torch, m.group(2), None)
    if not isinstance(dtype, torch.dtype):
        return None
    return tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x), dtype


_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")
#: torch's and vramnb's folders: their frames are not the user's
_SKIP = tuple(os.path.join(d, "") for d in (os.path.dirname(torch.__file__),
                                             os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
