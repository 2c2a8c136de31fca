"""Run a ``%%vram`` body the way IPython runs a cell, and keep tracebacks the user's own.

IPython glue, used by :mod:`vramnb._magics`. The body goes through IPython's own
steps below ``run_cell``: ``transform_cell``, ``compile.ast_parse``,
``transform_ast``, then ``run_ast_nodes`` with the cell's compiler, which
applies ``ast_node_interactivity`` (``last_expr``, ``all``, ``last``, ``none``,
``last_expr_or_assign``), sends values through the displayhook (``Out[n]``,
``_``, the output history), compiles top-level ``await`` and shows an
exception itself, from ``run_code`` down, exactly as for a plain cell. Errors
IPython reports before running a cell (a ``SyntaxError``, a failed input
transform, an ``InputRejected``) are shown the same way and nothing runs.
Calling ``shell.run_cell`` instead would fire the cell events and display the
value a second time.

Top-level ``await``: a plain cell with ``await`` is compiled as a coroutine and
awaited on the kernel's event loop. :func:`await_vram_cells` (an
``input_transformers_post`` entry) writes ``await`` before the
``run_cell_magic('vram', ...)`` call of such a cell, so IPython (and ipykernel)
run the cell as a coroutine too; the magic then returns the coroutine that runs
the body, and the body's ``await`` runs on the same loop as it would without
``%%vram``.
"""

from __future__ import annotations

import ast
import contextlib
import sys
from collections.abc import Coroutine, Iterator
from typing import Any

__all__ = ["Outcome", "await_vram_cells", "body_is_async", "clean_tracebacks", "prepare", "run_nodes", "run_sync"]


class Outcome:
    """Where ``run_ast_nodes``/``run_code`` record the body's errors (the two
    fields of IPython's ``ExecutionResult`` they write)."""

    def __init__(self) -> None:
        self.error_before_exec: BaseException | None = None
        self.error_in_exec: BaseException | None = None

    @property
    def error(self) -> BaseException | None:
        return self.error_in_exec if self.error_in_exec is not None else self.error_before_exec


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never waits on an event loop (IPython's
    ``_pseudo_sync_runner``, which runs cells without ``await``)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError(f"{coro!r} needs an event loop")


def body_is_async(shell: Any, body: str) -> bool:
    """Whether IPython would run ``body``, as a cell of its own, as a coroutine
    (top-level ``await``/``async for``/``async with``, with ``%autoawait`` on)."""
    if not getattr(shell, "autoawait", False):
        return False
    try:
        source = shell.transform_cell(body)
    except Exception:
        return False  # IPython reports this as an error before running
    try:
        return bool(shell.should_run_async(body, transformed_cell=source, preprocessing_exc_tuple=None))
    except Exception:
        return False


def _vram_call(tree: ast.Module) -> str | None:
    """The body of ``get_ipython().run_cell_magic('vram', line, body)``, the
    whole of a cell, else None."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run_cell_magic"):
        return None
    owner = call.func.value
    if not (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_ipython"):
        return None
    args = call.args
    if call.keywords or len(args) != 3 or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        return None
    if args[0].value != "vram":  # type: ignore[attr-defined]
        return None
    return str(args[2].value)  # type: ignore[attr-defined]


def await_vram_cells(shell: Any) -> Any:
    """An ``input_transformers_post`` entry: ``await`` the ``%%vram`` call of a
    cell whose body IPython would run as a coroutine (see the module docstring)."""

    def transform(lines: list[str]) -> list[str]:
        if not lines or not lines[0].startswith("get_ipython().run_cell_magic('vram',"):
            return lines
        try:
            body = _vram_call(ast.parse("".join(lines)))
        except SyntaxError:
            return lines
        if body is None or not body_is_async(shell, body):
            return lines
        return ["await " + lines[0], *lines[1:]]

    return transform


def prepare(shell: Any, raw: str, count: int, outcome: Outcome) -> tuple[str, list[ast.stmt]] | None:
    """Transform, parse and AST-transform ``raw`` as ``run_cell_async`` does:
    ``(cell name, statements)``, or None after showing the error IPython shows
    for a cell that cannot run (recorded in ``outcome.error_before_exec``)."""
    try:
        source = shell.transform_cell(raw)
    except Exception as e:
        shell.showtraceback(sys.exc_info())
        outcome.error_before_exec = e
        return None
    # The leading newline keeps the line numbers of the whole cell (line 1 is
    # the %%vram line) in tracebacks and "Cell In[n]" listings.
    source = "\n" + source
    compiler = shell.compile
    name = compiler.cache(source, count, raw_code=raw)
    try:
        tree = compiler.ast_parse(source, filename=name)
    except shell.custom_exceptions as e:
        shell.CustomTB(*sys.exc_info())
        outcome.error_before_exec = e
        return None
    except IndentationError as e:
        shell.showindentationerror()
        outcome.error_before_exec = e
        return None
    except (OverflowError, SyntaxError, ValueError, TypeError, MemoryError) as e:
        shell.showsyntaxerror()
        outcome.error_before_exec = e
        return None
    from IPython.core.error import InputRejected

    try:
        tree = shell.transform_ast(tree)
    except InputRejected as e:
        shell.showtraceback()
        outcome.error_before_exec = e
        return None
    return name, tree.body


_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef) + tuple(getattr(ast, n) for n in ("TryStar", "Match") if hasattr(ast, n))


async def run_nodes(shell: Any, nodes: list[ast.stmt], name: str, interactivity: str, outcome: Outcome,
                    shown: list[Any]) -> None:
    """``shell.run_ast_nodes(nodes, ...)``, with the value the final simple
    statement displays appended to ``shown`` instead (for the caller to display
    once the measurement ends: formatting a value is IPython's work, not the
    cell's). The statements before it run with the same interactivity as in
    one call (``all`` stays ``all``, every other mode only concerns the last);
    a final compound statement (a loop that displays as it goes) displays in place."""
    if not nodes:
        return
    head, last = nodes[:-1], nodes[-1]
    if head and await shell.run_ast_nodes(head, name, interactivity="all" if interactivity == "all" else "none",
                                          compiler=shell.compile, result=outcome):
        return
    if isinstance(last, _COMPOUND):
        await shell.run_ast_nodes([last], name, interactivity=interactivity, compiler=shell.compile, result=outcome)
        return
    hook, sys.displayhook = sys.displayhook, shown.append
    try:
        await shell.run_ast_nodes([last], name, interactivity=interactivity, compiler=shell.compile, result=outcome)
    finally:
        sys.displayhook = hook




def _module(tb: Any) -> str:
    return str(tb.tb_frame.f_globals.get("__name__", ""))


def strip_tracker_frames(exc: BaseException | None) -> None:
    """Unlink the tracker's own frames (and the torch frames that call it and
    that it calls) from ``exc``'s traceback and those of its causes and
    contexts, so the traceback is the one the user's code has without vramnb.
    The first entry (IPython's ``run_code``) and every other frame stay."""
    # the frames the CPU tracker puts between a user's operator call and the operator
    from ._tracker import CALLED_MODULES as _BELOW, SHIM_MODULES as _ABOVE, TRACKER_MODULES as _TRACKER_MODULES

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        entries = []
        tb = exc.__traceback__
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        drop = set()
        for i, entry in enumerate(entries):
            if _module(entry) not in _TRACKER_MODULES or i == 0:
                continue
            drop.add(i)
            j = i - 1
            while j > 0 and _module(entries[j]) in _ABOVE:
                drop.add(j)
                j -= 1
            j = i + 1
            while j < len(entries) and _module(entries[j]) in _BELOW:
                drop.add(j)
                j += 1
        if drop:
            kept = [e for i, e in enumerate(entries) if i not in drop]
            for a, b in zip(kept, kept[1:] + [None]):
                a.tb_next = b
        for chained in (exc.__cause__,):
            if chained is not None:
                strip_tracker_frames(chained)
        exc = exc.__context__


@contextlib.contextmanager
def clean_tracebacks(shell: Any) -> Iterator[None]:
    """While the tracker runs the user's code, strip its frames from any
    exception before IPython shows (and stores) it."""
    had = "showtraceback" in vars(shell)
    previous = shell.showtraceback

    def showtraceback(exc_tuple: Any = None, *args: Any, **kwargs: Any) -> Any:
        value = exc_tuple[1] if exc_tuple is not None else sys.exc_info()[1]
        strip_tracker_frames(value)
        return previous(exc_tuple, *args, **kwargs)

    shell.showtraceback = showtraceback
    try:
        yield
    finally:
        if had:
            shell.showtraceback = previous
        else:
            del shell.showtraceback
