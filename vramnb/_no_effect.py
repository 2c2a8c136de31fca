"""Techniques that silently do nothing: configured, yet without effect in the step.

One observer (:class:`EffectWatch`) watches the profiled steps and says, in one
line each (``StepReport.warnings``, which :func:`vramnb.compare` and the panel
show too), when a memory-saving technique was configured but the step shows
that it did not act. Judged from what happened in the step, never from flags
alone; nothing extra runs (no additional step, no dispatch mode):

* **activation checkpointing** that recomputed nothing in backward. Configured
  by vramnb's own technique (its wrapped blocks count their forward calls and
  runs exactly: a recompute is a run beyond the forward's), by a Hugging Face
  ``gradient_checkpointing_enable()`` (modules whose ``gradient_checkpointing``
  is ``True``), by a wrapper holding ``torch.utils.checkpoint.checkpoint``
  (``CheckpointWrapper``'s ``checkpoint_fn``), or by a module whose ``forward``
  calls ``torch.utils.checkpoint``. A recompute re-runs the region's modules
  inside the backward: one global forward pre-hook counts module calls made
  while the step's backward runs (on any thread: CUDA's backward runs on the
  autograd engine's device thread). The reason named: a forward-only step,
  the model in ``eval()`` (Hugging Face checkpoints only in training mode, and
  a ``forward`` that reads ``self.training`` gates on it), a module never
  called, or nothing in the region that requires grad.
* **autocast** that lowered no op: one global forward hook notes, for each
  module call made while ``torch.autocast(device_type, dtype)`` is enabled
  with a 16-bit ``dtype``, whether any floating output or input has that dtype
  on that device type. None: autocast changed nothing (the region has no
  eligible op, e.g. only elementwise ops, or its tensors are on another device
  type). A region that calls no module is not judged; a lowered op whose
  result reaches no module call in the region (a functional matmul reduced by
  an fp32 op before any module sees it) is not seen.
* **a technique's own check** (``StepPlan.checks``): activation offload that
  moved no saved tensor to host memory.
* **a low-bit optimizer whose state stayed wide**: a technique that promises
  8-bit state (``Recipe(optimizer="AdamW 8-bit")``) or an optimizer whose class
  says so (``AdamW8bit``, bitsandbytes' ``optim_bits=8``): after each step the
  state's bytes are read (each storage once, a tensor subclass by its inner
  tensors) and the elementwise moments' bytes per element compared with the
  promise.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import checkpoint as ckpt

from ._graph import container_items
from ._optim_state import SMALL, State, claimed_state_bits, read_state
from ._units import format_bytes

__all__ = ["EffectWatch", "Wrapped"]

_LOW = (torch.float16, torch.bfloat16)
_CKPT_FUNCS = tuple(f for f in (getattr(ckpt, "checkpoint", None), getattr(ckpt, "checkpoint_sequential", None)) if f)


@dataclass
class Wrapped:
    """A block vramnb's checkpointing wrapped: its forward calls, and the runs
    of its original forward (forward calls plus recomputes in backward)."""

    name: str
    calls: int = 0
    runs: int = 0


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype | None]:
    """Whether autocast is enabled for ``device_type`` and its dtype (torch >= 2.4
    takes the device type; older versions have per-device functions)."""
    try:
        return bool(torch.is_autocast_enabled(device_type)), torch.get_autocast_dtype(device_type)
    except (TypeError, AttributeError, RuntimeError):
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
        if device_type == "cuda":
            return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        return False, None


def _tensors(out: Any, depth: int = 2) -> Iterator[torch.Tensor]:
    """The tensors of a module's output: a tensor, a tuple/list, a dict (a
    Hugging Face ``ModelOutput``), two levels deep, read through the built-in types'
    own accessors (a subclass's overridden ``values``/``__iter__`` is the user's code)."""
    tp = type(out)
    if issubclass(tp, torch.Tensor):
        yield out
    elif depth > 0 and issubclass(tp, (tuple, list, dict)):
        for o in container_items(out):
            yield from _tensors(o, depth - 1)


def _code_names(fn: Any) -> set[str]:
    code = getattr(fn, "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


@functools.lru_cache(maxsize=512)
def _forward_calls_checkpoint(cls: type) -> tuple[bool, bool]:
    """(its ``forward`` calls ``torch.utils.checkpoint``, it reads ``training``),
    from the names its code uses and what they are bound to in its module."""
    fn = getattr(cls, "forward", None)
    fn = getattr(fn, "__wrapped__", fn)
    names = _code_names(fn)
    g = getattr(fn, "__globals__", {})
    bound = any(g[n] is ckpt or any(g[n] is f for f in _CKPT_FUNCS) for n in names if n in g)
    spelled = "checkpoint" in names and "utils" in names and g.get("torch") is torch
    return bound or spelled, "training" in names


def _is_checkpoint_fn(v: Any) -> bool:
    while isinstance(v, functools.partial):
        v = v.func
    return any(v is f for f in _CKPT_FUNCS)


class EffectWatch:
    """Watches the profiled steps of one :func:`vramnb.profile_step` and says
    which configured techniques had no effect (see the module docstring).

    Use: :meth:`scan` once the recipe is applied, :meth:`watching` around each
    step, :attr:`in_backward` set by the runner around its backward,
    :meth:`after_step` after each step, then :meth:`warnings`.
    """

    def __init__(self) -> None:
        self.in_backward = False
        self.calls: dict[int, int] = {}  # id(module) -> forward calls in the steps
        self.backward_calls: dict[int, int] = {}  # id(module) -> forward calls while the backward ran
        self.autocast: dict[tuple[str, torch.dtype], list[Any]] = {}  # -> [calls, lowered, device types, dtypes]
        self.states: list[State] = []
        self.configured: list[tuple[str, Any, str]] = []  # (name, module, "flag" / "wrapper" / "code")
        self.wrapped: list[Wrapped] = []
        self.promised_bits: int | None = None
        self.checks: list[Any] = []
        self.mode = "train"
        self.model: Any = None
        self._types: tuple[str, ...] = ("cpu", "cuda")

    def scan(self, plan: Any) -> None:
        """Find what the model and the plan configure (before the steps); a module
        that cannot be read is skipped."""
        self.model, self.mode = plan.model, plan.mode
        self.wrapped = list(getattr(plan, "checkpointed", []))
        self.promised_bits = getattr(plan, "optimizer_state_bits", None)
        self.checks = list(getattr(plan, "checks", []))
        self._types = tuple(dict.fromkeys(("cpu", "cuda", plan.device.type)))
        for name, m in plan.model.named_modules():
            try:
                flag = getattr(m, "gradient_checkpointing", None)
                if flag is True:
                    self.configured.append((name, m, "flag"))
                elif flag is None and any(_is_checkpoint_fn(v) for v in vars(m).values()):
                    self.configured.append((name, m, "wrapper"))
                # arg-type: typeshed's lru_cache takes Hashable, which mypy checks a class against by its instances
                elif flag is None and _forward_calls_checkpoint(type(m))[0]:  # type: ignore[arg-type]
                    self.configured.append((name, m, "code"))
            except Exception:  # noqa: BLE001 - a module whose attributes raise: not judged
                continue

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Count module calls (and those inside the backward) and autocast's effect, for one step."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        calls, bw, seen, types = self.calls, self.backward_calls, self.autocast, self._types

        def pre(mod: Any, args: Any) -> None:
            k = id(mod)
            calls[k] = calls.get(k, 0) + 1
            if self.in_backward:
                bw[k] = bw.get(k, 0) + 1

        def post(mod: Any, args: Any, out: Any) -> None:
            try:
                with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ is the user's
                    lowered(args, out)
            except Exception:  # noqa: BLE001 - an observer never breaks the user's forward
                pass

        def lowered(args: Any, out: Any) -> None:
            for dt in types:
                on, dtype = _autocast_state(dt)
                if not on or dtype not in _LOW:
                    continue
                rec = seen.get((dt, dtype))
                if rec is None:
                    rec = seen[(dt, dtype)] = [0, 0, set(), set()]  # calls, lowered, device types, dtypes seen
                rec[0] += 1
                if rec[1]:
                    continue
                # its output, and its inputs: what functional code between modules lowered reaches them
                for t in (*_tensors(out), *_tensors(args)):
                    if t.is_floating_point():
                        rec[2].add(t.device.type)
                        if t.device.type == dt:
                            rec[3].add(t.dtype)
                        if t.dtype == dtype and t.device.type == dt:
                            rec[1] += 1
                            break

        handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        """Around the step's backward: module calls in it are recomputes."""
        self.in_backward = True
        try:
            yield
        finally:
            self.in_backward = False

    def after_step(self, optimizer: Any) -> None:
        """Read the optimizer's state as the step left it."""
        if optimizer is None:
            return
        try:
            bits = self.promised_bits or claimed_state_bits(optimizer)
            st = read_state(optimizer, bits) if bits is not None else None
        except Exception:  # noqa: BLE001 - a state vramnb cannot read is not judged
            return
        if st is not None:
            self.states.append(st)

    # -- the lines ---------------------------------------------------------
    def warnings(self) -> list[str]:
        """One line per technique that had no effect in the steps."""
        out: list[str] = []
        for part in (self._checkpointing, self._autocast, self._optimizer, *self.checks):
            try:
                got = part()
            except Exception as e:  # noqa: BLE001 - the report stands without this line
                got = [f"vramnb could not check whether a technique had an effect ({type(e).__name__}: {e})"]
            out.extend([got] if isinstance(got, str) else got or [])
        return out

    def _recomputed(self, module: Any) -> bool:
        return any(id(m) in self.backward_calls for m in module.modules())

    def _checkpointing(self) -> list[str]:
        out = []
        forward_only = self.mode != "train"
        if self.wrapped:
            never = [w.name for w in self.wrapped if w.calls == 0]
            idle = [w.name for w in self.wrapped if w.calls and w.runs <= w.calls]
            n = len(self.wrapped)
            if never:
                out.append(f"activation checkpointing: {len(never)} of the {n} wrapped block(s) never ran in the "
                           f"step's forward ({_names(never)}), so nothing of theirs was checkpointed: name the blocks "
                           "the forward runs with blocks='...'")
            if idle:
                why = (f"the step runs forward only (mode={self.mode!r}): there is no backward to recompute in"
                       if forward_only else "they saved no tensor for backward (no input or parameter of theirs "
                       "requires grad, or their ops keep none), so checkpointing them saves nothing")
                out.append(f"activation checkpointing recomputed nothing in backward for {len(idle)} of the {n} "
                           f"wrapped block(s) ({_names(idle)}): {why}")
        idle_of = {k: [(n, m) for n, m, kind in self.configured if kind == k and not self._recomputed(m)]
                   for k in ("flag", "wrapper", "code")}
        hf_gate = "Hugging Face checkpoints only in training mode"
        if idle_of["flag"]:
            mods = idle_of["flag"]
            what = f"gradient checkpointing is enabled on {len(mods)} module(s) ({_names(_labels(mods))})"
            out.append(self._configured_line(mods, what, forward_only, hf_gate))
        if idle_of["wrapper"]:
            mods = idle_of["wrapper"]
            what = f"{len(mods)} module(s) hold torch.utils.checkpoint as a wrapper ({_names(_labels(mods))})"
            out.append(self._configured_line(mods, what, forward_only, None))
        # a forward that calls checkpoint may gate it on a flag of its own that is off: said only when the
        # module never ran, or ran in eval() and its forward reads self.training
        code = [(n, m) for n, m in idle_of["code"] if id(m) not in self.calls
                # arg-type: as above (lru_cache's Hashable, checked against a class's instances)
                or (not m.training and _forward_calls_checkpoint(type(m))[1])]  # type: ignore[arg-type]
        if code:
            kinds = sorted({type(m).__name__ for _, m in code})
            where = [n for n, _ in code if n]
            what = (f"{', '.join(k + '.forward' for k in kinds)} calls torch.utils.checkpoint"
                    + (f" (in {_names(where)})" if where else ""))
            gate = "its forward reads self.training (a gate such as `if self.training: checkpoint(...)`)"
            out.append(self._configured_line(code, what, forward_only, gate))
        return out

    def _configured_line(self, mods: list[tuple[str, Any]], what: str, forward_only: bool, gate: str | None) -> str:
        """The line for modules configured to checkpoint that recomputed nothing; ``gate``:
        how they depend on training mode (``None``: they do not)."""
        head = f"activation checkpointing did nothing: {what}, but nothing was recomputed in backward"
        if forward_only:
            return f"{head}: the step runs forward only (mode={self.mode!r}), with no backward"
        if all(id(m) not in self.calls for _, m in mods):
            return f"{head}: {'it was' if len(mods) == 1 else 'they were'} never called in the step"
        if gate is not None and any(not m.training for _, m in mods):
            return f"{head}: the model is in eval() mode and {gate}; call model.train() to checkpoint"
        if any(p.requires_grad for _, m in mods for p in m.parameters()):
            return (f"{head}: the region's inputs do not require grad, and a reentrant checkpoint "
                    "(use_reentrant=True) then computes no gradient for it, so its parameters got none: pass "
                    "use_reentrant=False, or make the inputs require grad (Hugging Face: "
                    "model.enable_input_require_grads())")
        return (f"{head}: the checkpointed region saved no tensor for backward (no input or parameter of it "
                "requires grad, or its ops keep none)")

    def _autocast(self) -> list[str]:
        out = []
        for (dt, dtype), (n, lowered, devices, dtypes) in self.autocast.items():
            if lowered:
                continue
            name = str(dtype).replace("torch.", "")
            head = (f"torch.autocast({dt!r}, {name}) changed nothing: none of the {n} module call(s) under it "
                    f"produced a {name} output")
            elsewhere = sorted(d for d in devices if d != dt)
            if elsewhere and dt not in devices:
                out.append(f"{head}; the step's tensors are on {', '.join(elsewhere)}, and autocast({dt!r}) affects "
                           f"only {dt} ops: use torch.autocast({elsewhere[0]!r}, dtype=torch.{name})")
            elif dtypes and torch.float32 not in dtypes:
                kinds = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
                out.append(f"{head}; autocast casts only float32 tensors, and the region's are {kinds}")
            else:
                out.append(f"{head}; autocast lowers only eligible ops (matmul, linear, convolution, attention): "
                           "the region's ops keep their input dtype, so it saves no memory")
        return out

    def _optimizer(self) -> list[str]:
        if not self.states:
            return []
        st = self.states[-1]
        if st.wide * 2 <= st.params:
            return []
        bits = st.bits
        per = st.total / st.params
        promised = max(st.moments, 1) * bits / 8
        what = (f"the recipe's {bits}-bit optimizer ({st.name})" if self.promised_bits
                else f"{st.name} ({bits}-bit by its name)")
        an = "an" if bits == 8 else "a"
        kept = ", ".join(f"{k} {d}" for k, d in sorted(st.dtypes.items())) or "wide"
        head = (f"{what} kept its state wide: {per:.1f} B of state per parameter ({format_bytes(st.total)} for "
                f"{st.params} parameters; {kept}), where {bits}-bit moments take about {promised:.1f} B")
        if st.wide_small * 2 > st.params:
            return [f"{head}: bitsandbytes and torchao keep 32-bit state for tensors under {SMALL} elements, "
                    "and most of yours are smaller"]
        if st.torch_class:
            return [f"{head}: the step ran torch.optim.{st.name}, not {an} {bits}-bit optimizer (a fallback)"]
        return [f"{head}: its {bits}-bit path was not taken"]


def _labels(mods: list[tuple[str, Any]]) -> list[str]:
    return [n or type(m).__name__ for n, m in mods]


def _names(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" … ({len(names)} in all)" if len(names) > limit else "")
