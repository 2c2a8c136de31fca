"""A CPU estimate says "exact storage sizes" only where the fake step's meta kernels give the real kernels'
sizes (newuser8, 2026-12-04 g: an LSTM language model estimated 24 % under its measured CPU step, with
"exact storage sizes" and no note). PyTorch's meta kernel of aten.mkldnn_rnn_layer (what nn.LSTM runs on the
CPU) returns a 0-byte workspace; the real oneDNN kernel keeps one for backward (tests/test_zoo_cpu.py's xfails)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb


class Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(32, 64, batch_first=True)
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0]).mean()


def _estimate(cell: type[nn.Module]) -> vramnb.Estimate:
    torch.manual_seed(0)
    return vramnb.estimate(Recurrent(cell), torch.randn(4, 10, 32), None, lambda p: torch.optim.SGD(p, lr=0.1),
                           device="cpu")


def _real_workspace() -> int:
    """What the real kernel keeps: the uint8 workspace output of aten.mkldnn_rnn_layer, read on this CPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[int] = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.mkldnn_rnn_layer.default:
                seen.append(out[3].untyped_storage().nbytes())
            return out

    torch.manual_seed(0)
    with Watch():
        Recurrent(nn.LSTM)(torch.randn(4, 10, 32)).backward()
    return seen[0] if seen else 0


def test_an_lstm_cpu_estimate_says_what_it_does_not_count() -> None:
    if _real_workspace() == 0:
        pytest.skip("this CPU's nn.LSTM does not run oneDNN's kernel with a workspace")
    est = _estimate(nn.LSTM)
    assert est.method == "estimate: fake tensors, exact storage sizes except what the notes name"
    notes = [n for n in est.notes if n.startswith("not exact: aten.mkldnn_rnn_layer ×1: ")]
    assert len(notes) == 1 and "activations are under-estimated" in notes[0], est.notes
    assert "not exact" in str(est)


@pytest.mark.parametrize("cell", [nn.GRU, nn.RNN])
def test_a_gru_or_rnn_cpu_estimate_stays_exact(cell: type[nn.Module]) -> None:
    est = _estimate(cell)
    assert est.method == "estimate: fake tensors, exact storage sizes"
    assert not any(n.startswith("not exact") for n in est.notes)
