"""A sharded what-if (estimate with world_size>1, parallel="fsdp"/"zero2"/"zero3") leaves nothing
of its fake world alive: DTensor's caches kept each call's DeviceMesh and its real tensor of rank
numbers (8 bytes for 2 ranks, one per model estimated), and the user's DTensor caches stay theirs."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import vramnb
from vramnb._tracker import cpu_tracker

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)


def _meshes():
    from torch.distributed.device_mesh import DeviceMesh

    return {id(o) for o in gc.get_objects() if type(o) is DeviceMesh}


def _live():
    tr = cpu_tracker()
    gc.collect()
    tr.scan(full=True)
    return tr.current


@pytest.mark.parametrize("parallel", ["fsdp", "zero2"])
def test_repeated_sharded_estimates_leave_no_mesh_and_no_bytes(parallel):
    from torch.distributed.tensor import DTensor

    prop = DTensor._op_dispatcher.sharding_propagator
    users_cache = prop.propagate_op_sharding
    meshes = _meshes()
    before = _live()
    for width in (64, 65, 66):  # another model each time: new cache entries each time
        model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(2)])
        opt = torch.optim.Adam(model.parameters())
        vramnb.estimate(model, torch.randn(8, width), lambda m, b: m(b).sum(), opt, device="cpu",
                        world_size=2, parallel=parallel)
        del model, opt
        assert _live() == before, width
        assert _meshes() == meshes
    assert prop.propagate_op_sharding is users_cache  # the user's cache object, put back


def _shard(shape, ranks):
    """Elements of rank 0's FSDP2 shard: dim 0 split in ceil(dim0 / ranks) rows."""
    rows = -(-shape[0] // ranks)
    rest = 1
    for d in shape[1:]:
        rest *= d
    return rows * rest


@pytest.mark.parametrize("ranks", [2, 4, 3])
def test_lora_adapters_are_sharded_like_every_parameter_under_fsdp(ranks):
    """fully_shard shards every parameter, LoRA's adapters too: rank 0 holds 1/N of each adapter and
    the optimizer state of that shard only (the adapters were whole on every rank)."""
    pytest.importorskip("peft")
    width, r, blocks = 256, 8, 4
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(blocks)])
    opt = torch.optim.AdamW(model.parameters())
    e = vramnb.estimate(model, torch.randn(8, width), lambda m, b: m(b).sum(), opt, device="cpu",
                        recipe={"lora": f"r={r}"}, world_size=ranks, parallel="fsdp")
    base = blocks * (_shard((width, width), ranks) + _shard((width,), ranks))
    adapters = blocks * (_shard((r, width), ranks) + _shard((width, r), ranks))  # lora_A (r, in), lora_B (out, r)
    for step in e.steps:
        assert step.peak.sources["parameters"] == 4 * (base + adapters), step.peak.sources
    steps = 2 * blocks * 4  # AdamW's step count: a float32 scalar per adapter parameter
    assert e.steady.peak.sources["optimizer state"] == 4 * 2 * adapters + steps, e.steady.peak.sources


@pytest.mark.parametrize("recipe", ["lora", "freeze"])
def test_ddp_buckets_hold_the_gradients_of_what_trains_after_the_recipe(recipe):
    """DDP's reducer buckets the parameters that require grad: with LoRA its adapters, with the first
    half of the blocks frozen the other half (the buckets were the whole model's, made before the recipe)."""
    if recipe == "lora":
        pytest.importorskip("peft")
    width, r, blocks = 256, 8, 4
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(blocks)])
    opt = torch.optim.AdamW(model.parameters())
    setting = {"lora": f"r={r}"} if recipe == "lora" else {"freeze": "first half of blocks"}
    e = vramnb.estimate(model, torch.randn(8, width), lambda m, b: m(b).sum(), opt, device="cpu",
                        recipe=setting, world_size=2, parallel="ddp")
    trains = blocks * (r * width + width * r) if recipe == "lora" else blocks // 2 * (width * width + width)
    assert e.steady.peak.sources["workspace"] == 4 * trains, e.steady.peak.sources
