"""A call inside the user's ``torch.inference_mode()``: autograd records nothing there, so no training step can
run. profile_step raised a bare AssertionError from vramnb's own bookkeeping (a product of a leaf made no node);
now each entry point refuses naming inference_mode, and the model, optimizer and the mode are as they were."""
import pytest
import torch
import torch.nn as nn

import vramnb
from vramnb._checks import InputError

ENTRIES = {
    "profile_step": lambda m, b, lf, o: vramnb.profile_step(m, b, lf, o),
    "estimate": lambda m, b, lf, o: vramnb.estimate(m, b, lf, o, target="8GiB"),
    "fit": lambda m, b, lf, o: vramnb.fit(m, b, lf, o, target="8GiB", progress=False),
}


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_call_inside_inference_mode_is_refused_naming_it(entry):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with torch.inference_mode():
        with pytest.raises(InputError, match=r"inside torch\.inference_mode\(\)"):
            ENTRIES[entry](m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), o)
        assert torch.is_inference_mode_enabled()
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert o.state == {} and all(p.grad is None for p in m.parameters())
