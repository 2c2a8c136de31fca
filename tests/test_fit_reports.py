"""Item 28.18 (parts): the README's ``print(plan.code)`` works or says clearly why not;
compare's per-source columns read + as memory saved, by name."""

from __future__ import annotations

import pytest
import torch

import vramnb
from vramnb._units import format_bytes


def _net(width: int, depth: int) -> torch.nn.Module:
    return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(depth)))


def _loss(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x).square().mean()


def test_code_where_nothing_fits_names_the_closest_plan_and_the_fix() -> None:
    torch.manual_seed(0)
    net = _net(512, 2)
    r = vramnb.fit(net, torch.randn(64, 512), _loss, torch.optim.AdamW(net.parameters()), target=70 * 2**20,
                   margin=0.0, allow={"precision": ["bf16"]}, progress=False)
    assert r.best is None
    closest = min(r.plans, key=lambda p: p.device_memory)
    with pytest.raises(vramnb.VramnbError) as err:
        r.code  # noqa: B018 - the property raises
    msg = str(err.value)
    assert closest.recipe.describe() in msg and format_bytes(closest.device_memory - r.budget) in msg
    assert "To make it fit" in msg


def test_code_where_a_plan_fits_is_the_best_plans() -> None:
    torch.manual_seed(0)
    net = _net(64, 2)
    r = vramnb.fit(net, torch.randn(8, 64), _loss, torch.optim.AdamW(net.parameters()), target="24GiB",
                   allow={"precision": ["bf16"]}, recipe={"precision": "bf16"}, progress=False)
    assert r.best is not None and r.code == r.best.code


def test_compare_columns_say_saved_and_positive_is_saved() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(),
                              torch.nn.Linear(256, 32))
    c = vramnb.compare(net, torch.randn(64, 32), _loss, recipes=[{}, {"micro_batches": 4}], progress=False)
    text = repr(c)
    head = next(line for line in text.splitlines() if "recipe" in line and "peak" in line)
    assert "Δ" not in head and "saved:" in head, head
    assert "positive: memory saved" in text


class _Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


@pytest.mark.parametrize("value", ["every block", "every 2nd block", ("blocks.1", "blocks.3")])
def test_printed_checkpointing_wraps_once_when_pasted_twice(value) -> None:
    import functools

    from torch.utils.checkpoint import checkpoint

    from vramnb.techniques.registry import REGISTRY

    net = _Blocks()
    code = REGISTRY["checkpointing"].code(value, model=net, name="net")
    assert "functools.partial" in code, code
    ns = {"net": net, "torch": torch}
    exec(code, ns)
    exec(code, ns)  # pasted twice
    wrapped = [b for b in net.blocks if isinstance(b.forward, functools.partial)]
    assert wrapped
    for b in wrapped:
        assert b.forward.func is checkpoint and not isinstance(b.forward.args[0], functools.partial)
    x = torch.randn(2, 8, requires_grad=True)
    net(x).sum().backward()


def test_breakdown_bars_sum_to_allocated_with_unattributed_bytes() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vramnb._breakdown import Breakdown
    from vramnb._plot import _stack

    bds = [Breakdown(sources={"parameters": 3 * 2**20, "activations": 2**20}, allocated=4 * 2**20 + 7 * 2**20 // 2),
           Breakdown(sources={"parameters": 3 * 2**20}, allocated=3 * 2**20)]
    fig, ax = plt.subplots()
    _stack(ax, ["a", "b"], bds, 2**20)
    tops = [0.0, 0.0]
    for bar in ax.patches:
        if bar.get_fill():  # the outline of the highlighted bar is not a segment
            x = round(bar.get_x() + bar.get_width() / 2)
            tops[x] = max(tops[x], bar.get_y() + bar.get_height())
    assert tops == [b.allocated / 2**20 for b in bds]
    assert [t.get_text() for t in ax.texts] == [f"{b.allocated / 2**20:.1f}" for b in bds]
    plt.close(fig)
