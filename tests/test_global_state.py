"""Item 28.2: every entry point leaves every process-wide state as it found it.

A loss (or a ``DataLoader``'s dataset, with and without workers) that draws from torch's,
Python's and NumPy's global generators and flips torch flags runs inside each entry point;
afterwards the generators' states and the flags/defaults are exactly those before.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import vramnb
from vramnb._global_state import snapshot
from vramnb import profile_distributed


class Drawing(Dataset):
    """A dataset whose items draw from Python's and NumPy's global generators (augmentation)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((8,), random.random() + float(np.random.rand()))


def drawing_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    random.random()
    np.random.rand()
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("medium")
    # what a library imported on the way installs (torch.distributed's process group, accelerate):
    sys.excepthook = lambda *exc: None
    threading.excepthook = lambda args: None
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
    # what the user's own code may set for the whole process (adversary round d: all were left changed)
    torch.set_printoptions(precision=2, sci_mode=True)
    torch.backends.cuda.enable_math_sdp(not torch.backends.cuda.math_sdp_enabled())
    torch.backends.mkldnn.enabled = not torch.backends.mkldnn.enabled
    os.environ["VRAMNB_TEST_USER_FLAG"] = "1"
    logging.getLogger("vramnb_test_user").setLevel(logging.ERROR)
    logging.getLogger("vramnb_test_user").addHandler(logging.NullHandler())
    return model(batch).square().mean()


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))


def _batch() -> torch.Tensor:
    return torch.ones(4, 8)


def _dist_fn(rank: int, world_size: int) -> tuple:
    return _model(), _batch(), drawing_loss, None


ENTRY = {  # each gets a model and a batch built before the states are read (building draws from torch's RNG)
    "estimate": lambda m, b: vramnb.estimate(m, b, drawing_loss),
    "estimate world_size=2 ddp": lambda m, b: vramnb.estimate(m, b, drawing_loss, world_size=2, parallel="ddp"),
    "max_batch_size": lambda m, b: vramnb.max_batch_size(m, b, drawing_loss, target="2GiB"),
    "fit": lambda m, b: vramnb.fit(m, b, drawing_loss, target="8GiB", progress=False),
    "fit DataLoader": lambda m, b: vramnb.fit(m, DataLoader(Drawing(), batch_size=4, shuffle=True),
                                              drawing_loss, target="8GiB", progress=False),
    "fit DataLoader workers": lambda m, b: vramnb.fit(m, DataLoader(Drawing(), batch_size=4, shuffle=True,
                                                                    num_workers=2),
                                                      drawing_loss, target="8GiB", progress=False),
    "profile_step": lambda m, b: vramnb.profile_step(m, b, drawing_loss),
    "compare": lambda m, b: vramnb.compare(m, b, drawing_loss, progress=False),
    "panel": lambda m, b: vramnb.panel(m, b, drawing_loss, display=False),
    "panel run": lambda m, b: vramnb.panel(m, b, drawing_loss, display=False).run(),
    "profile_distributed": lambda m, b: profile_distributed(_dist_fn, 1, backend="gloo", timeout=120),
}


def _state() -> dict:
    np_state = np.random.get_state()
    return {
        "torch cpu rng": torch.get_rng_state().tolist(),
        "random": random.getstate(),
        "numpy": (np_state[0], np_state[1].tolist(), *np_state[2:]),
        **snapshot(),
        "sys.excepthook": id(sys.excepthook),
        "threading.excepthook": id(threading.excepthook),
        "warnings.filters": list(warnings.filters),
        "environ": dict(os.environ),
        "user logger": (logging.getLogger("vramnb_test_user").level, list(logging.getLogger("vramnb_test_user").handlers)),
    }


@pytest.mark.parametrize("entry", list(ENTRY))
def test_entry_point_leaves_global_state_as_found(entry: str) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    model, batch = _model(), _batch()
    before = _state()
    try:
        ENTRY[entry](model, batch)
    except vramnb.VramnbError:
        pass  # a refusal must leave the state as found too
    after = _state()
    changed = [k for k in before if before[k] != after[k]]
    assert not changed, changed


def test_fsdp_estimate_keeps_sys_excepthook() -> None:
    """Adversary 2026-12-04 #07: torch.distributed's init_process_group (the fake world of a sharded
    estimate) replaces sys.excepthook with its ``_distributed_excepthook``, one more nested per call."""
    hook, thread_hook = sys.excepthook, threading.excepthook
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt, target="24GiB", world_size=2,
                        parallel="fsdp")
    assert sys.excepthook is hook and threading.excepthook is thread_hook


def test_lora_compare_keeps_warnings_filters_in_a_fresh_process() -> None:
    """Adversary 2026-12-04 #08: compare's LoRA recipe imports peft, and with it accelerate, whose import
    adds ``ignore UserWarning from torch.optim.lr_scheduler``: PyTorch's scheduler warnings went silent.
    A fresh interpreter: in this one peft may have been imported already."""
    pytest.importorskip("peft")
    code = textwrap.dedent("""
        import sys, warnings, torch, vramnb
        assert "peft" not in sys.modules and "accelerate" not in sys.modules
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        found, hook = list(warnings.filters), sys.excepthook
        vramnb.compare(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt, toggles={"lora": ["off", "r=8"]},
                       progress=False)
        assert "peft" in sys.modules
        print(list(warnings.filters) == found, sys.excepthook is hook)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True"]


def test_interrupt_while_the_guard_puts_state_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while kept_as_found writes the found values back: every value is written, then the
    interrupt is raised (it used to stop the restore halfway: the RNGs and later flags stayed changed)."""
    import signal

    real = torch.set_default_dtype

    def set_default_dtype(d: torch.dtype) -> None:
        signal.raise_signal(signal.SIGINT)  # lands in the guard's restore
        real(d)

    def loss(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
        real(torch.float64)  # the real one: the interrupt is for the guard's restore
        torch.set_float32_matmul_precision("medium")
        random.random()
        torch.rand(3)
        sys.excepthook = lambda *exc: None
        return m(b.double()).square().mean()

    random.seed(1)
    torch.manual_seed(3)
    model, batch = _model().double(), _batch()
    before = _state()
    monkeypatch.setattr(torch, "set_default_dtype", set_default_dtype)
    with pytest.raises(KeyboardInterrupt):
        vramnb.profile_step(model, batch, loss)
    monkeypatch.undo()
    after = _state()
    assert [k for k in before if before[k] != after[k]] == []


@pytest.mark.parametrize("opener", ["compiled_eagerly", "_guard"])
def test_interrupt_held_back_while_a_guard_opens_is_raised_inside_it(opener: str) -> None:
    """Adversary 2026-12-04c 07: a Ctrl-C held back while compiled_eagerly set the stance (or while the
    guard counted itself) was raised when held_back ended, before the try that undoes it: the stance
    stayed ``force_eager`` for the rest of the process (every torch.compile'd function ran eagerly)."""
    import signal

    import torch._dynamo  # noqa: F401 - the stance exists once dynamo is imported
    from torch._dynamo import eval_frame

    from vramnb import _global_state

    sent = []

    def tracer(frame, event, arg):  # a real SIGINT when held_back ends inside the opener
        if (event == "call" and not sent and frame.f_code.co_name == "__exit__" and frame.f_back is not None
                and frame.f_back.f_code.co_name == opener):
            sent.append(opener)
            signal.raise_signal(signal.SIGINT)
        return None

    model, batch = _model(), _batch()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            vramnb.estimate(model, batch, drawing_loss, target="24GiB")
    finally:
        sys.settrace(None)
    assert sent == [opener]
    assert eval_frame._stance.stance == "default"
    assert _global_state._OPEN == {} and _global_state._FIRST == [None]
    vramnb.estimate(model, batch, lambda m, b: m(b).sum(), target="24GiB")  # and the next call runs as usual
    assert eval_frame._stance.stance == "default"
