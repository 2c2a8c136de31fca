"""torch.jit.trace cannot trace under any dispatch mode (a parameter then reads as a constant: "Cannot
insert a Tensor that requires grad as a constant"); a measured cell must not change what the user's code
does (validation-10 jit_trace_called_in_a_loop: the trace raised only under %%vram). vramnb's own modes step
aside for the call, the user's stay, and the report says its peak is a lower bound."""

from __future__ import annotations

import re

import pytest
import torch

import vramnb
from tests.conftest import run

_SETUP = "import torch\ntorch.manual_seed(0)\nm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())\n" \
         "x = torch.randn(2, 3, 8, 8)\n"


@pytest.mark.parametrize("flags", ["-d cpu", "-d cpu --breakdown"])
def test_a_trace_in_a_measured_cell_is_the_trace_made_outside_it(ip, flags):  # type: ignore[no-untyped-def]
    run(ip, _SETUP + "plain = torch.jit.trace(m, x)\noriginal_trace = torch.jit.trace")
    run(ip, f"%%vram {flags}\ntraced = torch.jit.trace(m, x)\nmod = torch.jit.trace_module(m, {{'forward': x}})")
    ns = ip.user_ns
    def graph(t):  # type: ignore[no-untyped-def]  # (each trace of a class gets a new mangled name)
        return re.sub(r"___torch_mangle_\d+\.", "", str(t.graph))

    assert graph(ns["traced"]) == graph(ns["plain"])
    assert torch.equal(ns["traced"](ns["x"]), ns["m"](ns["x"])) and torch.equal(ns["mod"](ns["x"]), ns["m"](ns["x"]))
    assert torch.jit.trace is ns["original_trace"]  # put back after the cell
    rep = vramnb.history()[-1]
    assert rep.exception is None and rep.peak_is_lower_bound
    assert any(n.startswith("torch.jit.trace ran here (PyTorch's tracer: also torch.onnx.export): it cannot trace "
                            "under a dispatch") for n in rep.notes)


def test_a_cell_without_a_trace_gets_no_trace_note(ip):  # type: ignore[no-untyped-def]
    run(ip, _SETUP)
    run(ip, "%%vram -d cpu\ny = m(x)")
    assert not any("torch.jit.trace" in n for n in vramnb.history()[-1].notes)


def test_the_users_own_dispatch_mode_stays_on_during_the_trace(ip):  # type: ignore[no-untyped-def]
    # a mode of the user's breaks the trace as it does without vramnb: nothing of the user's is taken off
    run(ip, _SETUP + "from torch.utils._python_dispatch import TorchDispatchMode\n"
            "class Mine(TorchDispatchMode):\n"
            "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
            "        return func(*args, **(kwargs or {}))\n"
            "def attempt():\n    with Mine():\n        try:\n            torch.jit.trace(m, x)\n            return 'traced'\n"
            "        except RuntimeError as e:\n            return str(e)[:40]\n"
            "outside = attempt()")
    run(ip, "%%vram -d cpu\ninside = attempt()")
    assert ip.user_ns["inside"] == ip.user_ns["outside"] != "traced"


def test_an_onnx_export_through_the_tracer_runs_in_a_measured_cell(ip):  # type: ignore[no-untyped-def]
    pytest.importorskip("onnx")
    run(ip, _SETUP + "import io\nbuf = io.BytesIO()")
    run(ip, "%%vram -d cpu\ntorch.onnx.export(m, (x,), buf, dynamo=False)")
    assert vramnb.history()[-1].exception is None and ip.user_ns["buf"].getbuffer().nbytes > 0


def test_tracing_on_every_run_is_named_with_trace_once(ip):  # type: ignore[no-untyped-def]
    """validation-10 jit_trace_called_in_a_loop (pytorch#35600): every trace is kept by TorchScript's global
    compilation unit; the outside-growth line names it with the fix."""
    run(ip, _SETUP + "big = torch.nn.Sequential(*[torch.nn.Conv2d(32, 32, 3, padding=1) for _ in range(10)]).eval()\n"
            "xb = torch.randn(1, 32, 64, 64)")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nwith torch.no_grad():\n    for i in range(20):\n"
                "        tr = torch.jit.trace(big, xb, check_trace=False)\n        out = tr(xb)")
    line = next((n for n in vramnb.history()[-1].notes if "grows the process's memory outside tensors" in n), None)
    assert line is not None, vramnb.history()[-1].notes
    assert ("torch.jit.trace ran 20 times since this cell's previous run, and tracing from Python registers each traced "
            "graph and module class in TorchScript's global compilation unit") in line
    assert "trace once, outside the loop, and reuse the traced module" in line


def test_a_trace_that_raises_leaves_the_modes_and_torch_jit_as_they_were(ip):  # type: ignore[no-untyped-def]
    # the trace fails (a module returning a non-tensor): the cell's error is the user's, vramnb's modes are back on
    # the stack for the rest of the cell, and torch.jit.trace is put back after it
    run(ip, _SETUP + "class Bad(torch.nn.Module):\n    def forward(self, x):\n        return {'a': object()}\n"
            "original_trace = torch.jit.trace")
    res, _ = run(ip, "%%vram -d cpu\ntry:\n    torch.jit.trace(Bad(), x)\nexcept Exception as e:\n    err = type(e).__name__\n"
                     "after = torch.ones(1024)")
    rep = vramnb.history()[-1]
    assert res.error_in_exec is None and ip.user_ns["err"] in ("RuntimeError", "TypeError", "ValueError")
    assert rep.end_allocated - rep.start_allocated == 4096  # the tensor made after the failed trace is tracked
    assert torch.jit.trace is ip.user_ns["original_trace"]
