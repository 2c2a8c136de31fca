"""Values an estimate takes from the batch the user passed.

Fake tensors have shapes and no data, so a step that reads a value
(``.item()``, ``bool(t)``, ``if torch.any(labels == -100):``, ``torch.equal``)
or whose shapes follow values (``labels[labels != -100]``, ``nonzero``,
``masked_select``, ``unique``, ``repeat_interleave`` with tensor repeats, CTC's
lengths) cannot run on them. Most such reads look at the batch: labels,
lengths, masks. :class:`BatchValues` is a dispatch mode directly above the
estimate's ``FakeTensorMode`` that keeps, beside every fake tensor computed
only from the user's batch and from constants (Python numbers, real CPU
tensors such as ``torch.tensor(-100)``, deterministic factories such as
``torch.arange``), a real CPU *shadow*: the same operator run on the shadows,
outside the fake mode (``torch.utils._mode_utils.no_dispatch``). Shadows are
kept per fake *storage* (a real storage of the same size), so views, in-place
writes and aliasing follow the fake tensors'. A write whose data is not known
(it comes from the weights or activations) forgets the storage's values.

When the fake mode refuses an operator for want of values
(``DataDependentOutputException``, ``DynamicOutputShapeException``):

* its inputs all have shadows: the operator runs on them; a value is returned
  as read (``.item()`` gives the batch's number), tensors as fake tensors of the
  real results' shapes and strides (keeping their shadows), and the read is
  noted: ``read from your batch: `aten._local_scalar_dense` at file.py:12 ...``;
* only the inputs that decide the shape have shadows (the boolean mask of
  ``logits[labels != -100]``, CTC's lengths): the output shapes are taken
  from them, the values stay unknown;
* otherwise a :class:`ValueError` names the operator and the user's line (the
  innermost frame outside torch and vramnb) and what to do: the value comes from
  the weights or activations, or the batch is on ``meta`` (no values at all).

A random draw whose inputs are known (LayerDrop's ``torch.rand([]) < p``) is
drawn from the estimate's own generator (the user's is not advanced) and noted
as such: the real step draws its own. Kernels that read data in C++ below the
dispatcher (an RNN on a ``PackedSequence``) cannot be given values by a mode;
:func:`vramnb.predict._estimate_inputs.explain` names the user's line for them.

Costs: the batch's shadows are copies of the batch (real CPU memory of the
batch's size; with ``batch_size=`` the resized batch, its rows repeated, up to
:data:`LIMIT` bytes per tensor: a larger resized tensor has no values), and
every tensor derived from it alone has a real shadow while its fake lives
(masks, lengths, shifted labels: of the batch's order). A shadow larger than
:data:`LIMIT` bytes (or twice the batch) is not kept, nor one of constants alone
larger than :data:`CONSTANTS` bytes. Shadows are real CPU
storages, never meta ones, so the estimate's ``StorageTracker("meta")`` does
not count them, and the operators that make them run with dispatch off (no mode
sees them) on one intra-op thread (``torch.set_num_threads(1)`` for the call, put
back at once); they are freed when the estimate ends (:meth:`BatchValues.close`).
A step that reads no values pays one dispatch-mode layer and the shadow
operators of its batch-only tensors (GPT-2's shifted labels, position ids).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
)
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from .._storages import storage_key, storage_of
from ._value_reads import (
    CONSTANTS,
    META,
    RANDOMLY,
    Read,
    notes,
    refusal,
    shown,
    user_line,
)

__all__ = ["LIMIT", "BatchValues"]

LIMIT = 64 * 2**20
"""Bytes: a shadow derived from the batch above this size (or twice the batch's bytes, the larger) is not kept."""


_META = META  # the storage derives from a meta batch: no values to read
_LARGE = "large"  # derived from the batch, too large to keep
_RANDOM = getattr(torch.Tag, "nondeterministic_seeded", None)  # dropout, randn, bernoulli: values of their own
_OPS: dict[Any, tuple[Any, bool, bool]] = {}  # operator -> (its generator= overload if random, no values, it writes)
_RANDOMLY = RANDOMLY
_TAG = "_vramnb_values"  # set on the fake tensors whose storage has (or had) a shadow
_UNINITIALISED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})
# operators whose output shapes follow the values of some arguments only (positions in the schema)
_SHAPE_ARGS = {"_ctc_loss": (2, 3), "_pack_padded_sequence": (1,), "bincount": (0,), "repeat_interleave": (0, 1)}


def _drawing(func: Any) -> Any:
    """The overload of a random operator that takes a ``generator=`` (``aten.rand.generator`` for
    ``aten.rand.default``), or ``None``."""
    if any(a.name == "generator" for a in func._schema.arguments):
        return func
    other = getattr(func.overloadpacket, "generator", None)
    if other is not None and [a.name for a in other._schema.arguments if a.name != "generator"] == [
            a.name for a in func._schema.arguments]:
        return other
    return None


def _tagged(args: Any, kwargs: dict[str, Any]) -> list[Any] | None:
    """The tensor arguments, or ``None`` as soon as one is a fake tensor without values: never tagged, and not a
    constant of the fake mode (the fast test, on every operator)."""
    out: list[Any] = []
    for group in (args, kwargs.values()):
        for a in group:
            for t in (a,) if isinstance(a, torch.Tensor) else a if isinstance(a, (list, tuple)) else ():
                if isinstance(t, FakeTensor):
                    if _TAG not in t.__dict__ and t.constant is None:
                        return None
                    out.append(t)
                elif isinstance(t, torch.Tensor):
                    out.append(t)
    return out


def _flat(args: Any) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def _map(x: Any, fn: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(fn(v) if isinstance(v, torch.Tensor) else v for v in x)
    return x


def _view(st: torch.UntypedStorage, t: torch.Tensor) -> torch.Tensor:
    """A real tensor over ``st`` with ``t``'s dtype and geometry (call with dispatch off)."""
    return torch.empty(0, dtype=t.dtype).set_(st, t.storage_offset(), t.shape, t.stride())


class BatchValues(TorchDispatchMode):
    """Shadows of the batch-derived fake tensors, and the values read from them (see the module docstring).

    Attributes:
        reads: the :class:`Read` s, in order.
    """

    def __init__(self) -> None:
        super().__init__()
        # fake storage key -> (weak ref to the fake storage, real storage or _META / _LARGE, from the batch: the
        # values' origin, see _from_batch)
        self._shadows: dict[int, tuple[weakref.ref[Any], Any, int]] = {}
        self.reads: list[Read] = []
        self.limit = LIMIT
        self.repeated: str = ""
        self._generator = torch.Generator().manual_seed(0)  # draws of the estimate's own (the user's RNG is not used)
        self.nan_checks = 0  # anomaly detection's NaN checks the user's code turned on in the fake step, answered "none"
        self._nan_flags = WeakIdKeyDictionary()  # their `_is_any_true` results (by identity: a tensor's == is not)

    # -- the batch -------------------------------------------------------------
    def add_batch(self, real: list[torch.Tensor], fake: list[torch.Tensor]) -> None:
        """Shadow each fake batch tensor by the user's values (copied; rows repeated where it was resized)."""
        total = 0
        with no_dispatch(), torch.no_grad():
            for t, f in zip(real, fake):
                st = storage_of(f)
                if st is None:
                    continue
                f.__dict__[_TAG] = True
                if t.device.type == "meta":
                    self._set(st, _META)
                    continue
                if t.layout != torch.strided:
                    continue
                real_st = t.untyped_storage()
                if t.device.type != "cpu":
                    t = t.detach().cpu()
                key = storage_key(st)
                if tuple(t.shape) != tuple(f.shape) and st.nbytes() > LIMIT:
                    # batch_size= made it larger than the user's batch: its copy would be host memory the user
                    # never had (batch_size=10**6 of a 32-row batch); a value read through it is refused, saying so
                    self._set(st, _LARGE)
                    continue
                entry = self._shadows.get(key)
                if entry is None or entry[0]() is not st or not isinstance(entry[1], torch.UntypedStorage):
                    self._set(st, torch.UntypedStorage(st.nbytes()))
                    total += st.nbytes()
                src = t.detach()
                if tuple(src.shape) != tuple(f.shape):  # batch_size=: the batch's rows, repeated
                    if not src.shape[0]:
                        assert st is not None  # mypy: the identity test with the shadow's weakref above widened it
                        self._set(st, _META)
                        continue
                    src = src[torch.arange(f.shape[0]) % src.shape[0]]
                    self.repeated = f" (its {t.shape[0]} rows repeated to {f.shape[0]})"
                dst = _view(self._shadows[key][1], f)
                if torch._debug_has_internal_overlap(dst) == 1 and src.shape == f.shape:
                    # an expanded batch (stride 0): its elements share memory, so the real storage is copied whole
                    self._shadows[key][1].copy_(real_st.cpu())
                else:
                    dst.copy_(src)
        self.limit = max(LIMIT, 2 * total)

    def add_counters(self, model: Any, fakes: dict[int, torch.Tensor]) -> None:
        """Shadow the fake copies of ``model``'s integer and boolean buffers by their values (copied; each up to
        :data:`CONSTANTS` bytes): counters such as BatchNorm's ``num_batches_tracked``, whose value
        ``momentum=None`` reads (``1 / num_batches_tracked``) after adding one, and masks. They are not learned:
        the real step reads the same values. ``fakes`` maps ``id(real tensor)`` to its fake copy. The user's
        buffers are not written (the shadows are copies, updated as the fake step updates the fakes)."""
        if not isinstance(model, torch.nn.Module):
            return
        with no_dispatch(), torch.no_grad():
            for _, t in model.named_buffers(remove_duplicate=True):
                f = fakes.get(id(t))
                if (not isinstance(f, FakeTensor) or type(t) is not torch.Tensor or t.layout != torch.strided
                        or t.device.type == "meta" or t.dtype.is_floating_point or t.dtype.is_complex):
                    continue
                st = storage_of(f)
                if st is None or st.nbytes() > CONSTANTS or tuple(t.shape) != tuple(f.shape):
                    continue
                key = storage_key(st)
                entry = self._shadows.get(key)
                if entry is None or entry[0]() is not st or not isinstance(entry[1], torch.UntypedStorage):
                    self._set(st, torch.UntypedStorage(st.nbytes()), batch=False, tensor=f)
                    _view(self._shadows[key][1], f).copy_(t.detach().cpu())

    def close(self) -> None:
        """Free every shadow."""
        self._shadows.clear()

    # -- shadows ---------------------------------------------------------------
    def _set(self, st: torch.UntypedStorage, value: Any, batch: int = True, tensor: Any = None) -> None:
        if tensor is not None:
            tensor.__dict__[_TAG] = True
        key = storage_key(st)
        shadows = self._shadows

        def freed(_: Any, key: int = key) -> None:
            e = shadows.get(key)
            if e is not None and e[0]() is None:
                del shadows[key]

        self._shadows[key] = (weakref.ref(st, freed), value, batch)

    def _from_batch(self, tensors: list[Any]) -> int:
        """Where the values of ``tensors`` come from: :data:`_RANDOMLY` (a draw of the estimate's),
        1 (the batch) or 0 (constants alone), the first that any of them has."""
        origin = 0
        for t in tensors:
            st = storage_of(t) if isinstance(t, FakeTensor) else None
            entry = self._shadows.get(storage_key(st)) if st is not None else None
            if entry is not None and entry[0]() is st:
                origin = max(origin, int(entry[2]))
        return origin

    def known(self, t: Any) -> bool:
        """Whether the estimate holds the values of the fake tensor ``t`` (computed from the batch)."""
        v = self._lookup(t)
        return isinstance(v, torch.Tensor)

    def _lookup(self, t: Any) -> Any:
        """A real tensor with ``t``'s values, ``_META``/``_LARGE``, or ``None`` (not known)."""
        if not isinstance(t, FakeTensor):
            if type(t) is torch.Tensor and t.layout == torch.strided:
                return _META if t.device.type == "meta" else t  # a real constant
            return None
        st = storage_of(t)
        if st is None:
            return None
        entry = self._shadows.get(storage_key(st))
        if entry is not None and entry[0]() is st:
            v = entry[1]
            if isinstance(v, torch.UntypedStorage):
                with no_dispatch():
                    return _view(v, t)
            return v
        if t.constant is not None:  # the fake mode's own constant (torch.tensor(-100)): a copy of it, as shadow
            with no_dispatch(), torch.no_grad():
                r = torch.UntypedStorage(st.nbytes())
                _view(r, t).copy_(t.constant)
            self._set(st, r, batch=False, tensor=t)
            with no_dispatch():
                return _view(r, t)
        return None

    def _forget_written(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        """The storages this call writes into lose their values (the data written is not known)."""
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            val = args[i] if i < len(args) else kwargs.get(a.name)
            for t in _flat([val]):
                if isinstance(t, FakeTensor):
                    st = storage_of(t)
                    if st is not None:
                        self._shadows.pop(storage_key(st), None)

    def _keep(self, fake_out: Any, real_out: Any, inputs: list[Any], batch: int) -> None:
        """Record ``real_out``'s storages as the shadows of ``fake_out``'s (new storages only)."""
        with no_dispatch():  # a real output over an input's memory (the user's constant, a shadow) is copied
            owned = {storage_key(r.untyped_storage()) for r in inputs if isinstance(r, torch.Tensor)}
        for f, r in zip(_flat([fake_out]), _flat([real_out])):
            if not isinstance(f, FakeTensor) or not isinstance(r, torch.Tensor):
                continue
            st = storage_of(f)
            if st is None:
                continue
            f.__dict__[_TAG] = True
            entry = self._shadows.get(storage_key(st))
            if entry is not None and entry[0]() is st and isinstance(entry[1], torch.UntypedStorage):
                continue  # a view or in-place result: the real operator acted on the same shadow
            with no_dispatch(), torch.no_grad():
                rs = r.untyped_storage()
                if (storage_key(rs) in owned or r.dtype != f.dtype or tuple(r.shape) != tuple(f.shape)
                        or r.stride() != f.stride() or r.storage_offset() != f.storage_offset()
                        or rs.nbytes() < st.nbytes()):
                    rs = torch.UntypedStorage(st.nbytes())
                    _view(rs, f).copy_(r)
            self._set(st, rs, batch)

    def _mark(self, fake_out: Any, value: Any) -> None:
        for f in _flat([fake_out]):
            if isinstance(f, FakeTensor):
                st = storage_of(f)
                if st is not None:
                    self._set(st, value, tensor=f)

    # -- dispatch --------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException):
            if (func is torch.ops.aten._local_scalar_dense.default and args and isinstance(args[0], FakeTensor)
                    and args[0] in self._nan_flags):
                self.nan_checks += 1  # see _nan_check
                return False
            return self._needs_values(func, args, kwargs)
        if func is torch.ops.aten._is_any_true.default and _nan_check() and isinstance(out, FakeTensor):
            self._nan_flags[out] = True
        info = _OPS.get(func)
        if info is None:
            name = func.overloadpacket.__name__
            random = _RANDOM is not None and _RANDOM in func.tags
            drawn = _drawing(func) if random else None
            info = _OPS[func] = (drawn, name in _UNINITIALISED or (random and drawn is None), func._schema.is_mutable)
        tensors = None if info[1] else _tagged(args, kwargs)
        shadows = None if tensors is None else [self._lookup(t) for t in tensors]
        if shadows is None or any(s is None for s in shadows):
            if info[2] and self._shadows:  # written with values not known: forget them
                self._forget_written(func, args, kwargs)
            return out
        fakes = [f for f in _flat([out]) if isinstance(f, FakeTensor)]
        if not fakes:
            return out
        if any(s is _META for s in shadows) or any(s is _LARGE for s in shadows):
            self._mark(out, _META if any(s is _META for s in shadows) else _LARGE)
            return out
        batch = _RANDOMLY if info[0] is not None else self._from_batch(tensors)
        if sum(f.untyped_storage().nbytes() for f in fakes) > (self.limit if batch == 1 else min(self.limit, CONSTANTS)):
            self._mark(out, _LARGE)
            return out
        if info[0] is not None:  # a draw (LayerDrop's torch.rand([]) < p): the estimate's own generator's, not the user's
            real = self._run(info[0], args, {**kwargs, "generator": self._generator}, tensors, shadows)
        else:
            real = self._run(func, args, kwargs, tensors, shadows)
        if real is None:
            self._forget_outputs(out)
        else:
            self._keep(out, real, shadows, batch)
        return out

    def _forget_outputs(self, out: Any) -> None:
        for f in _flat([out]):
            if isinstance(f, FakeTensor):
                st = storage_of(f)
                if st is not None:
                    self._shadows.pop(storage_key(st), None)

    @staticmethod
    def _run(func: Any, args: Any, kwargs: dict[str, Any], tensors: list[Any], shadows: list[Any]) -> Any:
        """``func`` on the shadows, outside every mode; ``None`` where it fails."""
        sub = {id(t): s for t, s in zip(tensors, shadows)}

        def swap(t: torch.Tensor) -> torch.Tensor:
            return sub.get(id(t), t)

        threads = torch.get_num_threads()
        try:
            # one thread: shadows are small, and a parallel kernel waits for the thread pool (milliseconds on a
            # busy machine, for a 256 x 256 tril); the setting is put back at once
            torch.set_num_threads(1)
            with no_dispatch(), torch.no_grad():
                return func(*[_map(a, swap) for a in args], **{k: _map(v, swap) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001 - a shadow that cannot be computed is a value not known
            return None
        finally:
            torch.set_num_threads(threads)

    def _needs_values(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        name = func.overloadpacket.__name__
        where, source = user_line()
        tensors = [t for t in _flat([*args, *kwargs.values()]) if isinstance(t, torch.Tensor)]
        shadows = [self._lookup(t) for t in tensors]
        if all(isinstance(s, torch.Tensor) for s in shadows):
            real = self._run(func, args, kwargs, tensors, shadows)
            if real is not None:
                out = self._fake_outputs(real, args, kwargs, tensors, shadows)
                batch = self._from_batch(tensors)
                self._keep(out, real, shadows, batch)
                self.reads.append(Read(f"aten.{name}", where, source, shown(real), batch))
                return out
        decided = self._shape_from(func, args, kwargs)
        if decided is not None:
            out, real = decided
            self.reads.append(Read(f"aten.{name}", where, source, shown(real), self._from_batch(tensors)))
            return out
        raise refusal(func.overloadpacket.__name__, where, source,
                      _META if _META in shadows else _LARGE if _LARGE in shadows else None, self.limit)

    def _shape_from(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """(fake output, what decided its shape) where only the shape-deciding arguments have shadows."""
        name = func.overloadpacket.__name__
        if name == "index" and len(args) >= 2:
            indices = list(args[1])
            for i, idx in enumerate(indices):
                if isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8):
                    s = self._lookup(idx)
                    if not isinstance(s, torch.Tensor):
                        return None
                    with no_dispatch():
                        indices[i:i + 1] = list(s.nonzero().unbind(1))
            out = func(args[0], indices)
            return out, out
        if name == "masked_select" and len(args) >= 2:
            s = self._lookup(args[1])
            if not isinstance(s, torch.Tensor):
                return None
            with no_dispatch():
                shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
                n = int(s.expand(shape).count_nonzero())
            out = torch.empty((n,), dtype=args[0].dtype, device="cpu")
            return out, out
        if name not in _SHAPE_ARGS:
            return None
        surrogate = {}
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                s = self._lookup(a)
                if not isinstance(s, torch.Tensor):
                    if i in _SHAPE_ARGS[name]:
                        return None
                    with no_dispatch():
                        s = torch.zeros(a.shape, dtype=a.dtype)
                surrogate[id(a)] = s
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        real = self._run(func, args, kwargs, tensors, [surrogate[id(t)] for t in tensors])
        if real is None:
            return None
        return self._fake_outputs(real, args, kwargs, [], []), real

    def _fake_outputs(self, real: Any, args: Any, kwargs: dict[str, Any], tensors: list[Any], shadows: list[Any]) -> Any:
        """Fake tensors of the real outputs' shapes, strides and storage sizes (views of a fake input where the real
        output is a view of its shadow); other values as they are."""
        by_storage: dict[int, Any] = {}
        with no_dispatch():
            for t, s in zip(tensors, shadows):
                if isinstance(s, torch.Tensor):
                    by_storage.setdefault(storage_key(s.untyped_storage()), t)

        def fake(r: torch.Tensor) -> torch.Tensor:
            with no_dispatch():
                key, n = storage_key(r.untyped_storage()), r.untyped_storage().nbytes()
                shape, stride, offset = tuple(r.shape), r.stride(), r.storage_offset()
            base = by_storage.get(key)
            if base is None:
                base = torch.empty((n // r.element_size(),), dtype=r.dtype, device="cpu")
                if offset == 0 and n == r.numel() * r.element_size() and r.is_contiguous():
                    return torch.empty_strided(shape, stride, dtype=r.dtype, device="cpu")
            return base.as_strided(shape, stride, offset) if base.dtype == r.dtype else base.view(r.dtype).as_strided(
                shape, stride, offset)

        if isinstance(real, torch.Tensor):
            return fake(real)
        if isinstance(real, (list, tuple)):
            return type(real)(fake(r) if isinstance(r, torch.Tensor) else r for r in real)
        return real

    def notes(self) -> list[str]:
        """One line per place that read values: ``read from your batch: `op` at file:line = value``; and
        anomaly detection's NaN checks the step's code turned on, which the estimate cannot make."""
        out = notes(self.reads, self.repeated)
        if self.nan_checks:
            out.append(f"anomaly detection's NaN check (turned on by your code during the step: "
                       f"torch.autograd.set_detect_anomaly or detect_anomaly) was not made by the estimate "
                       f"({self.nan_checks} checks: fake tensors have no values); the real step makes them")
        return out


def _nan_check() -> bool:
    """Whether an ``_is_any_true`` now is anomaly detection's NaN check of a gradient: the engine's
    ``validate_outputs`` runs ``isnan(grad)._is_any_true().item()`` in a backward pass with the check on. The
    estimate turns the check off for its step (:func:`vramnb.predict.estimate`); the user's code can turn it
    on again as it runs (a forward calling ``torch.autograd.set_detect_anomaly(True)``)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return (torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
            and task is not None and task() != -1)
