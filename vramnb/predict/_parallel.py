"""Several GPUs in one process: PyTorch's own sharding run against a fake process group.

For :func:`vramnb.estimate` with ``world_size=N``: a process group of the
``"fake"`` backend (``torch.testing._internal.distributed.fake_pg``: every
collective returns at once, no other rank exists) lets PyTorch's FSDP2
(``fully_shard``) shard the fake model as it would for rank 0 of N GPUs; the
step then runs on fake tensors and what rank 0 holds is measured.

* ``"fsdp"`` / ``"zero3"``: parameters, gradients and optimizer state sharded;
  a block's parameters are all-gathered for its forward and backward and freed
  after (``reshard_after_forward=True``);
* ``"zero2"``: gradients and optimizer state sharded, the parameters gathered
  once and kept from the forward through the backward (``reshard_after_forward=False``);
* ``"ddp"``: every rank holds the whole model; DDP's reducer needs real data,
  so it cannot run on fake tensors: its gradient buckets (a flat copy of the
  gradients, ``gradient_as_bucket_view=False`` by default) are added to the
  one-GPU step.

Collective libraries' own buffers (NCCL) are outside PyTorch's allocator and
not modelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["PARALLEL", "fake_world", "shard", "tied_blocks"]

PARALLEL = ("ddp", "fsdp", "zero2", "zero3")


@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    """A fake process group of ``world_size`` ranks (this process is rank 0).

    Raises:
        ValueError: a real process group is already initialised (the estimate
            must not touch it), or torch has no distributed support.
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise ValueError("this PyTorch has no torch.distributed: multi-GPU estimates need it")
    if dist.is_initialized():
        raise ValueError("a process group is already initialised in this process; estimate world_size>1 "
                         "from a process without one (e.g. a notebook that has not called init_process_group)")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        with _own_sharding_caches():
            yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _own_sharding_caches() -> Iterator[None]:
    """DTensor caches what it computes for each operator's input specs (sharding propagation, tensor
    metadata, redistribution plans, a mesh's topology), and each spec holds its ``DeviceMesh``, which
    holds a real tensor of rank numbers (8 bytes for 2 ranks): the estimate's entries kept its fake
    world's mesh alive after it (a leak across calls, one mesh per model), and a later DTensor of the
    user's on an equal CPU mesh could be answered from them. During the estimate each Python cache is a
    fresh one and the user's is put back after (:func:`_fresh_caches`); the C++ fast path's cache,
    which cannot be swapped, is cleared after (the user's DTensor operators then compute their
    sharding again once: the same result)."""
    try:
        from torch.distributed.tensor import DTensor, _collective_utils, _redistribute
        from torch.distributed.tensor._sharding_prop import LocalLRUCache, ShardingPropagator
    except ImportError:  # a torch without these caches
        yield
        return
    prop = DTensor._op_dispatcher.sharding_propagator
    swaps = [(prop, "propagate_op_sharding", lambda: LocalLRUCache(prop.propagate_op_sharding_non_cached)),
             (ShardingPropagator, "_propagate_tensor_meta_cached", None),
             (_collective_utils.MeshTopoInfo, "build_from_mesh", None),
             (_redistribute, "_gen_transform_infos", None)]
    try:
        with _fresh_caches(swaps):
            yield
    finally:
        clear = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
        if clear is not None:
            clear()


@contextlib.contextmanager
def _fresh_caches(swaps: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(owner, name, make)``: ``owner.name`` (a ``functools.lru_cache``, or what ``make()``
    makes) is a fresh cache of the same function while inside, and the owner's own attribute is put
    back after (as found, a static method as a static method)."""
    import functools

    saved = []
    try:
        for owner, name, make in swaps:
            raw = vars(owner).get(name, _ABSENT)
            cached = raw.__func__ if isinstance(raw, staticmethod) else raw
            if make is not None:
                fresh = make()
            elif hasattr(cached, "cache_info") and hasattr(cached, "__wrapped__"):
                size = cached.cache_info().maxsize
                fresh = functools.lru_cache(maxsize=size)(cached.__wrapped__)
                if isinstance(raw, staticmethod):
                    fresh = staticmethod(fresh)
            else:  # another torch: left as it is
                continue
            setattr(owner, name, fresh)
            saved.append((owner, name, raw))
        yield
    finally:
        for owner, name, raw in reversed(saved):
            if raw is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, raw)


_ABSENT = object()


def tied_blocks(model: torch.nn.Module, blocks: list[torch.nn.Module]) -> tuple[list[torch.nn.Module], list[str]]:
    """``blocks`` less those sharing a parameter with another block or with the rest of the model
    (tied weights: ``lm_head.weight = embed.weight``), and the names of the tied parameters.

    FSDP manages each parameter in one group; a block holding a tied parameter is
    left to the root's group, which then holds both ends of the tie, as FSDP users
    do with tied embeddings."""
    names = {id(m): n for n, m in model.named_modules()}
    prefixes = [(names.get(id(b), ""), b) for b in blocks]
    owners: dict[int, set[int]] = {}
    seen: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        block = next((i for i, (pre, _) in enumerate(prefixes) if pre and name.startswith(pre + ".")), -1)
        owners.setdefault(id(p), set()).add(block)
        seen.setdefault(id(p), []).append(name)
    tied = {i for o in owners.values() if len(o) > 1 for i in o if i >= 0}
    tied_names = [" = ".join(n) for k, n in seen.items() if len(owners[k]) > 1]
    return [b for i, b in enumerate(blocks) if i not in tied], tied_names


def _shardable(blocks: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """``blocks`` that ``fully_shard`` can take: a container without a forward of its own
    (``nn.ModuleList``, ``nn.ModuleDict``) stands for its children; blocks without
    parameters are left out (nothing to shard)."""
    out: list[torch.nn.Module] = []
    for b in blocks:
        if isinstance(b, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            out += _shardable(list(b.children()))
        elif any(True for _ in b.parameters()):
            out.append(b)
    return out


def shard(model: torch.nn.Module, parallel: str, world_size: int,
          blocks: list[torch.nn.Module]) -> tuple[list[torch.Tensor], list[torch.nn.Module], list[str]]:
    """Apply ``parallel`` to the fake ``model`` for rank 0 of ``world_size``.

    Returns the extra tensors the strategy keeps (DDP's gradient buckets), the
    blocks sharded one by one, and the tied parameters left to the root's group
    (see :func:`tied_blocks`).
    """
    if parallel == "ddp":
        buckets: dict[torch.dtype, int] = {}
        for p in model.parameters():
            if p.requires_grad:
                buckets[p.dtype] = buckets.get(p.dtype, 0) + p.numel()
        return [torch.empty(n, dtype=dt) for dt, n in buckets.items()], [], []
    blocks, tied = tied_blocks(model, _shardable(blocks))
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import init_device_mesh

    with unset_fake_temporarily():  # the mesh holds a real tensor of rank numbers
        mesh = init_device_mesh("cpu", (world_size,))
    keep = parallel == "zero2"
    for b in blocks:
        fully_shard(b, mesh=mesh, reshard_after_forward=not keep)
    fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
    return [], blocks, tied


def rebuild_optimizer(opt: Any, model: torch.nn.Module) -> Any:
    """The same optimizer class and settings over the sharded parameters."""
    from .._optim import rebuild_optimizer as rebuild

    if opt is None:
        return None
    return rebuild(opt, [p for p in model.parameters() if p.requires_grad])
