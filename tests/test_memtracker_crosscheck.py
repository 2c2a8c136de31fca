"""Cross-check profile_step against PyTorch's own MemTracker on the same step
(CPU; three architectures). MemTracker counts only what it tracks (the model,
optimizer and batch registered with ``track_external``), so our *other*
(memory the process held before the step) is left out of the comparison."""

import copy
import gc

import pytest
import torch
from torch import nn

from vramnb._step import profile_step

mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")


def archs():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    transformer = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0), 2)
    return [
        pytest.param(mlp, torch.randn(64, 256), id="mlp"),
        pytest.param(cnn, torch.randn(8, 3, 32, 32), id="cnn"),
        pytest.param(transformer, torch.randn(8, 32, 64), id="transformer"),
    ]


def loss_fn(model, batch):
    return model(batch).square().mean()


@pytest.mark.parametrize("model, batch", archs())
def test_peak_agrees_with_memtracker(model, batch):
    ours_model = copy.deepcopy(model)
    ours_opt = torch.optim.Adam(ours_model.parameters(), foreach=False)
    gc.collect()
    step = profile_step(ours_model, batch, loss_fn, ours_opt, steps=1).first
    # the step's own peak: every source but "other" (memory held before the step, which the
    # garbage collector may free during it), at its highest point
    series = step.timeline_by_source
    own = [sum(series[s][i] for s in series if s != "other") for i in range(len(step.timeline))]
    point = max(range(len(own)), key=own.__getitem__)
    ours = own[point]
    peak = {s: series[s][point] for s in series}

    ref_model = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(ref_model.parameters(), foreach=False)
    mt = mem_tracker.MemTracker()
    mt.track_external(ref_model, ref_opt, batch)
    with mt:
        loss = loss_fn(ref_model, batch)
        loss.backward()
        del loss
        ref_opt.step()
        ref_opt.zero_grad()
    snap = next(v for d, v in mt.get_tracker_snapshot("peak").items() if d.type == "cpu")
    ref = {str(getattr(k, "value", k)): v for k, v in snap.items()}
    assert abs(ours - ref["Total"]) <= 0.02 * ref["Total"]
    assert peak["parameters"] == ref["Parameter"]
    assert peak["buffers"] == ref["Buffer"]
    assert peak["gradients"] == ref["Gradient"]
    # MemTracker counts what the optimizer step allocates (state and its temporaries) as optimizer state,
    # and everything forward creates as activations: compare the sums
    assert abs(peak["optimizer state"] + peak["activations"] + peak["temporaries"]
               - (ref["Optstate"] + ref["Activation"] + ref["Temp"])) <= 0.02 * ref["Total"]
