"""A peak where a name's old and new values are alive together (field case no_grad_reassign_peak,
pytorch#34330: ``z = layer(z)`` under no_grad): the cell report says the old value was alive at
the peak beside what the cell made, and why; bytes from the cell's timeline, checked against the
peak. CPU, bytes from shapes."""

from __future__ import annotations

import vramnb
from tests.conftest import run
from vramnb._units import format_bytes

MiB = 2**20


def _report(ip, cell: str):
    res, _ = run(ip, "%%vram -d cpu --breakdown -q\n" + cell)
    assert res.error_in_exec is None, res.error_in_exec
    return vramnb.history()[-1]


def test_z_equals_layer_of_z_says_the_old_value_lives_until_the_assignment(ip):
    run(ip, "lay = torch.nn.Linear(256, 256)\nz = torch.randn(4096, 256)")
    rep = _report(ip, "with torch.no_grad():\n    z = lay(z)\n    z = lay(z)")
    old = 4096 * 256 * 4  # 4 MiB: z before the cell; each new z the same
    assert (f"at the peak the value z had before the cell ({format_bytes(old)}) was still alive beside "
            f"{format_bytes(old)} of tensors the cell made and freed: `z = lay(z)` computes the new z while z still "
            "holds the old one, which Python frees only after the assignment (not a leak)") in rep.notes, rep.notes
    # the sentence's bytes are the peak's: the old z (there at the start) and one new z beside it
    assert rep.peak_allocated - rep.start_allocated == old


def test_another_shape_an_elementwise_reassignment_in_a_loop(ip):
    run(ip, "h = torch.ones(1 << 20)")
    rep = _report(ip, "with torch.no_grad():\n    for i in range(3):\n        h = torch.relu(h) * 0.5")
    text = " ".join(rep.notes)
    assert f"at the peak the value h had before the cell ({format_bytes(4 * MiB)}) was still alive" in text, text
    assert "`h = torch.relu(h) * 0.5` computes the new h while h still holds the old one" in text, text


def test_no_line_where_the_old_value_stays_or_nothing_is_reassigned(ip):
    run(ip, "lay2 = torch.nn.Linear(256, 256)\nq = torch.randn(4096, 256)")
    rep = _report(ip, "with torch.no_grad():\n    out = lay2(q)")  # q is kept: both alive by design
    assert not any(n.startswith("at the peak the value") for n in rep.notes), rep.notes
    run(ip, "keep_old = q")
    rep = _report(ip, "with torch.no_grad():\n    q = lay2(q)")  # another name keeps the old value: not freed
    assert not any(n.startswith("at the peak the value") for n in rep.notes), rep.notes


def test_no_line_where_the_peak_is_another_statements_and_the_reassignment_comes_later(ip):
    """Adversarial: the peak is a large temporary of its own (made and freed before the reassignment):
    the old value is alive at that peak, but the reassignment is not why."""
    run(ip, "lay3 = torch.nn.Linear(256, 256)\nzz = torch.randn(1024, 256)")
    rep = _report(ip, "with torch.no_grad():\n    big = torch.ones(1 << 22)\n    del big\n    zz = lay3(zz)")
    assert not any(n.startswith("at the peak the value") for n in rep.notes), rep.notes
