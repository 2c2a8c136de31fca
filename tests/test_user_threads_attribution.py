"""Issue 28, UserState and the user's other threads: what the estimate's step changed of the user's is put
back whatever threads are alive, and what another thread changed meanwhile stays. (Not done yet: the
attribution by thread is open; the first test records the failure.)"""

from __future__ import annotations

import threading

import pytest
import torch

import vramnb

MODEL = torch.nn.Linear(8, 8)


def _step_zeroes_the_users_grads(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
    MODEL.zero_grad(set_to_none=True)  # the notebook's model by name, not the argument
    return m(b).sum()


def _monitor(stop: threading.Event) -> None:
    """As tqdm's monitor thread: a daemon that sleeps and reads."""
    while not stop.wait(0.01):
        _ = MODEL.weight.shape


@pytest.mark.xfail(strict=True, reason="issue 28: UserState leaves the step's non-fake changes when any other "
                                       "user thread is alive (attribution by thread not implemented)")
def test_step_setting_the_users_grads_to_none_is_undone_beside_a_monitor_thread() -> None:
    MODEL.zero_grad(set_to_none=True)
    MODEL(torch.randn(2, 8)).sum().backward()
    g = MODEL.weight.grad
    stop = threading.Event()
    t = threading.Thread(target=_monitor, args=(stop,), daemon=True)
    t.start()
    try:
        with pytest.raises(ValueError, match="replaced a parameter's .grad"):
            vramnb.estimate(MODEL, torch.randn(4, 8), _step_zeroes_the_users_grads, target="24GiB")
    finally:
        stop.set()
        t.join()
    assert MODEL.weight.grad is g


def test_another_threads_write_to_the_model_meanwhile_stays() -> None:
    """A thread that sets the model's gradients while the estimate runs: its write is its own and stays."""
    model = torch.nn.Linear(8, 8)
    started, written = threading.Event(), threading.Event()
    mine = torch.ones(8, 8)

    def loss_fn(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
        started.set()
        assert written.wait(30)
        return m(b).sum()

    def writer() -> None:
        assert started.wait(30)
        model.weight.grad = mine
        written.set()

    t = threading.Thread(target=writer)
    t.start()
    vramnb.estimate(model, torch.randn(4, 8), loss_fn, target="24GiB")
    t.join()
    assert model.weight.grad is mine
