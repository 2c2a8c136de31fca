"""Regressions from trying to break vramnb with strange input: the user's
objects, results and errors must come through untouched, and vramnb's own
messages must be clear."""

import sys

import pytest
import torch

import vramnb
from tests.conftest import run


def test_free_never_touches_user_underscore_variables_or_exec_dicts(ip):
    run(ip, "_ = torch.ones(1000)\n__ = 'mine'\n_1 = 'also mine'")
    run(ip, "my_ns = {'keep': 123}\ntry:\n    exec(\"raise ValueError('x')\", {}, my_ns)\nexcept ValueError:\n    pass")
    run(ip, "exec(\"raise ValueError('x')\", {}, my_ns)")
    run(ip, "%vram free -d cpu")
    ns = ip.user_ns
    assert isinstance(ns["_"], torch.Tensor) and ns["__"] == "mine" and ns["_1"] == "also mine"
    assert ns["my_ns"] == {"keep": 123}


def test_cell_numbers_match_ipython(ip):
    res, cap = run(ip, "%%vram -d cpu\nx = 1")
    assert vramnb.history()[-1].cell == res.execution_count
    assert f"vram [{res.execution_count}]" in cap.outputs[-1].data["text/plain"]
    run(ip, "%vram on -d cpu")
    res, cap = run(ip, "y = 2")
    assert vramnb.history()[-1].cell == res.execution_count
    run(ip, "%vram off")


class BadList(list):
    def __iter__(self):
        raise RuntimeError("no iter")


class Sneaky:
    __slots__ = ()

    def __getattr__(self, name):
        raise RuntimeError("gotcha")


class Liar:
    def __getattr__(self, name):
        return torch.ones(3)


def test_strange_objects_do_not_break_state_or_replace_errors(ip):
    ip.user_ns.update(bl=BadList([1]), sn=Sneaky(), liar=Liar(), real=torch.ones(100))
    res, _ = run(ip, "%vram -d cpu")
    assert res.success
    assert {h.name for h in res.result.holders} >= {"real"}
    res, _ = run(ip, "%%vram -d cpu\ny = torch.empty(2**62, dtype=torch.uint8)")
    assert isinstance(res.error_in_exec, RuntimeError) and "allocate" in str(res.error_in_exec)
    assert vramnb.history()[-1].oom is not None


def test_sparse_wrapper_and_fake_tensors(ip):
    res, cap = run(ip, "%%vram -d cpu\nsp = torch.ones(1000).to_sparse()")
    rep = vramnb.history()[-1]
    assert rep.delta_allocated == 1000 * 4 + 1000 * 8  # values + int64 indices
    run(ip, "from torch._subclasses.fake_tensor import FakeTensorMode\nwith FakeTensorMode():\n    ft = torch.empty(10**8)")
    res, _ = run(ip, "%vram -d cpu")
    names = {h.name for h in res.result.holders}
    assert "sp" in names and "ft" not in names


def test_users_dispatch_mode_left_open_is_kept(ip):
    run(ip, "from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack\n"
            "class Log(TorchDispatchMode):\n"
            "    def __torch_dispatch__(self, f, t, a=(), k=None):\n"
            "        return f(*a, **(k or {}))")
    run(ip, "%%vram -d cpu\nlm = Log(); lm.__enter__()")
    stack = ip.user_ns["_get_current_dispatch_mode_stack"]()
    assert len(stack) == 1 and stack[0] is ip.user_ns["lm"]
    ip.user_ns["lm"].__exit__(None, None, None)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("%vram -q --budget 1GiB", "does not take --budget"),
        ("%vram off -d cpu", "takes no options"),
        ("%vram history -d cpu", "does not take -d/--device"),
        ('%vram "free', "No closing quotation"),
        ("%%vram -o 1bad\nx = 1", "valid variable name"),
        ("%%vram -o Out\nx = 1", "valid variable name"),
        ("%%vram -d cpu:3\nx = 1", "one CPU device"),
        ("%%vram x = 1\ny = 2", "put the statement in the cell body"),
        ("%%vram --budget 9999999999999999999999999999TB\nx = 1", "too large"),
    ],
)
def test_more_bad_options(ip, line, fragment):
    res, _ = run(ip, line)
    err = res.error_in_exec or res.error_before_exec
    assert type(err).__name__ == "UsageError", err
    assert fragment in str(err)


def test_line_options_work(ip):
    run(ip, "t = torch.ones(10)")
    res, cap = run(ip, "%vram -q -o held -d cpu")
    assert res.result is None and cap.outputs == []
    assert ip.user_ns["held"].holders[0].name == "t"


def test_auto_mode_nested_run_cell_and_unload(ip):
    run(ip, "%vram on -d cpu")
    n = len(vramnb.history())
    run(ip, "a = torch.ones(10)\nget_ipython().run_cell('b = torch.ones(20)')\nc = torch.ones(30)")
    assert len(vramnb.history()) == n + 1
    assert vramnb.history()[-1].delta_allocated == 60 * 4
    run(ip, "%unload_ext vramnb")
    assert all(r.cell is not None for r in vramnb.history())
    ip.extension_manager.load_extension("vramnb")


def test_compile_still_compiles_after_a_measured_cell(ip):
    dynamo_utils = pytest.importorskip("torch._dynamo.utils")
    if not hasattr(torch.utils._python_dispatch.TorchDispatchMode, "ignore_compile_internals"):
        pytest.skip("this PyTorch skips compiling under any dispatch mode")
    before = sum(dynamo_utils.counters["frames"].values())
    run(ip, "%%vram -d cpu\ndef f(x):\n    return (x * 2).sin()\ncf = torch.compile(f, backend='eager')\ny = cf(torch.ones(8))")
    assert sum(dynamo_utils.counters["frames"].values()) > before
    assert ip.user_ns["y"].shape == (8,)


def test_tracker_frame_does_not_keep_operands_alive(ip):
    import gc

    from vramnb._tracker import cpu_tracker

    res, _ = run(ip, "%%vram -d cpu\ntorch.ones(10**6) + torch.ones(3)")
    assert res.error_in_exec is not None
    run(ip, "%vram free -d cpu")
    gc.collect()
    tr = cpu_tracker()
    tr.scan()
    big = [k for k, n in tr.live().items() if n == 4 * 10**6]
    assert big == []


def test_budget_warns_in_scripts():
    with pytest.warns(ResourceWarning, match="over budget"):
        with vramnb.vram("cpu", budget="1KiB") as m:
            x = torch.ones(1024)
    assert "over budget" in str(m.report)
    del x


def test_sys_last_exc_untouched_by_reports(ip):
    run(ip, "%%vram -d cpu\nraise ValueError('v')")
    assert isinstance(sys.last_value, ValueError)
