"""Snapshot a live model and optimizer, and put them back exactly.

Profiling a step runs a real forward, backward and optimizer step on the user's
model; afterwards everything is restored bit for bit: parameter and buffer
bytes (in the same tensor objects, so references the user holds stay valid;
a tensor whose storage, shape, dtype or class a forward changed, as a lazy
module's materialisation does, gets its own back), ``.grad`` (the same object,
or ``None``), ``requires_grad`` flags and hooks of those tensors, every module's
class and attributes and the contents of its dicts, lists and sets (submodules,
parameters, buffers, every hooks dict: a forward that builds a submodule,
rebinds a buffer or adds an attribute is undone), the optimizer's state (same
dicts and tensor objects, bytes restored; state created by the profile removed),
its ``param_groups`` and attributes, PyTorch's process-wide module and
optimizer hooks, the batch's bytes and ``.grad``, and the RNG states (PyTorch
CPU and CUDA when initialised, Python's ``random``, NumPy's).
Not restored: tensors or containers mutated in place that are none of the
above, and user-made ``torch.Generator`` objects. Copies are kept in host
memory as ``bytearray`` so they are not counted as tensor storages by the CPU
tracker.

:meth:`Snapshot.restore` runs every part even when one fails (the first error
is raised at the end), and a ``KeyboardInterrupt`` that arrives while it runs
on the main thread is held back until it is done, then raised
(:class:`vramnb._interrupt.InterruptGuard`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._interrupt import InterruptGuard, protected

__all__ = ["Snapshot", "SetAside", "run_all"]


def _save_bytes(t: torch.Tensor) -> bytearray:
    st = t.untyped_storage()
    buf = bytearray(st.nbytes())
    if len(buf):
        dst = torch.frombuffer(buf, dtype=torch.uint8)
        src = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
        dst.copy_(src)
    return buf


def _load_bytes(t: torch.Tensor, buf: bytearray) -> None:
    st = t.untyped_storage()
    if st.nbytes() != len(buf):
        st.resize_(len(buf))
    if len(buf):
        dst = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
        with torch.no_grad():
            dst.copy_(torch.frombuffer(buf, dtype=torch.uint8))


class _SparseCopy:
    """A sparse COO tensor's indices, values and size in host memory."""

    def __init__(self, t: torch.Tensor) -> None:
        self.size, self.coalesced = tuple(t.shape), t.is_coalesced()
        self.parts = [(_save_bytes(x.clone(memory_format=torch.contiguous_format)), tuple(x.shape), x.dtype)
                      for x in (t._indices(), t._values())]

    def tensor(self, device: torch.device) -> torch.Tensor:
        ind, val = (torch.frombuffer(bytearray(b), dtype=torch.uint8).view(dt).reshape(sh).to(device) if len(b)
                    else torch.empty(sh, dtype=dt, device=device) for b, sh, dt in self.parts)
        return torch.sparse_coo_tensor(ind, val, self.size, is_coalesced=self.coalesced, check_invariants=True)


def _save_grad(g: torch.Tensor) -> Any:
    if g.layout == torch.sparse_coo:  # nn.Embedding(sparse=True): no storage of its own
        return _SparseCopy(g)
    if g.layout != torch.strided:
        raise ValueError(f"a gradient has layout {g.layout}; vramnb can restore strided and sparse COO gradients only: "
                         "call model.zero_grad(set_to_none=True) before profiling")
    return _save_bytes(g)


def _load_grad(g: torch.Tensor, saved: Any) -> None:
    if isinstance(saved, _SparseCopy):
        with torch.no_grad():
            g.copy_(saved.tensor(g.device))
    else:
        _load_bytes(g, saved)


@protected
def run_all(steps: list[Callable[[], None]]) -> None:
    """Run every callable, even after one raises; then raise the first error
    (the later ones are attached as notes)."""
    errors: list[BaseException] = []
    for fn in steps:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - raised below, after the rest ran
            errors.append(e)
    if errors:
        first = errors[0]
        for e in errors[1:]:
            if hasattr(first, "add_note"):
                first.add_note(f"also while restoring: {type(e).__name__}: {e}")
        raise first


def _copy(v: Any) -> Any:
    return v.copy() if isinstance(v, (dict, set)) else list(v)


def _put_back(live: Any, saved: Any) -> None:
    if isinstance(live, list):
        live[:] = saved
    else:
        live.clear()
        live.update(saved)


def _containers(obj_dict: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(live container, shallow copy) of the dicts, lists and sets among an object's attributes."""
    return [(v, _copy(v)) for v in obj_dict.values() if isinstance(v, (dict, set, list))]


def _tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (type(t), t.untyped_storage(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _global_hook_dicts() -> list[dict[Any, Any]]:
    """PyTorch's process-wide module and optimizer hook registries."""
    import torch.nn.modules.module as mm
    import torch.optim.optimizer as om

    out = []
    for mod, prefix in ((mm, "_global_"), (om, "_global_optimizer_")):
        for name in dir(mod):
            v = getattr(mod, name)
            if name.startswith(prefix) and name.endswith(("hooks", "called", "kwargs")) and isinstance(v, dict):
                out.append(v)
    return out


@dataclass
class Snapshot:
    """What :meth:`restore` puts back. Build with :meth:`take`."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    tensors: list[tuple[torch.Tensor, bytearray, tuple[Any, ...]]] = field(default_factory=list)
    grads: list[tuple[torch.Tensor, torch.Tensor | None, Any]] = field(default_factory=list)
    flags: list[tuple[torch.Tensor, bool]] = field(default_factory=list)
    tensor_hooks: list[tuple[torch.Tensor, str, dict[Any, Any]]] = field(default_factory=list)
    modules: list[tuple[torch.nn.Module, type, dict[str, Any], list[tuple[Any, Any]]]] = field(default_factory=list)
    global_hooks: list[tuple[Any, Any]] = field(default_factory=list)
    opt_state: dict[Any, dict[str, Any]] = field(default_factory=dict)
    opt_bytes: list[tuple[torch.Tensor, bytearray]] = field(default_factory=list)
    opt_groups: list[dict[str, Any]] = field(default_factory=list)
    opt_group_list: list[tuple[dict[str, Any], list[Any]]] = field(default_factory=list)
    opt_containers: list[tuple[Any, Any]] = field(default_factory=list)
    opt_dict: dict[str, Any] | None = None
    rng_cpu: torch.Tensor | None = None
    rng_cuda: list[torch.Tensor] | None = None
    rng_python: Any = None
    rng_numpy: Any = None

    @classmethod
    def take(cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
             batch_tensors: list[torch.Tensor] | None = None) -> Snapshot:
        """Record what :meth:`restore` puts back (``batch_tensors``: the batch's
        tensors, whose bytes, ``.grad`` and hooks are restored too)."""
        s = cls(model, optimizer)
        seen: set[int] = set()
        params = list(model.parameters())
        if optimizer is not None:
            params += [p for g in optimizer.param_groups for p in g["params"]]
        for m in model.modules():
            # class (a lazy module becomes another), attributes, and the contents of its
            # dicts/lists/sets: _modules, _parameters, _buffers, every hooks dict
            s.modules.append((m, type(m), dict(m.__dict__), _containers(m.__dict__)))
        s.global_hooks = [(d, d.copy()) for d in _global_hook_dicts()]
        for t in params + list(model.buffers()) + list(batch_tensors or []):
            if id(t) in seen:
                continue
            seen.add(id(t))
            s.tensors.append((t, _save_bytes(t), _tensor_meta(t)))
            s.flags.append((t, t.requires_grad))
            g = t.grad if t.is_leaf else None
            s.grads.append((t, g, _save_grad(g) if g is not None else None))
            for name in ("_backward_hooks", "_post_accumulate_grad_hooks"):
                d = getattr(t, name, None)  # None until a first hook: then restored to empty
                s.tensor_hooks.append((t, name, d.copy() if isinstance(d, dict) else {}))
        if optimizer is not None:
            for p, st in optimizer.state.items():
                s.opt_state[p] = dict(st)
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        s.opt_bytes.append((v, _save_bytes(v)))
            s.opt_groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
            s.opt_group_list = [(g, list(g["params"])) for g in optimizer.param_groups]
            for g in optimizer.param_groups:  # tensor hyper-parameters (lr as a tensor) are restored in place
                for k, v in g.items():
                    if k != "params" and isinstance(v, torch.Tensor):
                        s.opt_bytes.append((v, _save_bytes(v)))
            s.opt_dict = dict(optimizer.__dict__)
            s.opt_containers = [(v, _copy(v)) for k, v in optimizer.__dict__.items()
                                if isinstance(v, (dict, set, list)) and k not in ("state", "param_groups")]
        s.rng_cpu = torch.random.get_rng_state()
        s.rng_python = random.getstate()
        np = sys.modules.get("numpy")
        if np is not None:
            s.rng_numpy = np.random.get_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            s.rng_cuda = torch.cuda.get_rng_state_all()
        return s

    def tensor_state(self) -> list[torch.Tensor]:
        """The optimizer-state tensors recorded (what :class:`SetAside` can move aside)."""
        return [v for v, _ in self.opt_bytes]

    @protected
    def restore(self) -> None:
        """Put everything back (idempotent). Every part runs even if one raises;
        the first error is raised afterwards. A ``KeyboardInterrupt`` on the main
        thread is deferred until the end."""
        with InterruptGuard():
            run_all([self._modules, self._tensors, self._optimizer, self._rng])

    @protected
    def _modules(self) -> None:
        for m, cls, attrs, containers in self.modules:
            if type(m) is not cls:
                m.__class__ = cls
            m.__dict__.clear()
            m.__dict__.update(attrs)
            for live, saved in containers:
                _put_back(live, saved)
        for live, saved in self.global_hooks:
            _put_back(live, saved)

    @protected
    def _tensors(self) -> None:
        with torch.no_grad():
            for t, buf, (cls, storage, offset, shape, stride, dtype) in self.tensors:
                if (t.untyped_storage()._cdata != storage._cdata or t.storage_offset() != offset
                        or tuple(t.shape) != shape or tuple(t.stride()) != stride or t.dtype != dtype):
                    t.data = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
                if type(t) is not cls:  # a lazy module's UninitializedParameter became a Parameter
                    t.__class__ = cls
                _load_bytes(t, buf)
            for t, flag in self.flags:
                t.requires_grad_(flag)
            for t, g, buf in self.grads:
                if g is not None and buf is not None:
                    _load_grad(g, buf)
                t.grad = g
        for t, name, saved in self.tensor_hooks:
            live = getattr(t, name, None)
            if isinstance(live, dict):
                _put_back(live, saved)

    @protected
    def _optimizer(self) -> None:
        opt = self.optimizer
        if opt is None:
            return
        if self.opt_dict is not None:  # e.g. an LR scheduler's _opt_called flag set by step()
            opt.__dict__.clear()
            opt.__dict__.update(self.opt_dict)
        for live, saved in self.opt_containers:  # its own hooks dicts
            _put_back(live, saved)
        opt.param_groups[:] = [g for g, _ in self.opt_group_list]
        for g, ps in self.opt_group_list:
            g["params"] = ps
        for p in list(opt.state.keys()):
            if p not in self.opt_state:
                del opt.state[p]
        for p, st in self.opt_state.items():
            live = opt.state[p]  # the same dict object, its entries put back
            live.clear()
            live.update(st)
        with torch.no_grad():
            for v, buf in self.opt_bytes:
                _load_bytes(v, buf)
        for g, saved in zip(opt.param_groups, self.opt_groups):
            for k in list(g):
                if k != "params" and k not in saved:
                    del g[k]
            g.update(saved)

    @protected
    def _rng(self) -> None:
        if self.rng_cpu is not None:
            torch.random.set_rng_state(self.rng_cpu)
        if self.rng_python is not None:
            random.setstate(self.rng_python)
        if self.rng_numpy is not None:
            sys.modules["numpy"].random.set_state(self.rng_numpy)
        if self.rng_cuda is not None:
            torch.cuda.set_rng_state_all(self.rng_cuda)


class SetAside:
    """Move tensors' storages out of device memory for a while (their bytes to
    host ``bytearray`` copies, the storages resized to 0 bytes), and put them
    back with :meth:`put_back` (the same storages, the same bytes). Used to run
    a technique's step without the user's optimizer state, which that step
    would not have."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.saved: list[tuple[torch.Tensor, bytearray]] = []
        seen: set[int] = set()
        for t in tensors:
            st = t.untyped_storage()
            if st._cdata in seen or st.nbytes() == 0:
                continue
            seen.add(st._cdata)
            self.saved.append((t, _save_bytes(t)))
        for t, _ in self.saved:
            t.untyped_storage().resize_(0)

    @protected
    def put_back(self) -> None:
        with InterruptGuard():
            run_all([lambda t=t, b=b: _load_bytes(t, b) for t, b in self.saved])

    @property
    def nbytes(self) -> int:
        return sum(len(b) for _, b in self.saved)
