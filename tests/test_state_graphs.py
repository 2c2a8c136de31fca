"""State updated with gradients on in objects the cell does not name (field cases
custom_batchnorm_running_mean_keeps_graph, hedge_weights_update_keeps_graphs): ``%vram``
names the buffer or the global with its graph and the place of the update, and the fix."""

from __future__ import annotations

import gc

import pytest

from tests.conftest import run


@pytest.fixture(autouse=True)
def _collect_after():
    # the cells' functions and classes keep the namespace in reference cycles: collect them after the
    # notebook is torn down, so that no later test sees gc free this test's tensors
    yield
    import vramnb

    vramnb.clear_history()
    gc.collect()


def _text(ip, cell: str) -> str:
    _, cap = run(ip, cell)
    return cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)


def test_a_buffer_updated_with_a_graph_is_named_with_the_line_of_its_update(ip):
    run(ip, "class Norm(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('avg', torch.zeros(4))\n"
            "    def forward(self, x):\n        self.avg = 0.9 * self.avg + 0.1 * x.mean(0)\n        return x - self.avg\n"
            "net = torch.nn.Sequential(torch.nn.Linear(4, 4), Norm())\n"
            "for _ in range(3):\n    net(torch.ones(2, 4)).sum().backward()")
    text = _text(ip, "%vram -d cpu")
    assert "net[1].avg is a buffer that carries an autograd graph (grad_fn AddBackward0), updated in Norm.forward (" \
        in text, text
    assert ":6): an update computed with gradients on" in text and "`with torch.no_grad():`" in text
    # the fix the line gives: under no_grad the buffer carries no graph, and the line is gone
    run(ip, "with torch.no_grad():\n    net[1].avg = net[1].avg.detach()")
    assert net_has_no_line(_text(ip, "%vram -d cpu"))


def net_has_no_line(text: str) -> bool:
    # net's own line (another test's object in the shared shell may still carry one)
    return "net[1].avg is a buffer that carries an autograd graph" not in text


def test_a_global_reassigned_by_a_function_with_a_graph_is_named_and_a_plain_one_is_not(ip):
    run(ip, "w = torch.ones(3, requires_grad=True)\nalpha = torch.full((3,), 0.5)\n"
            "def update():\n    global alpha\n    alpha = alpha * w\n"
            "for _ in range(2):\n    update()\nloss = (w * 2).sum()")
    text = _text(ip, "%vram -d cpu")
    assert "alpha carries an autograd graph (grad_fn MulBackward0) and is reassigned by update (" in text, text
    assert "loss carries" not in text  # a graph no function updates: the kept-graph lines cover it


def test_a_buffer_set_once_from_a_graph_is_not_said_to_chain(ip):
    run(ip, "w = torch.ones(4, requires_grad=True)\nclass Keep(torch.nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.register_buffer('scale', w * 2)\n"
            "    def forward(self, x):\n        return x * self.scale\nk = Keep()")
    text = _text(ip, "%vram -d cpu")
    assert ("k.scale is a buffer that carries an autograd graph (grad_fn MulBackward0): it keeps that graph alive; "
            "compute it under `with torch.no_grad():` (or store `.detach()`)") in text, text
    assert "chains" not in text
