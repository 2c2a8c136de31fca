"""Ctrl-C (`_thread.interrupt_main()`, as Jupyter's *Interrupt kernel*) at evenly spread points of vramnb's Python
calls (round f's harness, attack_07 there) on a model with this round's state: a spectral-norm parametrization
(u/v buffers a training forward updates), BatchNorm with `momentum=None` (its counter read by the estimate's
shadows), a loss that reads a file-backed dataset (the stream position put back) and steps an LR scheduler, a
wrapped `zero_grad` logging to a list; and the estimate called under the user's ambient `saved_tensors_hooks`
and a `TorchFunctionMode` (both set aside for the fake step and put back). Checked after each point: exactly one
KeyboardInterrupt or a finished call, a deep fingerprint of model, optimizer, scheduler, log, stream position,
global state, the saved-tensor hook stack and the mode stacks as before."""
import contextlib
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations as PZ

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-12-04f-adversary"))
import attack_07_interrupt_sweep as f07  # noqa: E402
import vramnb  # noqa: E402

_PATH = os.path.join(tempfile.mkdtemp(prefix="adv8-int-"), "rows.bin")
with open(_PATH, "wb") as fh:
    fh.write(np.arange(4096, dtype=np.float32).tobytes())
STREAM = open(_PATH, "rb")
LOG = []


class TF(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


CTX = {}


def loss(m, b):
    row = torch.frombuffer(bytearray(STREAM.read(32)), dtype=torch.float32)
    CTX["sched"].step()
    return m(b + 0 * row).pow(2).mean()


def setup():
    torch.manual_seed(0)
    m = nn.Sequential(PZ.spectral_norm(nn.Linear(8, 32)), nn.BatchNorm1d(32, momentum=None), nn.ReLU(), nn.Linear(32, 2))
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    b = torch.randn(4, 8)
    m(b).pow(2).mean().backward(); o.step(); o.zero_grad()
    CTX["sched"] = torch.optim.lr_scheduler.StepLR(o, 1, 0.5)
    LOG.clear()
    orig = o.zero_grad

    def zg(set_to_none=True):
        LOG.append(set_to_none)
        orig(set_to_none)
    o.zero_grad = zg
    STREAM.seek(64)
    return m, o, b


@contextlib.contextmanager
def ambient():
    mode = TF()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), mode:
        yield


def _estimate_ambient(m, o, b):
    with ambient():
        vramnb.estimate(m, b, loss, o, target="8GiB")
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
        assert top is not None and torch._C._len_torch_function_stack() == 1, "the user's hook/mode not back"


_orig_state = f07.state


def state(m, o):
    fp = _orig_state(m, o)
    fp["sched"] = repr(CTX["sched"].state_dict())
    fp["log"] = list(LOG)
    fp["stream"] = STREAM.tell()
    fp["saved_hooks_top"] = torch._C._autograd._top_saved_tensors_default_hooks(True) is not None
    return fp


f07.state = state
f07.setup = setup
f07.ENTRIES = {
    "profile_step": lambda m, o, b: vramnb.profile_step(m, b, loss, o),
    "estimate_ambient": _estimate_ambient,
    "max_batch_size": lambda m, o, b: vramnb.max_batch_size(m, b, loss, o, target="8GiB", progress=False, limit=32),
    "fit": lambda m, o, b: vramnb.fit(m, b, loss, o, target="8GiB", progress=False),
}

if __name__ == "__main__":
    f07.main(*sys.argv[1:])
