"""The tracker's start and a forked child: an interrupt during the first start leaves no
half-imported module; a child forked while the tracker tracks runs untracked."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# An import hook that sends SIGINT to the process when ``sympy`` starts importing: the
# interrupt lands in the middle of what the first dispatch mode imports, every time.
_INTERRUPT_IN_IMPORT = """
import os, signal, sys
class _Interrupt:
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == "sympy" and not _Interrupt.fired:
            _Interrupt.fired = True
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _Interrupt())
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )


_AFTER = """
import torch
import torch._dynamo  # imports again, whole
torch._dynamo.reset()
f = torch.compile(lambda x: x * 2 + 1, backend="eager")
assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
with vramnb.vram() as m:
    x = torch.empty(1000, dtype=torch.float64)
print("BYTES", m.report.delta_allocated)
assert m.report.delta_allocated == 8000, m.report.delta_allocated
"""


@pytest.mark.slow
def test_interrupt_during_first_vram_block_leaves_no_half_import():
    r = _run(
        _INTERRUPT_IN_IMPORT
        + """
import torch, vramnb
try:
    with vramnb.vram():
        torch.zeros(1)
    print("NO INTERRUPT")
except KeyboardInterrupt:
    print("INTERRUPTED")
assert _Interrupt.fired
import sys
print("SYMPY", "sympy" in sys.modules, "DYNAMO", "torch._dynamo" in sys.modules)
"""
        + _AFTER
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "INTERRUPTED" in r.stdout  # the interrupt is held back, never lost
    assert "SYMPY True DYNAMO True" in r.stdout


@pytest.mark.slow
def test_load_ext_does_the_imports_and_an_interrupt_there_leaves_them_whole():
    r = _run(
        _INTERRUPT_IN_IMPORT
        + """
import torch, vramnb
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
try:
    shell.run_line_magic("load_ext", "vramnb")
    print("NO INTERRUPT")
except KeyboardInterrupt:
    print("INTERRUPTED")
assert _Interrupt.fired
import sys
print("SYMPY", "sympy" in sys.modules, "DYNAMO", "torch._dynamo" in sys.modules)
if "vramnb" not in shell.extension_manager.loaded:
    shell.run_line_magic("load_ext", "vramnb")
shell.run_cell("import torch")
res = shell.run_cell("%%vram\\nx = torch.empty(1000, dtype=torch.float64)")
assert res.error_in_exec is None, res.error_in_exec
assert vramnb.history()[-1].delta_allocated == 8000, vramnb.history()[-1].delta_allocated
"""
        + _AFTER
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "INTERRUPTED" in r.stdout
    assert "SYMPY True DYNAMO True" in r.stdout


_CHILD_STATE = """
import gc, os, sys, torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
def child_state():
    modes = [type(m).__module__ + "." + type(m).__name__ for m in _get_current_dispatch_mode_stack()]
    cbs = [getattr(cb, "__module__", "") for cb in gc.callbacks if "vramnb" in getattr(cb, "__module__", "")]
    patched = "vramnb" in getattr(torch.UntypedStorage.resize_, "__module__", "")
    return modes, cbs, patched
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_in_a_measured_block_runs_untracked():
    """Inside the child: no vramnb dispatch mode, no vramnb ``gc`` callback, no patched storage
    method; the child's tensors leave the parent's count as it was; the parent's block is still
    measured exactly, and the child can leave the block it was forked in without an error."""
    r = _run(
        _CHILD_STATE
        + """
import vramnb, json
from vramnb._tracker import cpu_tracker
tr = cpu_tracker()
with vramnb.vram() as m:
    a = torch.empty(1000, dtype=torch.float64)
    inside = child_state()
    before = tr.current
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        big = torch.empty(1 << 20, dtype=torch.uint8)
        state = child_state()
        os.write(wfd, json.dumps(state).encode())
        os.close(wfd)
        os._exit(0)
    os.close(wfd)
    got = b""
    while chunk := os.read(rfd, 65536):
        got += chunk
    os.waitpid(pid, 0)
    after = tr.current
    b = torch.empty(100, dtype=torch.float32)
print("INSIDE", json.dumps(inside))
print("CHILD", got.decode())
print("SAME", before == after)
print("DELTA", m.report.delta_allocated)
"""
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    import json

    inside = json.loads(lines["INSIDE"])
    assert inside[0] and inside[1] and inside[2]  # the parent tracks there: the check can see it
    assert json.loads(lines["CHILD"]) == [[], [], False]
    assert lines["SAME"] == "True"
    assert int(lines["DELTA"]) == 8000 + 400


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_that_leaves_the_measured_block_does_so_quietly():
    r = _run(
        """
import os, torch, vramnb
with vramnb.vram() as m:
    pid = os.fork()
    x = torch.empty(10)
if pid == 0:
    os._exit(0 if torch.ones(2).add(1).sum().item() == 4 else 3)
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status))
"""
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CHILD 0" in r.stdout
