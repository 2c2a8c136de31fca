"""Fake copies of a model, its batch and its optimizer: same shapes, dtypes and
structure, no data (``torch._subclasses.fake_tensor.FakeTensorMode``).

The user's objects are never changed: the copy's parameters, buffers,
gradients, optimizer state and batch are new fake CPU tensors (the model's copy:
:mod:`vramnb.predict._fake_model`). Fake tensors carry a ``meta`` storage of the real
size, which the storage tracker counts (``StorageTracker("meta")``).
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._containers import map_tensors

__all__ = ["KernelFixes", "HostDevicesOnly", "new_mode", "fake_like", "fake_batch", "fake_optimizer",
           "check_batch", "resize_batch"]


def new_mode() -> FakeTensorMode:
    """A fake mode in which real CPU constants (e.g. a module's cached mask) may mix with fakes."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def fake_like(t: torch.Tensor, mode: FakeTensorMode, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """A fake CPU tensor of ``t``'s dtype, and its shape and strides (or ``shape``, contiguous)."""
    with mode:
        if shape is not None:
            return torch.empty(shape, dtype=t.dtype, device="cpu")
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")


def fake_batch(batch: Any, mode: FakeTensorMode, size: int | None = None) -> Any:
    """``batch`` with every tensor replaced by a fake one; with ``size``, the
    first dimension of every tensor that has one becomes ``size`` (see :func:`resize_batch`).

    Tensors sharing a storage (``labels`` that are ``input_ids``, views of one
    buffer) share one fake storage, as they share memory. That storage spans
    only the bytes the batch's tensors reach, not the storage they are views
    of: ``data[i:i + 32]`` of a dataset held in memory is a batch of 32 rows (what
    ``.to(device)`` or a DataLoader gives the step), not the whole dataset.
    Views that reach only a sparse part of their span (a column ``data[:, :3]``)
    each get a dense fake of their own shape, as a copy to the device would make."""
    named = check_batch(batch)
    if size is not None:
        bases: dict[int, torch.Tensor] = {}

        def resized(t: torch.Tensor) -> torch.Tensor:
            if t.dim() == 0:
                return _fake_view(t, mode, {})
            shape = (size, *t.shape[1:])
            if t.shape[0] == 0 or not t.is_contiguous():
                return fake_like(t, mode, shape)
            if id(t) not in bases:  # the same tensor twice (labels = input_ids): one fake
                bases[id(t)] = fake_like(t, mode, shape)
            return bases[id(t)]

        return map_tensors(batch, resized)
    spans = _shared_spans([t for _, t in named])
    return map_tensors(batch, lambda t: _fake_view(t, mode, spans))


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The elements ``[first, last + 1)`` of its storage that ``t`` reaches (in its dtype)."""
    start = int(t.storage_offset())  # int: no symbolic shapes here (torch types it int | SymInt)
    if t.numel() == 0:
        return start, start
    return start, start + 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))


def _shared_spans(tensors: list[torch.Tensor]) -> dict[tuple[int, torch.dtype], list[Any]]:
    """Per (storage, dtype) of the batch: ``[first element, end, fake base or None]`` where the
    batch's views of that storage cover their span densely enough to share it (their own
    sizes add up to at least the span); storages reached sparsely are left out."""
    groups: dict[tuple[int, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        if t.layout == torch.strided and t.device.type != "meta":
            groups.setdefault((t.untyped_storage()._cdata, t.dtype), []).append(t)
    spans: dict[tuple[int, torch.dtype], list[Any]] = {}
    for key, ts in groups.items():
        ranges = [_span(t) for t in ts]
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        own = sum(t.numel() for t in {id(t): t for t in ts}.values())
        if hi - lo <= own:
            spans[key] = [lo, hi, None]
    return spans


def _fake_view(t: torch.Tensor, mode: FakeTensorMode, spans: dict[tuple[int, torch.dtype], list[Any]]) -> torch.Tensor:
    """The fake of one batch tensor: a view of its storage's shared fake span, else its own."""
    key = (t.untyped_storage()._cdata, t.dtype) if t.layout == torch.strided and t.device.type != "meta" else None
    if key not in spans:
        if t.layout == torch.strided and t.numel() and _span(t)[1] - _span(t)[0] > t.numel():
            return fake_like(t, mode, tuple(t.shape))  # sparse in its span: a dense copy of its shape
        return fake_like(t, mode)
    span = spans[key]
    if span[2] is None:
        with mode:
            span[2] = torch.empty(span[1] - span[0], dtype=t.dtype, device="cpu")
    return span[2].as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset() - span[0])


def check_batch(batch: Any) -> list[tuple[str, torch.Tensor]]:
    """The batch's tensors by name (``batch[0]``, ``batch['input_ids']``).

    Raises:
        ValueError: ``batch`` is not a tensor or a tuple/list/dict of tensors, or
            holds a nested (ragged) tensor, which has no fake copy (pad it).
    """
    from .._step import _batch_tensors

    named = _batch_tensors(batch)  # ValueError naming what is not a tensor
    for name, t in named:
        if t.is_nested:
            raise ValueError(f"{name} is a nested (ragged) tensor, which an estimate cannot copy onto fake tensors: "
                             "pad it to a dense tensor (e.g. torch.nested.to_padded_tensor(t, 0.0))")
    return named


def resize_batch(batch: Any) -> int:
    """The batch size of ``batch``: the first dimension its tensors share
    (0-dim tensors in it, such as a scalar setting, have none and are left out).

    Raises:
        ValueError: as :func:`check_batch`; the batch has
            no tensor with a batch dimension (only 0-dim tensors, or none); its
            tensors disagree on their first dimension. The message lists what was found.
    """
    named = check_batch(batch)
    sizes = sorted({t.shape[0] for _, t in named if t.dim()})
    if len(sizes) == 1:
        return sizes[0]
    found = ", ".join(f"{n} of shape {tuple(t.shape)}" for n, t in named[:6])
    found += f" and {len(named) - 6} more" if len(named) > 6 else ""
    if not sizes:
        what = found or f"an empty {type(batch).__name__}, no tensors"
        raise ValueError(f"cannot tell the batch size: the batch has no batch dimension ({what}); changing the batch "
                         "size needs tensors whose first dimension is the batch size, e.g. a tensor of shape (8, 512) "
                         "or a dict of them such as {'input_ids': ids, 'labels': ids}")
    raise ValueError(f"cannot tell the batch size: the batch's tensors have first dimensions {sizes} ({found}); "
                     "changing the batch size needs tensors that share their first dimension")


def _fake_state(v: Any, mode: FakeTensorMode) -> Any:
    """One optimizer state entry as a fake tensor. A scalar (Adam's ``step``) keeps
    its value: made from a Python number inside the fake mode it is a constant
    the optimizer can read (``.item()`` in its bias correction)."""
    if not isinstance(v, torch.Tensor):
        return copy.deepcopy(v)
    if v.numel() == 1 and v.device.type != "meta":
        value = v.item()  # outside the fake mode, which would make it a fake read
        with mode:
            return torch.tensor(value, dtype=v.dtype, device="cpu").reshape(v.shape)
    return fake_like(v, mode)


def _own_copy(obj: Any) -> Any:
    """A shallow copy of ``obj`` made as ``copy.copy`` makes it (``__getstate__``, then the class's
    ``__setstate__``), but with its own top-level dicts and lists: ``Optimizer.__setstate__`` adds
    ``differentiable`` to ``defaults``, which ``copy.copy`` shares with the user's optimizer (SparseAdam's
    ``defaults`` gained a key)."""
    state = obj.__getstate__()
    if not isinstance(state, dict) or getattr(type(obj), "__reduce_ex__", None) is not object.__reduce_ex__:
        return copy.copy(obj)  # a copy protocol of the class's own
    state = {k: copy.copy(v) if type(v) in (dict, list, OrderedDict, defaultdict) else v for k, v in state.items()}
    cls: Any = type(obj)
    new = cls.__new__(cls)
    setstate = getattr(new, "__setstate__", None)
    if setstate is not None:
        setstate(state)
    else:
        new.__dict__.update(state)
    # what ``__getstate__`` leaves out (``Optimizer.__getstate__`` keeps only defaults, state and param_groups):
    # the attributes of a user's optimizer class (a step counter, a noise generator its step reads), containers
    # and generators as copies of their own, so that the fake step neither lacks them nor advances the user's
    own = getattr(obj, "__dict__", None)
    if isinstance(own, dict):
        for k, v in own.items():
            # (a callable over one of the class's methods is a patch of the user's object, an LR scheduler's
            # wrapper of its ``step``, bound to the user's optimizer: the copy keeps the class's own method)
            if k not in new.__dict__ and not (callable(v) and hasattr(cls, k)):
                new.__dict__[k] = v if callable(v) else _copied_attribute(obj, k, v)
    return new


def _holds_torch_state(v: Any) -> bool:
    """Whether ``v`` (or an entry of it, one level down) is a tensor, a module or an optimizer."""
    kinds = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
    if isinstance(v, kinds):
        return True
    if type(v) in (dict, OrderedDict, defaultdict):
        return any(isinstance(x, kinds) for x in v.values())
    if type(v) in (list, tuple, set):
        return any(isinstance(x, kinds) for x in v)
    return False


def _copied_attribute(obj: Any, name: str, v: Any) -> Any:
    """An optimizer attribute for the fake copy: a copy of its own (deep: a counter, a log, a generator with its
    state), shared only where it cannot be copied.

    Raises:
        ValueError: the attribute holds tensors, modules or optimizers of the user's (a wrapped inner
            optimizer, slow weights), which the fake copy cannot take over: the fake step would act on them."""
    if _holds_torch_state(v):
        raise ValueError(
            f"your optimizer {type(obj).__name__} keeps tensors, a module or an optimizer in its attribute "
            f"{name!r} ({type(v).__name__}), which the estimate cannot copy onto the fake model (its step would act on "
            "your real objects); pass an optimizer factory that builds it on the parameters it is given instead, "
            f"e.g. lambda params: {type(obj).__name__}(params)")
    if isinstance(v, torch.Generator):
        g = torch.Generator(device=v.device)
        g.set_state(v.get_state())
        return g
    try:  # a counter, a log, a NumPy generator, a plain object of the user's: the copy's own
        return copy.deepcopy(v)
    except Exception:  # noqa: BLE001 - an object that cannot be copied (a lock, a file): shared, as the model's are
        return v


def fake_optimizer(optimizer: torch.optim.Optimizer, fakes: dict[int, torch.Tensor], mode: FakeTensorMode,
                   dropped: list[str] | None = None) -> torch.optim.Optimizer:
    """A shallow copy of ``optimizer`` over the fake parameters, with its state
    (exp_avg, momentum buffers, step counters) as fake tensors. Its step hooks are
    the copy's own dicts, without the user's (an EMA update, a logger: they would act
    on the user's objects; see :func:`vramnb.predict._user_hooks.user_hook_filter`), which are
    named in ``dropped``."""
    from ._user_hooks import user_hook_filter

    fo = _own_copy(optimizer)
    for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):  # the copy's own, not the user's dicts
        if isinstance(getattr(optimizer, name, None), dict):
            setattr(fo, name, user_hook_filter(getattr(optimizer, name), f"optimizer {name[11:-1].replace('_', ' ')}",
                                               dropped if dropped is not None else []))
    fo.param_groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [fakes[id(p)] for p in g["params"]]}
                       for g in optimizer.param_groups]
    state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
    for p, st in optimizer.state.items():
        if id(p) in fakes:
            state[fakes[id(p)]] = {k: _fake_state(v, mode) for k, v in st.items()}
    fo.state = state
    return fo


#: norms whose (output, mean, inverse std) the meta kernels give in the input's dtype -> the position of the
#: weight that decides whether the device kernels keep fp32 statistics (None: always, for a 16-bit input)
_STATISTICS: dict[Any, int | None] = {getattr(torch.ops.aten, n): None for n in ("native_batch_norm",
                                                                                "_native_batch_norm_legit")
                                      if hasattr(torch.ops.aten, n)}
_STATISTICS[torch.ops.aten.native_layer_norm] = 2  # (input, normalized_shape, weight, bias, eps)
_STATISTICS[torch.ops.aten.native_group_norm] = 1  # (input, weight, bias, N, C, HxW, group, eps)

_GROUPED_MM = getattr(torch.ops.aten, "_grouped_mm", None)


def _fp32_statistics(func: Any, args: tuple, out: Any) -> Any:
    """A norm's (output, mean, inverse std) with the statistics in fp32 where the real kernels keep them so."""
    if not (isinstance(out, tuple) and len(out) == 3):
        return out
    y, mean, rstd = out
    if mean.dtype not in (torch.float16, torch.bfloat16) or not mean.numel():
        return out
    at = _STATISTICS[func.overloadpacket]
    if at is not None:  # layer/group norm: fp32 statistics only beside fp32 weights
        w = args[at] if len(args) > at else None
        if not (isinstance(w, torch.Tensor) and w.dtype == torch.float32):
            return out
    return (y, mean.float(), rstd.float())


def _fp32_tensors(args: Any) -> bool:
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args[:2])


#: factories whose one-element result the optimizer's step keeps as scalar state -> the value they fill in
_SCALAR_FACTORIES: dict[Any, Callable[[tuple, dict[str, Any]], Any]] = {
    torch.ops.aten.zeros.default: lambda args, kwargs: 0,
    torch.ops.aten.ones.default: lambda args, kwargs: 1,
    torch.ops.aten.full.default: lambda args, kwargs: args[1] if len(args) > 1 else kwargs.get("fill_value"),
}


def _constant_scalar(func: Any, args: tuple, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """A one-element CPU tensor from a factory as a constant of the fake mode below (``torch.tensor``
    of its value, which the fake mode lifts as a constant), or None where it is anything else."""
    size = args[0] if args else kwargs.get("size")
    if size is None or math.prod(size) != 1:
        return None
    device = torch.device(kwargs["device"]) if kwargs.get("device") is not None else torch.device("cpu")
    if device.type != "cpu" or kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        return None
    value = _SCALAR_FACTORIES[func](args, kwargs)
    if not isinstance(value, (bool, int, float)):
        return None
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return torch.tensor(value, dtype=dtype).reshape(tuple(size))


class KernelFixes(TorchDispatchMode):
    """Where a fake (meta) kernel allocates other than the real kernels, make it
    allocate what they do. Known case: batch norm on 16-bit input saves its
    mean and inverse std in fp32 on CPU and CUDA, the meta kernel in the input's
    dtype (PyTorch 2.4-2.13).

    Layer and group norm on a 16-bit input with fp32 weights (CPU autocast's mix): the CPU
    kernels save mean and inverse std in fp32, the meta kernels in the input's dtype
    (found on torchvision's Swin, ConvNeXt and MaxViT in bf16: 59-141 KiB per step).

    ``_grouped_mm`` (mixture-of-experts layers) in fp32: CUDA's kernel takes it, the meta
    kernel of PyTorch 2.11-2.13 refuses anything but bf16; the output's shape is the meta
    kernel's for bf16 inputs, in fp32.

    While :attr:`scalar_reads` is on (the optimizer's step), the step's scalar state is read as the
    real optimizer reads it: a one-element tensor the step makes from a size and a value (ASGD's
    ``torch.ones(())`` for ``mu``, ``torch.zeros(())`` for its ``step``) is made a constant of the
    fake mode, as ``torch.tensor(0.0)`` (Adam's, NAdam's ``step`` and ``mu_product``) and a warm
    state's scalars (:func:`fake_optimizer`) already are, and the fake mode carries its value
    through the step's arithmetic; reading it (``.item()``: bias corrections, NAdam's
    ``1 - mu_product``, RAdam's rectification and ASGD's averaging branches, which decide what is
    allocated) gives that value. Reading a scalar whose value is not known (computed from
    parameters or gradients: Adafactor's parameter norm) gives 1: such values set step sizes,
    not what is allocated."""

    scalar_reads = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.scalar_reads and func is torch.ops.aten._local_scalar_dense.default:
            t = args[0]
            if getattr(t, "constant", None) is not None:  # a value the fake mode carries: read it
                return func(*args, **(kwargs or {}))
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        if self.scalar_reads and func in _SCALAR_FACTORIES:
            made = _constant_scalar(func, args, kwargs or {})
            if made is not None:
                return made
        if func.overloadpacket is _GROUPED_MM and _fp32_tensors(args):
            low = [a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args]
            shape = func(*low, **(kwargs or {}))
            return torch.empty(shape.shape, dtype=torch.float32)  # the fp32 result CUDA's kernel returns
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in _STATISTICS:
            out = _fp32_statistics(func, args, out)
        return out


_FAKE_DEVICES = ("cpu", "meta")  # the devices an estimate's fake tensors may be on


def _devices(out: Any) -> Any:
    """The devices of the tensors in an operator's output (a tensor, or a tuple or
    list of tensors or of lists of tensors)."""
    if isinstance(out, torch.Tensor):
        yield out.device
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _devices(o)


class HostDevicesOnly(TorchDispatchMode):
    """Refuse, with a :class:`ValueError`, any tensor the step makes on a device
    other than the CPU (or ``meta``): ``torch.zeros(..., device="cuda")``,
    ``.cuda()``, ``.to("cuda")``, a ``torch.device("cuda")`` context or default
    device, a real CUDA constant mixed in.

    An estimate runs the step on fake *CPU* tensors and models the card on top.
    A fake ``cuda`` tensor on a PyTorch built without CUDA aborts the whole
    process as soon as autograd records it (``InputMetadata`` asks for a CUDA
    device guard: exit 134, the kernel dies), and with CUDA it mixes devices.
    A dispatch mode above the fake mode sees every operator's output before
    autograd does, so the refusal comes first. ``pin_memory``, which needs
    CUDA and has no fake kernel, is refused by name.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket in _PINNING:
            raise ValueError("the step pins host memory (pin_memory), which needs CUDA and which fake tensors cannot do; "
                             "pin the batch before the step (e.g. in the DataLoader), or measure it with vramnb.profile_step")
        out = func(*args, **(kwargs or {}))
        for device in _devices(out):
            if device.type not in _FAKE_DEVICES:
                raise ValueError(
                    f"the step makes a tensor on {device} ({func.overloadpacket.__name__}: e.g. "
                    f"torch.zeros(..., device={device.type!r}), .cuda(), .to({device.type!r}) or a torch.device "
                    f"context); an estimate runs the step on fake CPU tensors and models the card on top. Create "
                    "tensors on the device of the model or batch instead (e.g. torch.zeros(..., device=x.device))")
        return out


_PINNING = frozenset(getattr(torch.ops.aten, n) for n in ("_pin_memory", "pin_memory") if hasattr(torch.ops.aten, n))
