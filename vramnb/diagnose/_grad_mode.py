"""The grad mode the failing line ran in, read from its source's syntax tree.

After a failure has unwound, ``torch.is_grad_enabled()`` says what is on now, not what was on
where the error struck: ``with torch.no_grad():`` has exited by the time a post-mortem reads the
traceback. The failing frames' own source says it: the innermost ``with`` around the failing line
(``torch.no_grad()``, ``torch.inference_mode()``/``inference_mode(True)``,
``torch.set_grad_enabled(False)`` turn gradients off; ``torch.enable_grad()``,
``set_grad_enabled(True)``, ``inference_mode(False)`` turn them on) or a decorator on the function
the frame runs (``@torch.no_grad()``, ``@torch.inference_mode()``). Only the syntax tree is read
(from :mod:`linecache`): no user code runs."""

from __future__ import annotations

import ast
import linecache
from typing import Any

__all__ = ["grad_mode_at", "grad_mode_of_frames"]

_OFF = {"no_grad": False, "inference_mode": False, "enable_grad": True, "set_grad_enabled": None}


def _mode(expr: ast.expr) -> bool | None:
    """``False`` where ``expr`` turns gradients off, ``True`` where it turns them on, else ``None``."""
    call = expr if isinstance(expr, ast.Call) else None
    func = call.func if call is not None else expr
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in _OFF:
        return None
    args = list(call.args) + [k.value for k in call.keywords if k.arg == "mode"] if call is not None else []
    if name == "set_grad_enabled":
        if len(args) == 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, bool):
            return bool(args[0].value)
        return None  # a variable: not known from the text
    if name == "inference_mode" and args:
        if isinstance(args[0], ast.Constant) and isinstance(args[0].value, bool):
            return not args[0].value
        return None
    return _OFF[name]


def grad_mode_at(tree: ast.AST, line: int) -> bool | None:
    """Whether gradients are on at ``line`` (1-based) of ``tree`` by the innermost ``with`` or
    function decorator around it that sets the grad mode: ``True``/``False``, or ``None`` where
    no such construct encloses the line (the caller's mode then holds)."""
    best: tuple[int, bool] | None = None  # (depth, mode) of the innermost construct found

    def visit(node: ast.AST, depth: int) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            mode = None
            if isinstance(child, (ast.With, ast.AsyncWith)) and child.body:
                if child.body[0].lineno <= line <= (child.body[-1].end_lineno or line):
                    for item in child.items:
                        m = _mode(item.context_expr)
                        mode = m if m is not None else mode
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.body:
                if child.body[0].lineno <= line:
                    for dec in child.decorator_list:
                        m = _mode(dec)
                        mode = m if m is not None else mode
            if mode is not None and (best is None or depth >= best[0]):
                best = (depth, mode)
            visit(child, depth + 1)

    visit(tree, 0)
    return None if best is None else best[1]


def grad_mode_of_frames(frames: list[Any]) -> bool | None:
    """The grad mode the innermost of ``frames`` (innermost first) ran in, read from the first
    frame whose source sets it around the frame's current line (:func:`grad_mode_at`); ``None``
    where no frame's source says (or none can be read)."""
    cache: dict[str, ast.AST | None] = {}
    for frame in frames:
        try:
            filename, line = frame.f_code.co_filename, frame.f_lineno
            if filename not in cache:
                text = "".join(linecache.getlines(filename))
                cache[filename] = ast.parse(text) if text else None
            tree = cache[filename]
        except (SyntaxError, ValueError, OSError, AttributeError):
            cache[frame.f_code.co_filename] = None
            continue
        if tree is None or line is None:
            continue
        mode = grad_mode_at(tree, line)
        if mode is not None:
            return mode
    return None
