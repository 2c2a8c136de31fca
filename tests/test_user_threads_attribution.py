"""Issue 28, UserState and the user's other threads: what the estimate's step changed of the user's is put
back whatever threads are alive, and what another thread changed meanwhile stays. A ``.grad`` set or deleted
is followed per thread (a torch-function mode on the estimate's thread); a module's or optimizer's dict
changed to a real value is not (a plain dict write): left, with a note, while another thread runs."""

from __future__ import annotations

import sys

import pytest
import torch

import vramnb
from tests.conftest import another_user_thread, while_the_step_waits

MODEL = torch.nn.Linear(8, 8)


def _monitor() -> None:
    """As tqdm's monitor thread reads its bars (every 10 ms, in a daemon thread)."""
    _ = MODEL.weight.shape


def test_another_threads_write_to_the_model_meanwhile_stays() -> None:
    """A thread that sets the model's gradients while the estimate runs: its write is its own and stays."""
    model = torch.nn.Linear(8, 8)
    mine = torch.ones(8, 8)
    loss_fn, t = while_the_step_waits(lambda: setattr(model.weight, "grad", mine))
    vramnb.estimate(model, torch.randn(4, 8), loss_fn, target="24GiB")
    t.join()
    assert model.weight.grad is mine


REAL_GRAD = torch.zeros(8, 8)


@pytest.mark.parametrize("change", ["zero_grad", "real", "del"])
def test_step_changing_the_users_grads_is_undone_beside_a_monitor_thread(change: str) -> None:
    """``MODEL.zero_grad(set_to_none=True)``, ``.grad = <a real tensor of the notebook's>`` or ``del .grad`` on
    the notebook's model (by name, not the argument) in loss_fn: the estimate's thread made it (followed per
    thread), so it is put back and refused, while a monitor thread of the user's (tqdm's) is alive."""
    def loss_fn(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
        if change == "zero_grad":
            MODEL.zero_grad(set_to_none=True)
        elif change == "real":
            MODEL.weight.grad = REAL_GRAD
        else:
            del MODEL.weight.grad
        return m(b).sum()

    MODEL.zero_grad(set_to_none=True)
    MODEL(torch.randn(2, 8)).sum().backward()
    g = MODEL.weight.grad
    with another_user_thread(_monitor), pytest.raises(ValueError, match="replaced a parameter's .grad"):
        vramnb.estimate(MODEL, torch.randn(4, 8), loss_fn, target="24GiB")
    assert MODEL.weight.grad is g


def test_another_threads_zero_grad_meanwhile_stays_beside_the_steps_own() -> None:
    """A training thread of the user's sets the model's gradients to None while the estimate runs: that is its
    work and stays (no error, no note), though another thread (the step's) also ran."""
    model = torch.nn.Linear(8, 8)
    model(torch.randn(2, 8)).sum().backward()
    loss_fn, t = while_the_step_waits(lambda: model.zero_grad(set_to_none=True))
    est = vramnb.estimate(model, torch.randn(4, 8), loss_fn, target="24GiB")
    t.join()
    assert model.weight.grad is None and model.bias.grad is None
    assert not any("left as found" in n for n in est.notes)


EXTRA = torch.ones(3)
SLOTTED = torch.nn.Linear(8, 8)


def test_a_slot_change_beside_another_thread_is_left_with_a_note_that_says_so() -> None:
    """A real buffer registered on the notebook's model by loss_fn, reached by a name built at run time (which
    vramnb's record of the names code uses cannot see), while another thread of the user's runs: a plain dict
    write, which nothing attributes to a thread. It is left as found, and the estimate says so instead of
    claiming that nothing of the user's changed."""
    def loss_fn(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
        real = getattr(sys.modules[__name__], "SLOT" + "TED")
        if "extra" not in real._buffers:
            real.register_buffer("extra", EXTRA)
        return m(b).sum()

    try:
        with another_user_thread(_monitor):
            est = vramnb.estimate(SLOTTED, torch.randn(4, 8), loss_fn, target="24GiB")
        assert SLOTTED._buffers["extra"] is EXTRA
    finally:
        SLOTTED._buffers.pop("extra", None)
    notes = [n for n in est.notes if "left as found" in n]
    assert len(notes) == 1 and "a module's parameters or buffers" in notes[0] and "Thread-" in notes[0]
    assert not any("nothing of yours was allocated or changed" in n for n in est.notes)
    assert any("nothing of yours was allocated" in n for n in est.notes)
