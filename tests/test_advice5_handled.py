"""An operator that fails under the tracker's dispatch mode leaves its operands in torch's frames
of the traceback (the ``OpOverload`` call and the mode's wrappers); a retry inside the ``except``
block runs while that exception keeps them. The post-mortem counts them as what the exception
being handled keeps, at the user's line that called the operator, and offers the retry after the
block (CPU)."""

from __future__ import annotations

from tests.conftest import run
from vramnb._units import format_bytes
from vramnb.diagnose import OOMState, verdict

N = 1 << 20


def test_the_first_attempts_locals_are_what_the_handled_exception_keeps(ip):
    import vramnb
    from vramnb._report import oom_lines

    run(ip, f"def _att(k):\n    a, b = torch.ones({N} // k, 1), torch.ones(1, 1).expand(1, 1 << 40)\n"
            "    return (a @ b).sum()\n"
            "def _inside():\n    try:\n        return _att(1)\n    except RuntimeError:\n        return _att(2)\n")
    res, _ = run(ip, "%%vram -d cpu\n_inside()")
    assert isinstance(res.error_in_exec, RuntimeError)
    oom = vramnb.history()[-1].oom
    # the first attempt's a = torch.ones(N, 1) and b (float32), kept by its frame in the handled traceback
    assert oom.state.handled == [("_att:3", "a", N * 4, 0), ("_att:3", "b", 4, 0)]
    assert any("held by the exception being handled" in ln and f"a {format_bytes(N * 4)} (_att:3)" in ln
               for ln in oom_lines(oom))


def test_a_failed_operators_operands_are_not_kept_by_the_handled_exception(ip):
    """Without vramnb, an operator called from C++ (``x @ y`` of two temporaries) frees its operands as
    the error unwinds: the handled exception keeps none of them, and so it is under ``%%vram`` (the
    tracker's dispatch frames are let go, tests/test_failed_op_frames.py)."""
    import vramnb

    run(ip, f"def _att(k):\n    return (torch.ones({N} // k, 1) @ torch.ones(1, 1).expand(1, 1 << 40)).sum()\n"
            "def _inside():\n    try:\n        return _att(1)\n    except RuntimeError:\n        return _att(2)\n")
    res, _ = run(ip, "%%vram -d cpu\n_inside()")
    assert isinstance(res.error_in_exec, RuntimeError)
    assert vramnb.history()[-1].oom.state.handled == []


def test_the_retry_after_the_except_block_is_a_fix_where_what_it_keeps_closes_the_gap():
    handled = [("forward:5", "h1", 128 << 20, 0)]
    s = OOMState("cpu", True, 64 << 20, 260 << 20, cap=1 << 30, available=8 << 30, cap_room=62 << 20,
                 cap_name="RLIMIT_AS", handled=handled)
    fixes = verdict(s).fixes
    assert fixes[0].what.startswith("the failing code runs inside an except block: the exception being handled "
                                    f"keeps {format_bytes(128 << 20)} of the failed attempt")
    assert fixes[0].saving == 128 << 20 and "if failed:" in fixes[0].code
    # what it keeps is less than what is missing: not offered as the fix
    s = OOMState("cpu", True, 64 << 20, 260 << 20, cap=1 << 30, available=8 << 30, cap_room=1 << 20,
                 cap_name="RLIMIT_AS", handled=[("forward:5", "h1", 32 << 20, 0)])
    assert not any("except block" in f.what for f in verdict(s).fixes)


def test_what_a_notebook_name_also_keeps_is_not_counted_as_kept_by_the_handled_exception(ip):
    """The first attempt's frame holds a notebook global too (``W``): leaving the except block frees
    only what the frame alone keeps, so only that is counted."""
    import vramnb

    run(ip, f"Wg = torch.ones({N})\ndef _att2(k):\n    h1 = torch.ones({N} // k)\n    w = Wg if k == 1 else None\n"
            "    return torch.empty(1 << 60, dtype=torch.uint8)\n"
            "def _inside2():\n    try:\n        return _att2(1)\n    except RuntimeError:\n        return _att2(2)\n")
    res, _ = run(ip, "%%vram -d cpu\n_inside2()")
    assert isinstance(res.error_in_exec, RuntimeError)
    assert vramnb.history()[-1].oom.state.handled == [("_att2:5", "h1", N * 4, 0)]
