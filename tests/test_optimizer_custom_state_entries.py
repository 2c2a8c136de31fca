"""Adversary round 2026-12-04e: an optimizer of the user's that keeps an entry of its own in ``state``
under a key that is not a parameter (``self.state["global_step"] = n``; PyTorch's ``state_dict()`` and
``load_state_dict()`` keep such entries). Every entry point read ``optimizer.state``'s values as
per-parameter dicts and raised a bare ``AttributeError: 'int' object has no attribute 'values'``
(``profile_step``) or ``... 'items'`` (``estimate``, ``max_batch_size``, ``fit``). Now they run, and the
entry is as found afterwards.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import ENTRY_POINTS, sq_loss


class StringKeyed(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        self.state["global_step"] = self.state.get("global_step", 0) + 1
        self.state["history"] = [*self.state.get("history", []), self.state["global_step"]]
        return super().step(closure)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_optimizer_state_entry_that_is_no_parameters_is_kept(entry: str) -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = StringKeyed(m.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 8)
    for _ in range(2):
        opt.zero_grad()
        sq_loss(m, x).backward()
        opt.step()
    history = opt.state["history"]
    momenta = [(opt.state[p]["momentum_buffer"], opt.state[p]["momentum_buffer"].clone()) for p in m.parameters()]
    ENTRY_POINTS[entry](m, x, opt)
    assert opt.state["global_step"] == 2 and opt.state["history"] is history and history == [1, 2]
    assert all(opt.state[p]["momentum_buffer"] is t and torch.equal(t, c) for p, (t, c) in zip(m.parameters(), momenta))
