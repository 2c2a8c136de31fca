"""The user's other threads, running beside a vramnb entry point (adversary round 2026-12-04c).

vramnb's guards change process-wide state for the length of a call (the ``force_eager`` compiler
stance, hooks on every module); a notebook may train in a thread while it estimates in another,
or call two entry points from two threads. What another thread does meanwhile is its own, and
what two overlapping calls leave behind must be the state found before either started.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

import vramnb
from tests.conftest import another_user_thread, while_the_step_waits
from vramnb._compiled import compiled_eagerly


def test_profile_step_keeps_what_another_thread_trains_meanwhile() -> None:
    """_reach's process-wide hooks recorded a module another thread ran, and the restore undid
    that thread's training (its weights and its Adam state)."""
    torch.manual_seed(0)
    m1, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    opt1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    m2 = torch.nn.Linear(8, 8)
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.1)

    def train_other() -> None:
        for _ in range(3):
            opt2.zero_grad()
            m2(x).pow(2).sum().backward()
            opt2.step()

    loss_fn, t = while_the_step_waits(train_other)
    w1, w2 = m1.weight.detach().clone(), m2.weight.detach().clone()
    vramnb.profile_step(m1, x, loss_fn, opt1)
    t.join()
    assert opt2.state[m2.weight]["step"].item() == 3
    assert not torch.equal(m2.weight.detach(), w2)
    assert m2.weight.grad is not None and m2.weight.grad.shape == (8, 8)
    assert torch.equal(m1.weight.detach(), w1)  # the profiled model itself is put back


def test_stance_blocks_closing_out_of_order_in_two_threads() -> None:
    """Each block put back the stance it found: B opened inside A found ``force_eager`` and set it
    back after A closed, so every compiled function ran eagerly for the rest of the process."""
    import torch._dynamo  # noqa: F401 - the stance exists only once dynamo is imported
    from torch._dynamo import eval_frame

    before = eval_frame._stance.stance
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def a() -> None:
        with compiled_eagerly():
            a_open.set()
            assert b_open.wait(30)
        a_closed.set()

    def b() -> None:
        assert a_open.wait(30)
        with compiled_eagerly():
            b_open.set()
            assert a_closed.wait(30)
            seen["inside b after a closed"] = eval_frame._stance.stance

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert seen["inside b after a closed"] == "force_eager"  # B still runs compiled code eagerly
    assert eval_frame._stance.stance == before == "default"


def test_overlapping_entry_points_in_two_threads_leave_the_state_found() -> None:
    """profile_step in thread A, an estimate in thread B started during A's step and ending after it:
    B's guard found A's state mid-step (the RNG after A's dropout, ``force_eager``) and put it back."""
    import torch._dynamo  # noqa: F401
    from torch._dynamo import eval_frame

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    other, other_x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    rng0, dtype0 = torch.get_rng_state(), torch.get_default_dtype()
    a_mid, b_in, a_done = threading.Event(), threading.Event(), threading.Event()

    def loss_a(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        y = model(batch).sum()  # dropout draws from torch's generator
        torch.set_default_dtype(torch.float64)  # and the step flips a default, which A's guard puts back
        a_mid.set()
        assert b_in.wait(30)
        return y

    def loss_b(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        b_in.set()
        assert a_done.wait(30)
        return model(batch).sum()

    def a() -> None:
        vramnb.profile_step(m, x, loss_a, opt)
        a_done.set()

    def b() -> None:
        assert a_mid.wait(30)
        vramnb.estimate(other, other_x, loss_b, target="24GiB")

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert eval_frame._stance.stance == "default"
    assert torch.equal(torch.get_rng_state(), rng0)
    assert torch.get_default_dtype() == dtype0 == torch.float32


def test_estimate_keeps_what_another_thread_trains_on_the_same_model() -> None:
    """UserState put back every difference it found: the other thread's Adam state (made during the
    estimate) was deleted, its gradients set back to None, and the estimate raised blaming loss_fn."""
    torch.manual_seed(0)
    m, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)

    def train() -> None:
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            m(x).pow(2).sum().backward()
            opt.step()

    ref = vramnb.estimate(m, x, lambda mm, b: mm(b).sum(), opt, device="cpu")
    loss_fn, t = while_the_step_waits(train)
    est = vramnb.estimate(m, x, loss_fn, opt, device="cpu")
    t.join()
    assert est.steady.peak.sources["parameters"] == (8 * 8 + 8) * 4  # float32 weight and bias
    assert est.steady.peak.allocated == ref.steady.peak.allocated
    assert opt.state[m.weight]["step"].item() == 3
    assert opt.state[m.weight]["exp_avg"].shape == (8, 8)
    assert m.weight.grad is not None and m.weight.grad.shape == (8, 8)


def test_a_fake_gradient_the_step_sets_is_put_back_while_another_thread_runs() -> None:
    """Where another thread runs, what the step can only have made itself (a fake tensor) is still put back."""
    m, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    g = torch.ones(8, 8)
    m.weight.grad = g

    def loss_fn(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        m.weight.grad = torch.zeros(8, 8)  # made under the fake mode: a fake tensor
        return model(batch).sum()

    with another_user_thread(), pytest.raises(ValueError, match="replaced a parameter's .grad of yours"):
        vramnb.estimate(m, x, loss_fn, target="24GiB")
    assert m.weight.grad is g


def _autocast_dtypes() -> dict[str, torch.dtype]:
    import torch.nn.functional as F

    x, w, q = torch.randn(2, 4), torch.randn(3, 4), torch.randn(1, 2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return {"linear": F.linear(x, w).dtype,
                "conv1d": F.conv1d(torch.randn(1, 4, 5), torch.randn(2, 4, 3)).dtype,
                "bmm": torch.bmm(torch.randn(1, 2, 4), torch.randn(1, 4, 3)).dtype,
                "layer_norm": F.layer_norm(x, (4,)).dtype,
                "cumsum": torch.cumsum(x, 0).dtype,  # autocast's fallthrough: no kernel of its own on CPU
                "sdpa": F.scaled_dot_product_attention(q, q, q).dtype}


def test_another_threads_cpu_autocast_runs_as_without_an_estimate() -> None:
    """CudaPolicy's kernels are the process's; in other threads they ran ops with autocast off and no cast:
    the user's bf16 autocast got float32 linear/conv/bmm/attention while the estimate ran."""
    plain = _autocast_dtypes()
    assert plain["linear"] == plain["conv1d"] == plain["bmm"] == plain["sdpa"] == torch.bfloat16
    got: dict[str, Any] = {}
    loss_fn, t = while_the_step_waits(lambda: got.update(_autocast_dtypes()))
    est = vramnb.estimate(torch.nn.Linear(4, 4), torch.ones(2, 4), loss_fn, target="24GiB")
    t.join()
    assert got == plain
    assert est.steady.peak.sources["parameters"] == 1024  # weight 64 B and bias 16 B, each a 512 B block



def test_the_users_global_hooks_keep_running_in_other_threads_and_stay_removed() -> None:
    """The estimate emptied PyTorch's global hook dicts for the process: the user's other thread ran its
    modules without them meanwhile, and a hook removed meanwhile came back after the estimate."""
    from torch.nn.modules.module import _global_forward_hooks, register_module_forward_hook

    log: list[str] = []
    before = dict(_global_forward_hooks)
    handle = register_module_forward_hook(lambda mod, args, out: log.append(type(mod).__name__))
    other = register_module_forward_hook(lambda mod, args, out: log.append("kept"))
    mine = torch.nn.Linear(4, 4)
    seen: dict[str, Any] = {}

    def user_thread() -> None:
        mine(torch.ones(1, 4))
        seen["log"] = list(log)
        handle.remove()

    loss_fn, t = while_the_step_waits(user_thread)
    try:
        e = vramnb.estimate(torch.nn.Linear(4, 4), torch.ones(2, 4), loss_fn, device="cpu")
        t.join()
        assert seen["log"] == ["Linear", "kept"]  # the user's thread ran both, once; the fake step ran neither
        assert list(_global_forward_hooks) == [*before, other.id]  # the removed one stays removed
        assert sum("global forward hooks" in n for n in e.notes) == 1
        log.clear()
        mine(torch.ones(1, 4))
        assert log == ["kept"]
    finally:
        other.remove()
    assert dict(_global_forward_hooks) == before
