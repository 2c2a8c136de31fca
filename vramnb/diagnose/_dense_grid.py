"""Dense coordinate grids where sparse ones broadcast to the same result.

``xx, yy, zz = np.meshgrid(x, x, x, indexing="ij")`` makes three full (N, N, N) arrays; the line that
then fails (``xx**2 + yy**2 + zz**2``) needs only each axis's values, which ``sparse=True`` gives as
(N, 1, 1), (1, N, 1) and (1, 1, N) arrays that broadcast to the same (N, N, N) result (NumPy's
``meshgrid`` documentation: "sparse grids ... to conserve memory"). Found where the failing statement
reads names an earlier statement of the same source bound from a ``meshgrid`` call without
``sparse=True``; the arrays' shapes and bytes are read by name (nothing of the user's runs).
``torch.meshgrid`` has no ``sparse``: its views (``x[:, None, None]``) are named instead.
"""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, Any

from .._units import format_bytes
from ._call_parts import _shape, func_name

if TYPE_CHECKING:
    from ._op_call import CallSite

__all__ = ["dense_grid"]


def _nbytes(v: Any) -> int | None:
    n = getattr(v, "nbytes", None)  # a NumPy array
    if isinstance(n, int):
        return n
    try:
        return int(v.numel() * v.element_size())  # a tensor
    except Exception:  # noqa: BLE001
        return None


def dense_grid(site: CallSite) -> tuple[str, str] | None:
    """``(sentence, code)`` for names the failing statement reads that a ``meshgrid`` without
    ``sparse=True`` bound earlier in the same source, else ``None``."""
    stmt = site.stmt if site.stmt is not None else site.node
    read = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    line = getattr(stmt, "lineno", 0)
    for s in ast.walk(site.tree):
        if not isinstance(s, ast.Assign) or (s.end_lineno or 0) >= line or len(s.targets) != 1:
            continue
        call = s.value
        if not isinstance(call, ast.Call) or func_name(call) != "meshgrid":
            continue
        if any(k.arg == "sparse" for k in call.keywords):
            continue  # chosen by the code (True, or a value of its own)
        t = s.targets[0]
        names = [e.id for e in t.elts if isinstance(e, ast.Name)] if isinstance(t, (ast.Tuple, ast.List)) else []
        used = [n for n in names if n in read]
        if not used or len(names) < 2:
            continue
        vals = [site.value(ast.Name(n, ast.Load())) for n in names]
        shapes = [tuple(getattr(v, "shape", ())) for v in vals]
        if len(set(shapes)) != 1 or len(shapes[0]) != len(names):
            continue  # not the dense grids meshgrid makes (rebound since)
        each = _nbytes(vals[0])
        if each is None:
            continue
        shape = shapes[0]
        axes = [tuple(n if i == k else 1 for i, n in enumerate(shape)) for k in range(len(shape))]
        small = sum(each * a[k] // math.prod(shape) for k, a in enumerate(axes))
        text = ast.unparse(call)
        numpy = ast.unparse(call.func).split(".")[0] in ("np", "numpy")
        head = (f"{', '.join(names)} come from `{text}` (line {s.lineno}): {len(names)} dense {_shape(shape)} grids "
                f"({format_bytes(each)} each, {format_bytes(each * len(names))} in all), though each varies along one "
                "axis only")
        if numpy:
            code = ast.unparse(s)[:-1] + ", sparse=True)"
            return (head + f"; with sparse=True they are {', '.join(_shape(a) for a in axes)} ({format_bytes(small)} "
                    f"in all) and broadcasting gives `{ast.unparse(stmt)}` the same result (NumPy's meshgrid: sparse "
                    "grids conserve memory)"), code
        views = ", ".join(f"{ast.unparse(a)}[{', '.join(':' if i == k else 'None' for i in range(len(shape)))}]"
                          for k, a in enumerate(call.args[:len(shape)]))
        return (head + f"; torch.meshgrid has no sparse form: the views {views} ({format_bytes(0)} more) broadcast "
                f"to the same result in `{ast.unparse(stmt)}`"), ""
    return None
