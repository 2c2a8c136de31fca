"""An operator that fails inside a measured CPU cell: the traceback keeps no more than without vramnb.

The CPU tracker's dispatch mode runs each operator from Python frames (its own, torch's dynamo-disable
wrapper around it, ``OpOverload.__call__``) that hold the operator's arguments; an exception raised
there keeps those frames in its traceback. Without vramnb the operator is called from C++ and a
temporary operand (``x * 2`` passed straight to ``torch.mm``) is freed as the error unwinds. Each case
counts the bytes of the tensors reachable from the traceback's frames (their locals, through tuples,
lists and dicts), the same cell with and without ``%%vram``: they must be equal."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.conftest import run

DEF = ("def f(x):\n    return torch.mm(x * 2, torch.ones(5, 5))\n"  # shapes that do not match
       "def o(x):\n    return (x * 2).repeat(1 << 21, 1 << 21)\n"  # 4 EiB: no address space maps it (16 TiB did,
       # where memory is overcommitted: the H200 machine then killed the process)
       "x = torch.ones(512, 512)\n")


def _values(v, depth=0):  # type: ignore[no-untyped-def]
    yield v
    if depth < 4 and isinstance(v, (tuple, list)):
        for x in v:
            yield from _values(x, depth + 1)
    elif depth < 4 and isinstance(v, dict):
        for x in v.values():
            yield from _values(x, depth + 1)


def _kept_bytes(exc: BaseException) -> int:
    """Bytes of the storages the tensors in the locals of ``exc``'s traceback frames use (each once)."""
    seen: dict[int, int] = {}
    tb = exc.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if f.f_code.co_name != "<module>":  # the cell's namespace is the notebook's: the same either way
            for v in dict(f.f_locals).values():
                for t in _values(v):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        st = t.untyped_storage()
                        seen[st.data_ptr()] = st.nbytes()
        tb = tb.tb_next
    return sum(seen.values())


def _run_both(ip, cell, name):  # type: ignore[no-untyped-def]
    """The bytes ``name``'s traceback keeps (an exception: sys.last_value, or one the cell keeps) after
    ``cell`` ran plainly, then under ``%%vram``."""
    out = []
    for prefix in ("", "%%vram -d cpu -q\n"):
        run(ip, DEF)
        run(ip, prefix + cell)
        exc = sys.last_value if name is None else ip.user_ns[name]
        assert isinstance(exc, RuntimeError)
        assert ("can't allocate memory" in str(exc)) == ("o(x)" in cell)  # o: the allocator's out of memory
        out.append(_kept_bytes(exc))
        del exc
        run(ip, "%reset -f")
        run(ip, "import torch")
        for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, attr):
                setattr(sys, attr, None)
    return out


@pytest.mark.parametrize("cell, name", [
    ("def g(x):\n    y = f(x)\n    return y\ng(x)", None),  # raised out of the cell
    ("try:\n    f(x)\nexcept RuntimeError as e:\n    err = e", "err"),  # kept by the cell
    ("try:\n    o(x)\nexcept RuntimeError as e:\n    err = e", "err"),  # out of memory (the post-mortem runs)
    ("def g(x):\n    y = o(x)\n    return y\ng(x)", None),
    ("errs = []\nfor i in range(2):\n    try:\n        f(x)\n    except RuntimeError as e:\n        errs.append(e)\n"
     "first = errs[0]", "first"),  # kept, and another op ran after it
])
def test_a_failed_ops_traceback_keeps_what_it_keeps_without_vramnb(ip, cell, name):  # type: ignore[no-untyped-def]
    plain, measured = _run_both(ip, cell, name)
    assert plain == 512 * 512 * 4  # f's x, in both ways (the temporary x * 2 is freed as the error unwinds)

    assert measured == plain


def test_a_failed_ops_temporary_is_no_memory_alive_after_the_cell(ip):  # type: ignore[no-untyped-def]
    """The by-source table of a cell whose operator failed: the temporary it was given (``x * 2``,
    1 MiB) was freed when the error unwound, as without vramnb; the end column adds up to what is
    allocated and names no memory alive after the cell (the frames vramnb's mode added are let go
    before the end is marked, not at the mode's exit after the recorder stopped)."""
    import vramnb

    run(ip, DEF)
    run(ip, "%%vram -d cpu -q --breakdown\ny = f(x)")
    rep = vramnb.history()[-1]
    rows = {name: (a, b, p) for name, a, b, p in rep.sources}
    assert "alive after the cell, not found under the names above" not in rows, rows
    assert rows["temporaries"] == (0, 0, 512 * 512 * 4 + 5 * 5 * 4)  # x * 2 and the ones, at the peak only
    assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated == rep.start_allocated
    run(ip, "%reset -f")
    run(ip, "import torch")
