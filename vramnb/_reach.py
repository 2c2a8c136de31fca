"""What a profiled step reaches beyond the model, optimizer and batch, recorded before it changes.

A step's ``loss_fn`` can run other modules (a GAN generator's step runs the
discriminator: its BatchNorm statistics move), step other optimizers, and its
backward accumulates into the ``.grad`` of every leaf its graph reaches (the
discriminator's parameters, a tensor from the notebook's namespace). These are
recorded in the step's :class:`vramnb._restore.Snapshot` at the moment they are
about to change, so the restore puts them back exactly:

* every module that runs its forward (``__call__``): a process-wide forward
  pre-hook (``torch.nn.modules.module.register_module_forward_pre_hook``)
  records it and its submodules before its forward's first line;
* every optimizer that steps: a process-wide step pre-hook
  (``torch.optim.optimizer.register_optimizer_step_pre_hook``) records it, its
  parameters and state before ``step`` runs;
* both hooks record only what runs in the step's own thread (and in threads
  PyTorch starts outside Python, autograd's device threads): the hooks are
  process-wide, and a module another thread of the user's trains meanwhile is
  that thread's work, which the restore must not undo;
* before each backward, the loss's graph is walked (``next_functions`` only,
  nothing unpacked) and every leaf it accumulates into (``AccumulateGrad``'s
  variable) is recorded with its ``.grad``, also through nodes made before the
  step that save nothing (a transpose of a parameter kept as an attribute).

What cannot be put back is refused before backward runs, with a
:class:`vramnb._checks.InputError`: a graph built before the step (an autograd
node whose sequence number is older than the step's first one: a non-leaf
tensor computed outside ``loss_fn``, whose backward would free that graph's
saved tensors; nodes that save nothing are run harmlessly), and leaves outside the model with post-accumulate-grad hooks.
Not covered: state changed by code that is none of these (a module's
``forward`` called directly instead of the module, a tensor of the namespace
changed in place under ``no_grad``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from ._checks import InputError

__all__ = ["Reach", "sequence_now"]


def sequence_now() -> int:
    """The sequence number the next autograd node made on this thread will have."""
    with torch.inference_mode(False), torch.enable_grad():  # a call inside the user's inference_mode records no node
        leaf = torch.zeros((), requires_grad=True)
        node = (leaf * 1).grad_fn
        assert node is not None  # a product with a leaf that requires grad has a node
        return node._sequence_nr() + 1


def _nodes(root: Any) -> Iterator[Any]:
    stack, seen = [root], set()
    keep = []  # the Python wrappers stay alive for the walk, so ids are not reused
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        keep.append(n)
        yield n
        for nxt, _ in getattr(n, "next_functions", ()):
            stack.append(nxt)


def _saves(node: Any) -> bool:
    """Whether a node holds saved values that its backward frees (read by name, never unpacked)."""
    return hasattr(node, "_forward_cls") or any(a.startswith("_raw_saved_") for a in dir(node))


class Reach:
    """Records into ``snap`` what the step reaches (see the module docstring).

    ``own``: optimizers vramnb built for the step (a recipe's); ``own_modules``,
    ``own_tensors``: the ids of the recipe's modules and parameters (a LoRA
    wrapper and its adapters, undone by the recipe): not recorded."""

    def __init__(self, snap: Any, own: list[Any], own_modules: set[int] | None = None,
                 own_tensors: set[int] | None = None) -> None:
        self.snap = snap
        self.own = own
        self.own_modules = own_modules or set()
        self.own_tensors = own_tensors or set()  # the recipe's parameters (LoRA adapters)
        self.start = 0
        self.foreign = 0  # modules outside the model recorded as they ran
        self.thread: int | None = None  # the step's thread (set by watching)

    def _ours(self) -> bool:
        """Whether the code running now is the step's: its thread, or one PyTorch started outside
        Python (autograd's device threads run the backward, and checkpoint's recompute, on CUDA);
        another Python thread is the user's own work, running beside the step."""
        return threading.get_ident() == self.thread or isinstance(
            threading.current_thread(), threading._DummyThread)  # type: ignore[attr-defined]  # (no public name)

    def _module(self, module: torch.nn.Module, args: Any) -> None:
        if not self._ours():
            return
        if id(module) not in self.snap.module_ids and id(module) not in self.own_modules:
            n = len(self.snap.module_ids)
            self.snap.add_module(module, running=True)
            self.foreign += 1 if len(self.snap.module_ids) > n else 0

    def _optimizer(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not self._ours():
            return
        if not any(opt is o for o in self.own):
            self.snap.add_optimizer(opt)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Record modules that run and optimizers that step while inside."""
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.start = sequence_now()
        self.thread = threading.get_ident()
        handles = [register_module_forward_pre_hook(self._module), register_optimizer_step_pre_hook(self._optimizer)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def before_backward(self, loss: torch.Tensor) -> None:
        """Record the leaves the loss's backward will accumulate into.

        Raises:
            InputError: the graph reaches one built before the step, or a leaf
                outside the model with post-accumulate-grad hooks."""
        old: list[str] = []
        hooked: list[str] = []
        for n in _nodes(loss.grad_fn):
            var = getattr(n, "variable", None)
            if isinstance(var, torch.Tensor):  # AccumulateGrad
                if not self.snap.has(var) and id(var) not in self.own_tensors:
                    if getattr(var, "_post_accumulate_grad_hooks", None):
                        hooked.append(f"{tuple(var.shape)}")
                    self.snap.add_tensor(var)
                continue
            try:
                seq = n._sequence_nr()
            except Exception:  # noqa: BLE001 - a node type without one: made now
                continue
            if seq < self.start and _saves(n):
                old.append(type(n).__name__)
        if old:
            raise InputError(
                f"the loss's graph reaches {len(old)} autograd node(s) made before profile_step "
                f"({', '.join(sorted(set(old))[:3])}): the step uses a tensor computed outside loss_fn that requires "
                "grad (a non-leaf tensor from the notebook or a module attribute, e.g. features = encoder(x)). Its "
                "backward would run that graph and free what it saved, which cannot be put back. Pass it detached "
                "(features.detach()), or compute it inside loss_fn")
        if hooked:
            raise InputError(
                f"the loss's backward accumulates into {len(hooked)} tensor(s) outside the model with "
                f"post-accumulate-grad hooks (shapes {', '.join(hooked[:3])}), which step optimizers during backward "
                "and change objects vramnb cannot restore: remove the hooks (handle.remove()) while profiling")
