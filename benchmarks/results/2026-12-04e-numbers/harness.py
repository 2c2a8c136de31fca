"""Shared harness of the 2026-12-04 (d) numbers round: an IPython shell with vramnb loaded,
cells run as a user runs them, and every printed figure compared with bytes computed here
(the sum of ``untyped_storage().nbytes()`` of the distinct storages a holder reaches)."""

from __future__ import annotations

import contextlib
import io
import sys

import torch
from IPython.testing.globalipapp import start_ipython

MiB = 1 << 20
ip = start_ipython()
ip.run_cell("%load_ext vramnb")
ip.run_cell("import torch, gc")
FAILS: list[str] = []


def run(cell: str, quiet: bool = True) -> tuple[object, str]:
    """Run ``cell`` (a ``%%vram`` cell or plain code); returns (CellReport or None, printed text)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        ip.run_cell(cell)
    out = buf.getvalue()
    if not quiet:
        print(out)
    return ip.user_ns.get("_rep"), out


def vram(body: str, opts: str = "--breakdown") -> tuple[object, str]:
    ip.user_ns.pop("_rep", None)
    return run(f"%%vram {opts} -o _rep\n{body}")


def rows(rep: object) -> dict[str, tuple[int, int, int]]:
    return {r[0]: tuple(r[1:4]) for r in (getattr(rep, "sources", None) or [])}


def nbytes(*objs: object) -> int:
    """Bytes of the distinct storages of the tensors in ``objs`` (flattened containers)."""
    seen: dict[int, int] = {}

    def add(o: object) -> None:
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        elif isinstance(o, dict):
            for v in o.values():
                add(v)
        elif isinstance(o, (list, tuple, set, frozenset)) or type(o).__name__ == "deque":
            for v in o:
                add(v)
    for o in objs:
        add(o)
    return sum(seen.values())


def check(what: str, got: object, want: object) -> None:
    ok = got == want
    print(f"{'PASS' if ok else 'FAIL'} {what}: got {got!r}, want {want!r}")
    if not ok:
        FAILS.append(what)


def done() -> None:
    print("RESULT", "PASS" if not FAILS else f"FAIL ({len(FAILS)}: {', '.join(FAILS)})")
    sys.exit(1 if FAILS else 0)
