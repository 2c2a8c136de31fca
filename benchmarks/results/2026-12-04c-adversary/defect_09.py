"""`%vram on`: a Ctrl-C just after a cell's measured block opened leaves the block open for good.

_magics._start_auto opened the block (`m = cm.__enter__()`) and kept it (`self._auto_cm = cm`) only inside
the next `with held_back():`; an interrupt landing as that `held_back()` is made stops the cell, but
`_abandon_auto` finds no block to close: the tracker's dispatch mode stays on the stack and the measurement
stays open (every later cell nests inside it) until the garbage collector closes the abandoned generator,
which then records a report for the cell that never ran. Prints PASS/FAIL."""
import signal
import sys

import torch
from IPython.core.interactiveshell import InteractiveShell

import vramnb
from vramnb import _measure

ip = InteractiveShell.instance()
ip.run_cell("%load_ext vramnb")
ip.run_cell("import torch")
ip.run_cell("%vram on -d cpu")
ip.run_cell("x = torch.ones(10)")
before = (torch._C._len_torch_dispatch_stack(), len(_measure._ACTIVE))
n = len(vramnb.history())
sent = []


def tracer(frame, event, arg):
    if (event == "call" and not sent and frame.f_code.co_name == "__init__" and frame.f_back is not None
            and frame.f_back.f_code.co_name == "_start_auto"):
        sent.append(1)
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C
    return None


sys.settrace(tracer)
try:
    ip.run_cell("ran = 1")
finally:
    sys.settrace(None)
after = (torch._C._len_torch_dispatch_stack(), len(_measure._ACTIVE))
import gc  # noqa: E402

gc.collect()
reports = len(vramnb.history()) - n
print(f"interrupted: {bool(sent)}; cell ran: {'ran' in ip.user_ns}; (dispatch modes, open blocks) {before} -> {after}; "
      f"reports recorded for the cell that did not run: {reports}")
ip.run_cell("%vram off")
print("PASS" if sent and after == before and "ran" not in ip.user_ns and reports == 0 else "FAIL")
