"""profile_distributed with a model in shared memory (``model.share_memory()``, as Hogwild! notebooks do): every
forked rank trained the notebook's weights in place (they share the pages). Refused before any rank starts,
naming the tensors, whether they come in ``args`` or by name from train_fn's code; the weights unchanged."""
import pytest
import torch
import torch.nn as nn

from vramnb import profile_distributed


def _rank(rank, world, model):
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    return ddp, torch.randn(4, 8), (lambda m, b: m(b).pow(2).mean()), torch.optim.SGD(ddp.parameters(), lr=0.1)


SHARED = nn.Linear(8, 2)


def _rank_by_name(rank, world):
    return _rank(rank, world, SHARED)


@pytest.mark.parametrize("how", ["args", "by name"])
def test_a_model_in_shared_memory_is_refused_before_the_ranks_start(how):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)) if how == "args" else SHARED
    m.share_memory()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=r"in shared memory .*copy\.deepcopy\(model\)") as e:
        if how == "args":
            profile_distributed(_rank, 2, args=(m,), backend="gloo", timeout=120)
        else:
            profile_distributed(_rank_by_name, 2, backend="gloo", timeout=120)
    assert ("args[0]'s parameter '0.weight'" if how == "args" else "a tensor of shape (2, 8) that train_fn reaches") \
        in str(e.value)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def _writes_the_map(rank, world, mm):
    mm[0:4] = b"\xff\xff\xff\xff"
    return _rank(rank, world, nn.Linear(8, 2))


@pytest.mark.xfail(strict=True, reason="a writable MAP_SHARED mmap passed to (or reached by) the ranks: a rank's write "
                   "lands in the notebook's mapping and its file; it is neither refused before the ranks start nor "
                   "named in the report")
def test_a_shared_writable_mmap_written_by_a_rank_is_refused(tmp_path):
    import mmap

    path = tmp_path / "rows.bin"
    path.write_bytes(bytes(64))
    with open(path, "r+b") as fh:
        mm = mmap.mmap(fh.fileno(), 0)
        with pytest.raises(ValueError, match="mmap"):
            profile_distributed(_writes_the_map, 2, args=(mm,), backend="gloo", timeout=120)
        assert mm[0:4] == bytes(4)
