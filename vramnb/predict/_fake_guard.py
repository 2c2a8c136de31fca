"""Keep an estimate's fake step off the user's real tensors.

:func:`vramnb.estimate` runs the step on a fake copy of the model, batch and
optimizer. A ``loss_fn`` that closes over the notebook's own model
(``lambda m, b: model(b)`` instead of ``m(b)``), its batch, or a second model
(a GAN's discriminator, a critic, a teacher that trains) would run the real
modules on fake inputs: fake gradients land in real parameters, BatchNorm
counters and running statistics move, an optimizer steps real weights.

:class:`RealTensorGuard` is a dispatch mode above the fake mode: it sees every
operator's arguments before the fake mode turns real tensors into constants,
and before autograd's graph or an in-place write reaches them. It refuses,
with a :class:`ValueError` naming what was reached and what to write instead:

* a tensor of the user's model, batch or optimizer (known by identity);
* any real tensor that requires grad, where grad mode is on (it would receive a
  fake ``.grad``; a teacher run under ``torch.no_grad()`` is only read);
* any operator that writes into a real tensor the step did not make itself.

Real tensors that are only read (a class-weight constant, a frozen teacher in
``eval`` mode) stay allowed: the fake mode reads their shapes.

:class:`UserState` is the last line behind it: it records the user's
parameters' gradients and the tensors in each module's and the optimizer's
slots before the estimate, and afterwards puts back the fake tensors swapped in
(a ``.grad`` assigned in Python, which no operator sees). A change that is not a
fake tensor, where another thread of the user's runs, is that thread's, and stays.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, is_fake
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils.weak import WeakIdKeyDictionary

from .._optim_state import per_parameter

__all__ = ["RealTensorGuard", "UserState", "owned_tensors"]

_MODEL_HINT = ("loss_fn uses the notebook's model, not its first argument: write lambda m, b: m(b)... (and an "
               "optimizer factory lambda params: torch.optim.AdamW(params)); the estimate runs a fake copy of the "
               "model and passes it as the first argument")
_BATCH_HINT = ("loss_fn uses the notebook's batch, not its second argument: write lambda m, b: m(b)...; the "
               "estimate passes a fake copy of the batch as the second argument")


def owned_tensors(model: torch.nn.Module | None, batch_named: list[tuple[str, torch.Tensor]],
                  optimizer: Any) -> dict[int, str]:
    """``id(tensor) -> what it is`` for the user's model (parameters, gradients, buffers),
    batch and optimizer state: tensors the fake step must not reach. The user's objects
    keep them alive for the estimate, so the ids stay theirs."""
    owned: dict[int, str] = {}
    if model is not None:
        for n, p in model.named_parameters(remove_duplicate=False):
            owned.setdefault(id(p), f"the notebook's model's parameter {n!r}")
            if p.grad is not None:
                owned.setdefault(id(p.grad), f"the gradient of the notebook's model's parameter {n!r}")
        for n, b in model.named_buffers(remove_duplicate=False):
            owned.setdefault(id(b), f"the notebook's model's buffer {n!r}")
    for n, t in batch_named:
        owned.setdefault(id(t), f"the notebook's batch ({n})")
    if isinstance(optimizer, torch.optim.Optimizer):
        for st in per_parameter(optimizer):
            for k, v in st.items():
                if isinstance(v, torch.Tensor):
                    owned.setdefault(id(v), f"the notebook's optimizer state ({k!r})")
    return owned


def _is_real(t: Any) -> bool:
    return (isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor)
            and not is_traceable_wrapper_subclass(t))


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}
# operators that write arguments without saying so in their schema, and the flag argument that makes them write:
# native_batch_norm updates running_mean and running_var when training is true
_UNDECLARED = {"native_batch_norm": (("running_mean", "running_var"), 5, "training")}


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments this call of ``func`` writes into (``Tensor(a!)`` in its schema)."""
    if func not in _WRITES:
        _WRITES[func] = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                              if a.alias_info is not None and a.alias_info.is_write)
    undeclared = _UNDECLARED.get(func.overloadpacket.__name__)
    if undeclared is None:
        return _WRITES[func]
    names, pos, flag = undeclared
    if not (args[pos] if pos < len(args) else kwargs.get(flag)):
        return _WRITES[func]
    return _WRITES[func] + tuple((i, a.name) for i, a in enumerate(func._schema.arguments) if a.name in names)


def _tensors(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            if isinstance(v, torch.Tensor):
                yield v


class RealTensorGuard(TorchDispatchMode):
    """Refuse real tensors of the user's reaching the fake step (see the module docstring).

    Args:
        owned: :func:`owned_tensors`.
    """

    def __init__(self, owned: dict[int, str]) -> None:
        super().__init__()
        self.owned = owned
        self.made: WeakIdKeyDictionary = WeakIdKeyDictionary()  # real tensors the step made (FSDP's mesh)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        real = False
        for a in (*args, *kwargs.values()):
            for t in _tensors(a):
                if _is_real(t):
                    real = True
                    self._check(t, func)
        if real:
            written = _written(func, args, kwargs)
            for i, name in written:
                val = args[i] if i < len(args) else kwargs.get(name)
                for t in _tensors(val):
                    if _is_real(t) and t not in self.made:
                        raise ValueError(
                            f"the step writes into a real tensor of yours ({func.overloadpacket.__name__} into a "
                            f"tensor of shape {tuple(t.shape)} that is not part of the estimated model: e.g. a second "
                            "model's BatchNorm statistics, a buffer or cache of yours); an estimate runs a fake copy "
                            "of the model only and changes nothing of yours. " + _OTHER_HINT)
        out = func(*args, **kwargs)
        for t in _tensors(out):
            if _is_real(t):
                self.made[t] = True
        return out

    def _check(self, t: torch.Tensor, func: Any) -> None:
        what = self.owned.get(id(t))
        if what is not None:
            hint = _BATCH_HINT if "batch" in what else _MODEL_HINT
            raise ValueError(f"{hint}. The step reached {what} ({func.overloadpacket.__name__}; through loss_fn, or "
                             "a function or hook that refers to the notebook's objects), which the estimate must not "
                             "touch: nothing of yours was changed")
        if t.requires_grad and torch.is_grad_enabled() and t not in self.made:  # (under no_grad: only read)
            raise ValueError(
                f"the step reaches a real tensor of shape {tuple(t.shape)} that requires grad and is not part of the "
                f"estimated model ({func.overloadpacket.__name__}): a second model's parameter (a GAN's "
                "discriminator, a critic, a teacher that trains?) would receive a fake gradient. " + _OTHER_HINT)


_OTHER_HINT = ("Estimate a module that holds both models (e.g. an nn.ModuleDict of them, with a loss_fn that uses "
               "its argument's parts), or freeze the other one for the estimate (other.requires_grad_(False); "
               "other.eval()) so that the step only reads it; nothing of yours was changed")


_GRAD = torch._C.TensorBase.grad  # ``.grad`` and ``._grad`` (one descriptor): set, deleted, read


class _GradSets(TorchFunctionMode):
    """Records the tensors whose ``.grad`` this thread sets or deletes (``p.grad = ...``,
    ``del p.grad``, ``zero_grad(set_to_none=True)``): PyTorch hands every such Python-level
    assignment to the torch-function modes of the thread that makes it (the mode stack is per
    thread), so another thread's assignments are not seen here."""

    def __init__(self, out: set[int]) -> None:
        super().__init__()
        self.out = out

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if args and getattr(func, "__self__", None) is _GRAD and getattr(func, "__name__", "") != "__get__":
            self.out.add(id(args[0]))
        return func(*args, **(kwargs or {}))


class UserState:
    """The user's model and optimizer tensors as they were: gradients and slot contents (no
    copies of values). :meth:`check_and_restore` puts back what the fake step swapped in.

    What the fake step changed is put back: a fake tensor where the user's gradient, parameter,
    buffer or optimizer state was is always the step's (the step makes only fake tensors); a
    ``.grad`` the estimate's thread set or deleted (``zero_grad(set_to_none=True)`` on the
    notebook's model by name) is known as the step's by :class:`_GradSets`, which
    :meth:`watching` keeps on that thread, whatever other threads run. Any other change (a slot
    of a module's ``_parameters``/``_buffers`` or an optimizer's state replaced by a real value or
    emptied: plain dict writes, which no hook of PyTorch sees per thread) is the step's only where
    no other thread of the user's runs: one that trains the same model while the estimate runs
    changes exactly these, and putting them back would undo its work, so they are left then, and
    :meth:`check_and_restore` returns a note saying so. In-place writes need no check here: every
    operator of the estimate's thread goes through :class:`RealTensorGuard`, which refuses the
    user's tensors before anything is written (dispatch modes are per thread, so another thread's
    writes are neither refused nor undone).
    """

    def __init__(self, model: torch.nn.Module | None, optimizer: Any) -> None:
        self.threads = _user_threads()  # (with those alive at the end: a thread may finish meanwhile)
        self.set_here: set[int] = set()  # ids of the tensors whose .grad the estimate's thread set or deleted
        self.slots: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.grads: list[tuple[torch.Tensor, Any]] = []
        if model is not None:
            for m in model.modules():
                for d in (m._parameters, m._buffers):
                    if isinstance(d, dict):  # (a TorchScript module's are wrappers; it is refused anyway)
                        self.slots.append((d, dict(d)))
            for p in model.parameters():
                self.grads.append((p, p.grad))
        self.opt_state: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.optimizer: torch.optim.Optimizer | None
        if isinstance(optimizer, torch.optim.Optimizer):
            self.opt_keys = set(optimizer.state)
            self.optimizer = optimizer
            for st in per_parameter(optimizer):
                self.opt_state.append((st, dict(st)))
        else:
            self.optimizer = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around the estimate on its own thread: records which tensors' ``.grad`` it sets."""
        with _GradSets(self.set_here):
            yield

    def check_and_restore(self) -> list[str]:
        """Put back what the step changed of the user's values; raise if it did. Returns the notes on
        changes left as found (made while another thread of the user's ran, by it or by the step).

        Raises:
            ValueError: the estimate's step replaced the user's gradients, parameters, buffers or
                optimizer state (put back before raising; the message names what).
        """
        others = {*self.threads, *_user_threads()}
        alone = not others
        changed: list[str] = []
        left: list[str] = []
        for d, was in self.slots:
            if _put_back(d, was, alone):
                changed.append("a module's parameters or buffers")
            elif _differs(d, was):
                left.append("a module's parameters or buffers")
        for p, g in self.grads:
            if p.grad is not g and (alone or is_fake(p.grad) or id(p) in self.set_here):
                changed.append("a parameter's .grad")
                p.grad = g
        for st, was in self.opt_state:
            if _put_back(st, was, alone):
                changed.append("optimizer state")
            elif _differs(st, was):
                left.append("optimizer state")
        if self.optimizer is not None:
            for p in set(self.optimizer.state) - self.opt_keys:
                st = self.optimizer.state[p]
                if alone or any(is_fake(v) for v in (st.values() if isinstance(st, dict) else [st])):
                    changed.append("optimizer state")
                    del self.optimizer.state[p]
                else:
                    left.append("optimizer state")
        if changed:
            raise ValueError(f"the estimate's step replaced {', '.join(sorted(set(changed)))} of yours (put back as "
                             f"they were): {_MODEL_HINT}")
        if not left:
            return []
        names = ", ".join(sorted(th.name for th in others))
        return [f"left as found: {', '.join(sorted(set(left)))} of yours changed during the estimate while another "
                f"thread of yours ran ({names}); vramnb cannot tell whether that thread or the step changed it (a "
                "change by the step is put back only where it is a fake tensor or a .grad)"]


def _differs(d: dict[str, Any], was: dict[str, Any]) -> bool:
    return d.keys() != was.keys() or any(d[k] is not was[k] for k in d)


def _put_back(d: dict[str, Any], was: dict[str, Any], alone: bool) -> bool:
    """Put back the entries of ``d`` the step changed (``was``: the entries as found; ``alone``: no other
    thread of the user's runs, so every change is the step's, else only fake tensors are); whether any was."""
    changed = [k for k in {*d, *was} if (k not in d or k not in was or d[k] is not was[k])
               and (alone or (k in d and is_fake(d[k])))]
    for k in changed:
        if k in was:
            d[k] = was[k]
        else:
            del d[k]
    return bool(changed)


def _user_threads() -> list[threading.Thread]:
    """Threads alive now that may run the user's code: not this one, not vramnb's own, not the host's
    (the notebook kernel's, alive when the extension was loaded: :meth:`StorageTracker.host_threads`)."""
    from .. import _tracker

    tracker = _tracker._CPU_TRACKER
    host: Any = tracker._host_threads if tracker is not None else ()
    me = threading.current_thread()
    return [th for th in threading.enumerate()
            if th is not me and th not in host and not getattr(th, "_vramnb_own", False)]
