"""Snapshot a live model and optimizer, and put them back exactly.

Profiling a step runs a real forward, backward and optimizer step on the user's
model; afterwards everything is restored bit for bit: each tensor exactly as it
was (the same tensor object on its own storage, with that storage's size, the
tensor's offset, shape, strides, dtype and class, its bytes and its autograd
version counter, so a graph the user built before profiling still
back-propagates), parameters, buffers and tensors a module holds as plain
attributes or inside its lists, tuples and dicts; ``.grad`` (the same object,
or ``None``; also a ``retain_grad`` tensor's), ``requires_grad`` flags and
hooks of those tensors; every module's class and attributes and the contents of
its dicts, lists and sets, three levels deep (submodules, parameters, buffers,
every hooks dict: a forward that builds a submodule, rebinds a buffer or
appends to a list is undone); the optimizer's state (same dicts and tensor
objects, bytes restored; state created by the profile removed), its
``param_groups`` and attributes; PyTorch's process-wide module and optimizer
hooks; the batch's bytes and ``.grad``; and random generators (see
:mod:`vramnb._rng_state`). Modules, optimizers and leaves outside the model that
the step reaches are added while it runs (:mod:`vramnb._reach`).

A gradient only the snapshot still holds once the step's ``zero_grad(set_to_none=True)``
dropped it (left by an earlier step of the user's) is freed there, as the user's loop frees
it: its storage is resized to 0 bytes and given back by the restore, the same object
(:meth:`Snapshot.release_dropped_grads`).

Bytes are copied per storage, once, and only the ranges the recorded tensors
cover (:mod:`vramnb._storage_copy`): parameters that are views of one flat
buffer cost one copy; a batch sliced from a dataset copies the slice.
Copies are host ``bytearray`` s, not tensor storages.
What the user's code reaches by name outside the model (a notebook dict a
forward fills, a list a hook appends to, a global counter, a class attribute,
a NumPy array attribute) is recorded and put back by :mod:`vramnb._code_state`.
Not restored: tensors or containers changed in place that none of the above
reach.

:meth:`Snapshot.restore` runs every part even when one fails (the first error
is raised at the end), and a ``KeyboardInterrupt`` that arrives while it runs
on the main thread is held back until it is done, then raised
(:class:`vramnb._interrupt.InterruptGuard`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._code_state import CodeState
from ._interrupt import InterruptGuard, protected
from ._deep_state import Containers, put_back, shallow_copy
from ._storage_copy import StorageCopies, load_bytes, save_bytes
from ._rng_state import RngStates

__all__ = ["Snapshot", "SetAside", "run_all"]


class _SparseCopy:
    """A sparse COO tensor's indices, values and size in host memory."""

    def __init__(self, t: torch.Tensor) -> None:
        self.size, self.coalesced = tuple(t.shape), t.is_coalesced()
        self.parts = [(save_bytes(x.clone(memory_format=torch.contiguous_format)), tuple(x.shape), x.dtype)
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
    return save_bytes(g)


def _load_grad(g: torch.Tensor, saved: Any) -> None:
    if isinstance(saved, _SparseCopy):
        with torch.no_grad():
            g.copy_(saved.tensor(g.device))
    else:
        load_bytes(g, saved)


@protected
def run_all(steps: Sequence[Callable[[], object]]) -> None:
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
        for later in errors[1:]:
            if hasattr(first, "add_note"):
                first.add_note(f"also while restoring: {type(later).__name__}: {later}")
        raise first


def _copy(v: Any) -> Any:
    return shallow_copy(v)


def _put_back(live: Any, saved: Any) -> None:
    put_back(live, saved)


_OWN = ("_parameters", "_buffers", "_modules")


def _walk(values: Any, depth: int, seen: set[int]) -> Any:
    """The values among ``values`` and, ``depth`` levels down, inside their lists,
    tuples, sets and dicts (each container once)."""
    for v in values:
        yield v
        if depth and isinstance(v, (dict, list, tuple, set)) and id(v) not in seen:
            seen.add(id(v))
            yield from _walk(v.values() if isinstance(v, dict) else v, depth - 1, seen)


def _containers(obj_dict: dict[str, Any], skip: tuple[str, ...] = ()) -> list[tuple[Any, Any]]:
    """(live container, shallow copy) of the dicts, lists and sets among an object's
    attributes (but those named in ``skip``), and of those nested in them (three levels)."""
    vals = [v for k, v in obj_dict.items() if k not in skip]
    return [(v, _copy(v)) for v in _walk(vals, 3, set()) if isinstance(v, (dict, set, list))]


def _attribute_tensors(obj_dict: dict[str, Any]) -> list[torch.Tensor]:
    """Tensors a module holds as plain attributes, or inside its lists, tuples and dicts."""
    vals = [v for k, v in obj_dict.items() if k not in _OWN]
    return [v for v in _walk(vals, 3, set()) if isinstance(v, torch.Tensor)]


def _tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (type(t), t.untyped_storage(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _storage_uses(t: torch.Tensor) -> int:
    """How many tensors and storage objects hold ``t``'s storage (one of them the storage object
    this makes or finds), or 0 where it cannot be read."""
    try:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return 0


def _dropped(grads: list[tuple[torch.Tensor, torch.Tensor | None, Any]]) -> dict[int, list[torch.Tensor]]:
    """The recorded plain gradients no longer any tensor's ``.grad``, by storage (each once)."""
    groups: dict[int, list[torch.Tensor]] = {}
    for t, g, saved in grads:
        if (g is not None and saved is None and t.grad is not g and type(g) is torch.Tensor
                and g.layout == torch.strided and not g.requires_grad and g.device.type != "meta"):
            group = groups.setdefault(g.untyped_storage()._cdata, [])
            if all(x is not g for x in group):
                group.append(g)
    return groups


def _only_here(group: list[torch.Tensor], mine: dict[int, int]) -> bool:
    """Whether the tensors of ``group`` (gradients on one storage) and the storage are held by
    nothing but each other, their bases and ``mine`` (the references the snapshot holds, by id).

    ``group`` gets the gradients' bases appended (a view keeps its base, which keeps the storage).
    Python reference counts are compared: PyTorch keeps a tensor's or a storage's Python object
    alive, with one reference, while C++ holds the object (a ``.grad`` slot, a graph's saved
    tensor, a view's base), so a holder of any kind shows as one reference more."""
    for g in list(group):
        b = g._base
        if b is not None and all(x is not b for x in group):
            group.append(b)
        del g, b  # no reference of this frame's but the group's
    bases = {id(g._base) for g in group if g._base is not None}
    st = group[0].untyped_storage()
    # each object: in group, in the generator's name and in getrefcount's argument (the storage: in st);
    # the storage is held by each tensor and its Python object, so its object also by PyTorch
    return (_storage_uses(group[0]) == len(group) + 1 and sys.getrefcount(st) == mine.get(id(st), 0) + 3
            and all(sys.getrefcount(x) == mine.get(id(x), 0) + 3 + (id(x) in bases) for x in group))


def _free_sparse(g: torch.Tensor, mine: dict[int, int]) -> int:
    """Free a sparse gradient's indices and values (resized to 0 bytes) where nothing but ``mine``
    (the snapshot's references, by id) holds it or them; the bytes freed. :func:`_load_grad`
    writes them back (``copy_`` gives the parts their sizes again)."""
    # g: here, in the caller's name and in getrefcount's argument; no C++ holder (a .grad slot, a graph)
    if sys.getrefcount(g) != mine.get(id(g), 0) + 3:
        return 0
    parts = [x.untyped_storage() for x in (g._indices(), g._values())]
    # each storage: held by g's part and its Python object (made here: in parts, the name, the argument,
    # and PyTorch's reference while a tensor holds it), nothing else
    if any(torch._C._storage_Use_Count(st._cdata) != 2 or sys.getrefcount(st) != 4 for st in parts):
        return 0
    freed = 0
    for st in parts:
        freed += st.nbytes()
        st.resize_(0)
    return freed


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except Exception:  # inference tensors have no version counter
        return None


def _set_versions(pairs: list[tuple[torch.Tensor, int | None]]) -> None:
    """Put autograd version counters back, so a graph built before the step (which
    saved these tensors) can still be back-propagated: the bytes are those it saved.
    ``torch._C._autograd._unsafe_set_version_counter`` takes one tensor and one
    version up to torch 2.5, sequences of both since."""
    fn = getattr(getattr(torch._C, "_autograd", None), "_unsafe_set_version_counter", None)
    if fn is None:
        return
    for t, v in pairs:
        if v is None or _version(t) == v:
            continue
        try:
            fn((t,), (v,))
        except TypeError:
            fn(t, v)


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


def _load_bytes(entry: Any, _: Any = None) -> None:
    """Give one recorded storage its size and bytes back (one step of a restore)."""
    entry.restore()


class _OptimizerState:
    """An optimizer's attributes and everything they hold at any depth: ``state``
    (each parameter's dict, and the lists, dicts and objects inside it),
    ``param_groups`` (tensor or tuple hyper-parameters too), ``defaults``, its
    hooks dicts and flags (an LR scheduler's ``_opt_called``, its wrapped
    ``step``); the bytes of the tensors found are in the snapshot's storage
    copies (:mod:`vramnb._deep_state`).

    Raises:
        InputError: the state holds an object vramnb cannot snapshot (named)."""

    def __init__(self, opt: torch.optim.Optimizer, snap: Snapshot) -> None:
        self.opt = opt
        self.tensors: list[torch.Tensor] = []
        params = {id(p) for g in opt.param_groups for p in g["params"]}

        def add(t: torch.Tensor) -> None:
            if id(t) not in params:  # state and tensor hyper-parameters (lr as a tensor)
                self.tensors.append(t)
                snap.add_plain(t)

        self.deep = Containers(add)
        self.deep.add(opt.__dict__, type(opt).__name__)

    def restore(self) -> None:
        self.deep.restore()


class Snapshot:
    """What :meth:`restore` puts back. Build with :meth:`take`; a step that reaches
    more (another module run, another optimizer stepped, leaves its backward
    accumulates into) adds them with :meth:`add_module`, :meth:`add_optimizer`
    and :meth:`add_tensor` before they change (see :mod:`vramnb._reach`)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        self.model, self.optimizer = model, optimizer
        self.storages = StorageCopies()
        self.tensors: list[tuple[torch.Tensor, tuple[Any, ...], int | None]] = []
        self.seen: set[int] = set()
        self.flags: list[tuple[torch.Tensor, bool]] = []
        self.grads: list[tuple[torch.Tensor, torch.Tensor | None, Any]] = []
        self.grad_versions: list[tuple[torch.Tensor, int | None]] = []  # sparse gradients' (not in tensors)
        self.tensor_hooks: list[tuple[torch.Tensor, str, list[Any]]] = []
        self.modules: list[tuple[torch.nn.Module, type, dict[str, Any], list[tuple[Any, Any]]]] = []
        self.module_ids: set[int] = set()
        self.optimizers: list[_OptimizerState] = []
        self.global_hooks: list[tuple[Any, Any]] = []
        self.rng: RngStates | None = None
        self.code: CodeState | None = None
        self.code_changed: list[str] = []

    @classmethod
    def take(cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
             batch_tensors: list[torch.Tensor] | None = None, functions: list[Any] | None = None) -> Snapshot:
        """Record what :meth:`restore` puts back (``batch_tensors``: the batch's
        tensors, whose bytes, ``.grad`` and hooks are restored too; ``functions``:
        the loss function, whose reachable generator objects are restored, and
        what it, the model's code and hooks reach by name: :mod:`vramnb._code_state`).

        Raises:
            InputError: the optimizer's state holds an object vramnb cannot snapshot."""
        s = cls(model, optimizer)
        s.global_hooks = [(d, shallow_copy(d)) for d in _global_hook_dicts()]
        s.add_module(model)
        for t in batch_tensors or []:
            s.add_tensor(t)
        if optimizer is not None:
            s.add_optimizer(optimizer)
        s.code = CodeState.take(model, functions or [], optimizer, add_tensor=s.add_tensor)
        s.rng = RngStates(model, functions or [])
        return s

    def add_module(self, root: torch.nn.Module, running: bool = False) -> None:
        """Record ``root`` and its submodules not recorded yet: class, attributes, the
        contents of their dicts/lists/sets (``_modules``, ``_parameters``, ``_buffers``,
        every hooks dict), parameters, buffers and tensors held as plain attributes.

        ``running``: recorded as its forward starts (a module outside the model):
        its ``_parameters`` and ``_buffers`` dicts are left to whoever filled them
        (``torch.func.functional_call`` swaps tensors in for the call and back
        after), and only the tensors in them are restored."""
        skip = ("_parameters", "_buffers") if running else ()
        if running and self.code is not None:  # its code and attributes, as the model's
            self.code.add_model(root)
        for m in root.modules():
            if id(m) in self.module_ids:
                continue
            self.module_ids.add(id(m))
            self.modules.append((m, type(m), dict(m.__dict__), _containers(m.__dict__, skip)))
            for t in [*m._parameters.values(), *m._buffers.values(), *_attribute_tensors(m.__dict__)]:
                if t is not None:
                    self.add_tensor(t)

    def add_optimizer(self, opt: torch.optim.Optimizer) -> None:
        """Record an optimizer (its parameters, state and settings)."""
        if any(o.opt is opt for o in self.optimizers):
            return
        for g in opt.param_groups:
            for p in g["params"]:
                self.add_tensor(p)
        self.optimizers.append(_OptimizerState(opt, self))

    def has(self, t: torch.Tensor) -> bool:
        return id(t) in self.seen

    def add_plain(self, t: torch.Tensor) -> None:
        """Record a tensor's bytes (its storage's range), storage, shape, class and version."""
        if id(t) in self.seen or t.layout != torch.strided or t.device.type == "meta":
            return
        try:
            meta = _tensor_meta(t)
        except (RuntimeError, NotImplementedError, TypeError):  # no storage of its own (a nested or wrapper tensor)
            return
        self.seen.add(id(t))
        self.storages.add(t)
        self.tensors.append((t, meta, _version(t)))

    def add_tensor(self, t: torch.Tensor) -> None:
        """Record a tensor (as :meth:`add_plain`), its ``requires_grad``, its
        ``.grad`` (a leaf's, or a ``retain_grad`` tensor's) and its hooks."""
        if id(t) in self.seen:
            return
        self.add_plain(t)
        self.seen.add(id(t))
        self.flags.append((t, t.requires_grad))
        if t.is_leaf or t.retains_grad:
            g = t.grad
            saved = None
            if g is not None:
                if g.layout == torch.strided:
                    self.add_plain(g)
                else:  # a sparse gradient: its parts copied, its version counter kept here
                    saved = _save_grad(g)
                    self.grad_versions.append((g, _version(g)))
            self.grads.append((t, g, saved))
        for name in ("_backward_hooks", "_post_accumulate_grad_hooks"):
            d = getattr(t, name, None)  # None until a first hook: then restored to empty
            self.tensor_hooks.append((t, name, shallow_copy(d) if isinstance(d, dict) else []))

    def release_dropped_grads(self) -> int:
        """Free the storage of each recorded gradient that the step's ``zero_grad(set_to_none=True)``
        dropped and that nothing but this snapshot holds, as the user's loop frees it there: without
        this, a gradient left by an earlier step would stay allocated for every later step. The tensor
        object is kept and its storage resized to 0 bytes (its bytes are in the host copy);
        :meth:`restore` gives the same storage its size and bytes back, so ``p.grad`` is the same
        object with the same storage, offset, shape, strides, values and version.

        A gradient is left alone when anything else holds it or its storage: a name or container of
        the user's (Python references beyond the snapshot's), a tensor whose ``.grad`` it still is or a
        graph that saved it (PyTorch then owns its Python object: one more reference), another tensor
        on its storage that is not such a dropped gradient, the storage object itself, or a part of the
        storage not copied. Called by the step right after its ``zero_grad``; returns the bytes freed."""
        mine: dict[int, int] = {}  # the snapshot's own references to each object
        for t, meta, _ in self.tensors:
            mine[id(t)] = mine.get(id(t), 0) + 1
            mine[id(meta[1])] = mine.get(id(meta[1]), 0) + 1
        for t, g, saved in self.grads:
            if g is not None:
                mine[id(g)] = mine.get(id(g), 0) + 1
        for g, _ in self.grad_versions:
            mine[id(g)] = mine.get(id(g), 0) + 1
        for e in self.storages.entries.values():
            mine[id(e.storage)] = mine.get(id(e.storage), 0) + 1
        freed = 0
        for t, g, saved in self.grads:  # sparse gradients: their indices' and values' storages (copied in saved)
            if isinstance(saved, _SparseCopy) and g is not None and t.grad is not g and not g.requires_grad:
                freed += _free_sparse(g, mine)
        for key, group in _dropped(self.grads).items():
            entry = self.storages.entries.get(key)
            if entry is None or not _only_here(group, mine):
                continue
            st = entry.storage
            if st.nbytes() != entry.nbytes or not st.nbytes():
                continue
            # the bytes no gradient covers: nothing wrote them since the snapshot (nothing else holds them)
            self.storages.add_whole(group[0])
            freed += st.nbytes()
            st.resize_(0)
        return freed

    def tensor_state(self) -> list[torch.Tensor]:
        """The optimizer-state tensors recorded (what :class:`SetAside` can move aside)."""
        return [t for o in self.optimizers for t in o.tensors]

    @property
    def nbytes(self) -> int:
        """Host bytes the snapshot's copies hold."""
        return self.storages.nbytes

    @protected
    def restore(self) -> None:
        """Put everything back (idempotent). Every part runs even if one raises;
        the first error is raised afterwards. A ``KeyboardInterrupt`` on the main
        thread is deferred until the end."""
        with InterruptGuard():
            run_all([self._code, self._modules, self._tensors, self._optimizer, self._rng])

    @protected
    def _code(self) -> None:
        if self.code is not None:
            changed = self.code.restore()
            self.code_changed = self.code_changed or changed  # (a second restore finds nothing changed)

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
        # storages first (their size, then their bytes), then each tensor's view of them
        run_all([lambda e=e: _load_bytes(e, None) for e in self.storages.entries.values()])
        with torch.no_grad():
            for t, (cls, storage, offset, shape, stride, dtype), _ in self.tensors:
                if (t.untyped_storage()._cdata != storage._cdata or t.storage_offset() != offset
                        or tuple(t.shape) != shape or tuple(t.stride()) != stride or t.dtype != dtype):
                    t.data = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
                if type(t) is not cls:  # a lazy module's UninitializedParameter became a Parameter
                    t.__class__ = cls
            for t, flag in self.flags:
                if t.is_leaf and t.requires_grad != flag:
                    t.requires_grad_(flag)
            for t, g, saved in self.grads:
                if g is not None and saved is not None:
                    _load_grad(g, saved)
                t.grad = g
        for t, name, saved in self.tensor_hooks:
            live = getattr(t, name, None)
            if isinstance(live, dict):
                _put_back(live, saved)
        # latest first: where tensors share a counter (views), the earliest record wins
        _set_versions([(t, v) for t, _, v in reversed(self.tensors)] + self.grad_versions)

    @protected
    def _optimizer(self) -> None:
        run_all([o.restore for o in self.optimizers])

    @protected
    def _rng(self) -> None:
        if self.rng is not None:
            self.rng.restore()


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
            self.saved.append((t, save_bytes(t)))
        for t, _ in self.saved:
            t.untyped_storage().resize_(0)

    @protected
    def put_back(self) -> None:
        with InterruptGuard():
            run_all([lambda t=t, b=b: load_bytes(t, b) for t, b in self.saved])

    @property
    def nbytes(self) -> int:
        return sum(len(b) for _, b in self.saved)
