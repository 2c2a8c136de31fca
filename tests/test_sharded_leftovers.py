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

