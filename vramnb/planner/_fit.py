"""``vramnb.fit``: the fastest combination of techniques that makes a step fit a card.

The search runs on estimates (fake tensors: no GPU needed, nothing allocated): for each
combination of the allowed settings but the number of micro-batches, the fewest
micro-batches that fit (more only cost time: smaller operators, the same arithmetic),
each estimated with its step time (:mod:`vramnb.predict._step_time`). Plans that fit the
target with the margin are ranked by predicted step time, fastest first; each carries its
predicted peak and device memory, its breakdown's change against the current recipe, the
time ratio and where it comes from, and the code to apply it in the user's own loop
(:meth:`vramnb.techniques.Technique.code`). Where nothing fits, the closest plan, by how
much it misses, and what would make it fit.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._render import Rendered, Table
from .._units import format_bytes
from ..techniques import REGISTRY, Recipe
from ..techniques.code import caller_names, rename, safe_names, step_code
from .._global_state import kept_as_found

__all__ = ["fit", "FitResult", "Plan", "DEFAULT_ALLOW"]

#: what is tried unless ``allow`` says otherwise: techniques that change memory and time but
#: not what is trained (an optimizer swap, freezing or LoRA change the training: allow them by name)
DEFAULT_ALLOW: dict[str, tuple[Any, ...]] = {
    "precision": ("fp32", "bf16"),
    "checkpointing": ("off", "every 2nd block", "every block"),
    "micro_batches": (1, 2, 4, 8, 16),
}
#: the values tried for a technique allowed by name only
_BY_NAME: dict[str, tuple[Any, ...]] = {
    "optimizer": ("yours", "Adafactor", "SGD momentum"),
    "freeze": ("none", "embeddings", "first half of blocks"),
    "lora": ("off", "r=16"),
    "activation_offload": ("off", "CPU"),
}


@dataclass
class Plan:
    """One combination of techniques, estimated.

    Attributes:
        recipe: the settings (:class:`vramnb.Recipe`).
        estimate: its :class:`vramnb.Estimate` (peak, device memory, breakdown, ``time``).
        fits: it fits the target with the margin.
        seconds: predicted step time on the target (roofline, :mod:`vramnb.predict._step_time`).
        ratio: ``seconds`` over the current recipe's (``None`` where that is unknown).
        code: the change to make in the user's loop.
        loader: for a ``DataLoader`` batch, the estimate of the loader's batches in order (the
            allocator replaying their varying shapes), where it needs more device memory than the
            largest batch alone; ``expandable``: the plan fits only with PyTorch's expandable
            segments (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), which its code sets.
    """

    recipe: Recipe
    estimate: Any
    fits: bool
    seconds: float
    ratio: float | None = None
    code: str = ""
    loader: Any = None
    expandable: bool = False

    @property
    def device_memory(self) -> int:
        """Device memory the plan needs (bytes): the largest batch's step, or the loader's sequence of
        batches where its fragmentation needs more (with expandable segments where the plan sets them)."""
        own = int(self.estimate.device_memory or 0)
        return max(own, int(self.loader.device_memory or 0)) if self.loader is not None else own

    @property
    def peak(self) -> int:
        """The plan's estimated peak allocated bytes (its estimate's ``peak_allocated``)."""
        return int(self.estimate.peak_allocated)

    def why(self, current: Plan | None) -> str:
        """Where the time goes, against ``current``: recomputed arithmetic, the dtype of the matmuls."""
        t = self.estimate.time
        parts = []
        if current is not None and current.estimate.time is not None and t is not None:
            c = current.estimate.time
            if c.total_flops and t.total_flops != c.total_flops:
                more = t.total_flops / c.total_flops - 1
                recomputes = more > 0 and self.recipe["checkpointing"] != "off"
                parts.append(f"{more * 100:+.0f} % arithmetic" + (" (recomputed)" if recomputes else ""))
        if t is not None and t.seconds:
            low = sum(v for k, v in t.flops.items() if k in ("bfloat16", "float16"))
            if low:
                parts.append(f"{low / max(1, t.total_flops) * 100:.0f} % of it on 16-bit tensor cores")
            if t.bound == "host":
                parts.append(f"bound by the host issuing {t.ops} operators")
            elif t.device:
                parts.append(f"{t.memory / t.device * 100:.0f} % of the device's time on memory traffic")
        return "; ".join(parts)


@dataclass
class FitResult(Rendered):
    """What :func:`fit` found.

    Attributes:
        target: the card's name; ``budget``: bytes the plans must stay within (its memory less the margin).
        plans: every plan estimated, those that fit first (fastest first), then the others by device memory.
        current: the user's current recipe, estimated.
        batch_size: the batch size planned for.
        misses: where nothing fits: by how much the closest plan misses (bytes), else ``None``.
        suggestions: where nothing fits, what would (a smaller batch, a bigger card, N GPUs), as lines.
        verified: with ``verify=True``, the real step of the best plan (:class:`vramnb.StepReport`).
        notes: settings that could not be tried here (and why), what was assumed.
        seconds: wall time of the search.
    """

    target: str
    budget: int
    plans: list[Plan]
    current: Plan | None
    batch_size: int | None = None
    misses: int | None = None
    suggestions: list[str] = field(default_factory=list)
    verified: Any = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def best(self) -> Plan | None:
        """The fastest plan that fits, or ``None`` (nothing fits: :attr:`code` says what would); of plans as
        fast, one whose techniques add nothing over a plan with fewer (:meth:`adds_nothing`) is not chosen."""
        over = self.adds_nothing()
        return next((p for p in self.plans if p.fits and id(p) not in over), None)

    def adds_nothing(self) -> dict[int, Plan]:
        """The fitting plans whose techniques add nothing: ``id(plan)`` -> a fitting plan whose recipe it extends
        (:meth:`Recipe.extends`: a subset of its techniques) that is as low in peak allocated bytes and device
        memory, and as fast (e.g. checkpointing where the blocks' activations are not what the peak holds).
        Computed once per list of plans."""
        key = tuple((id(p), p.fits, p.peak, p.device_memory, p.ratio) for p in self.plans)
        cached = self.__dict__.get("_adds_nothing_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        fitting = [p for p in self.plans if p.fits]
        out: dict[int, Plan] = {}
        for p in fitting:
            q = next((q for q in fitting if p.recipe.extends(q.recipe) and q.peak <= p.peak
                      and q.device_memory <= p.device_memory
                      and (p.ratio is None or q.ratio is None or q.ratio <= p.ratio)), None)
            if q is not None:
                out[id(p)] = q
        self.__dict__["_adds_nothing_cache"] = (key, out)
        return out

    @property
    def code(self) -> str:
        """The best plan's training step, as code (``best.code``; ``""`` where it is the current recipe).

        Raises:
            VramnbError: nothing fits; the message names the closest plan, by how many bytes it
                misses the budget, and what would make it fit (:attr:`suggestions`).
        """
        best = self.best
        if best is not None:
            return best.code
        from .._errors import VramnbError

        closest = min(self.plans, key=lambda p: p.device_memory, default=None)
        what = (f"the closest, {closest.recipe.describe()}, needs {format_bytes(closest.device_memory)} "
                f"(misses by {format_bytes(closest.device_memory - self.budget)})") if closest is not None else "no plan ran"
        fixes = "; ".join(self.suggestions) or "allow more techniques (allow=...), a smaller batch_size, or a larger target"
        raise VramnbError(f"no plan fits {self.target} within {format_bytes(self.budget)}: {what}. To make it fit: {fixes}. "
                          "fit(...).plans lists every plan; .best is None")

    def __repr__(self) -> str:
        return self._table().to_text()

    def _table(self) -> Table:
        bs = f" · batch {self.batch_size}" if self.batch_size else ""
        t = Table(f"vram fit · {self.target} · within {format_bytes(self.budget)}{bs}",
                  ["plan", "peak", "device memory", "fits", "step time", "why"])
        over = self.adds_nothing()
        shown = [p for p in self.plans if p.fits and id(p) not in over][:8] or self.plans[:3]
        for p in shown:
            ratio = f"{p.ratio:.2f}× now" if p.ratio is not None else "—"
            t.rows.append([p.recipe.describe(), format_bytes(p.peak), format_bytes(p.device_memory),
                           "fits" if p.fits else f"short {format_bytes(p.device_memory - self.budget)}",
                           ratio, p.why(self.current)])
        if any(p.fits and p.device_memory > self.budget for p in shown):
            t.note(f"a plan that fits with more device memory than {format_bytes(self.budget)} holds that much on the "
                   "whole card (cached segments); held to the budget, the allocator gives the cached ones back and "
                   "the steps still run")
        if over:
            left = [f"{p.recipe.describe()} (no better than {q.recipe.describe()})" for p in self.plans if (q := over.get(id(p)))]
            t.note(f"left out, their extra techniques lowering neither the peak, the device memory nor the step time "
                   f"of a plan with fewer: {'; '.join(left[:4])}" + (f" and {len(left) - 4} more" if len(left) > 4 else ""))
        best = self.best
        if best is not None:
            t.note(f"fastest that fits: {best.recipe.describe()} (predicted step time {best.ratio:.2f}× the current "
                   "recipe's)" if best.ratio is not None else f"fastest that fits: {best.recipe.describe()}")
            code = best.code.splitlines() or ["# the current recipe already fits"]
            t.note("apply it in your loop:")
            for line in code:
                t.note(f"    {line}")
        else:
            t.note(f"nothing fits: the closest plan misses by {format_bytes(self.misses or 0)}", warn=True)
            for s in self.suggestions:
                t.note(s)
        if self.verified is not None:
            steady = self.verified.steady
            real, held = verified_peak(self.verified)
            if best is not None:
                line = (f"verified on this GPU: peak allocated {format_bytes(real)} measured, "
                        f"{format_bytes(best.peak)} predicted ({(real - best.peak) / max(1, best.peak) * 100:+.1f} %)")
                if held:
                    line += (f"; besides the step, this process held {format_bytes(held)} on the GPU (your other "
                             "tensors): here the plan needs that much more room")
                if steady.step_time and best.seconds != float("inf"):
                    line += (f"; step {steady.step_time * 1e3:.1f} ms measured (with vramnb's hooks on), "
                             f"{best.seconds * 1e3:.1f} ms predicted")
                t.note(line)
        for n in self.notes:
            t.note(n)
        if best is not None and best.recipe["checkpointing"] != "off":
            from ..predict._estimate import CHECKPOINTED_ON_CUDA

            t.note(CHECKPOINTED_ON_CUDA)
        t.note("step times: each operator's roofline (PyTorch's flop formulas, the card's peak rates times what its "
               "kernels reach) and the host's time to issue it, replayed as PyTorch's queue runs them; a ratio to "
               "the current recipe; memory: vramnb.estimate")
        src = next((p.estimate.time.sources for p in self.plans if p.estimate.time is not None), None)
        if src:
            t.note(f"host cost per operator: {src[0]}; achieved rates: {src[1]}")
        return t


def _allowed(allow: Any, capability: tuple[int, int]) -> dict[str, tuple[Any, ...]]:
    """``allow`` as technique → values to try (the first: what the step does now)."""
    low = "bf16" if capability >= (8, 0) else "fp16"  # no bf16 tensor cores before Ampere
    base = {k: tuple(low if v == "bf16" else v for v in vals) for k, vals in DEFAULT_ALLOW.items()}
    if allow is None:
        return base
    choosable = [n for n in REGISTRY if n not in ("batch_size", "blocks", "mode", "zero_grad")]
    if isinstance(allow, str):
        allow = [allow]  # one technique's name
    if not isinstance(allow, (Mapping, Iterable)):
        raise ValueError(f"allow must be technique names or a dict of technique -> values to try, not {allow!r}; "
                         f"techniques: {', '.join(choosable)}")
    items = allow.items() if isinstance(allow, Mapping) else ((name, None) for name in allow)
    out: dict[str, tuple[Any, ...]] = {}
    for name, vals in items:
        if name not in REGISTRY or name in ("batch_size", "blocks", "mode", "zero_grad"):
            valid = [n for n in REGISTRY if n not in ("batch_size", "blocks", "mode", "zero_grad")]
            raise ValueError(f"allow: {name!r} is not a technique the planner can choose; valid: {', '.join(valid)}")
        if vals is None:
            vals = base.get(name) or _BY_NAME.get(name) or REGISTRY[name].choices
        vals = (vals,) if isinstance(vals, (str, int)) else tuple(vals)  # one value, not its characters
        for v in vals:
            REGISTRY[name].validate(v)  # ValueError naming the valid settings
        default = REGISTRY[name].default()
        out[name] = (default,) + tuple(v for v in vals if v != default)
    return out


@kept_as_found
def fit(
    model: Any,
    batch: Any,
    loss_fn: Any = None,
    optimizer: Any = None,
    *,
    target: str | int | None = None,
    batch_size: int | None = None,
    margin: float = 0.05,
    allow: Iterable[str] | Mapping[str, Iterable[Any]] | None = None,
    recipe: Any = None,
    verify: bool = False,
    progress: bool = True,
    names: Mapping[str, str] | None = None,
) -> FitResult:
    """The fastest plan (combination of techniques) whose step fits ``target``.

    Args:
        model, batch, loss_fn, optimizer: as for :func:`vramnb.estimate` (the model is never
            changed: every plan runs on fake copies). ``batch`` may also be a ``DataLoader`` or
            another re-iterable of batches: the plan is made for the largest of its first 256,
            read in a forked copy of this process so that nothing of the loader's changes (its
            sampler, generators, dataset, workers; data it reads from a pipe or socket it shares
            with this process excepted). A one-shot iterator (a generator, ``iter(loader)``) is refused.
        target: a GPU name (``"RTX 4090"``, see ``vramnb.GPUS``) or a size (``"24GiB"``); default:
            the GPU present, else an H100.
        batch_size: plan for this batch size (the batch's first dimension is resized).
        margin: fraction of the card to keep free (0 to < 1).
        allow: the techniques the search may use: names (each with its usual values) or a dict
            of name → values to try. Default: ``DEFAULT_ALLOW`` (mixed precision, checkpointing,
            micro-batches: they change memory and time, not what is trained); name
            ``"optimizer"``, ``"freeze"``, ``"lora"`` or ``"activation_offload"`` to allow those.
        recipe: the current recipe (what the user's loop does now; default: none).
        verify: where a CUDA GPU is present and the model is on it, run one real step of the
            best plan (:func:`vramnb.profile_step`, the model restored exactly) and report
            measured against predicted.
        progress: show a tqdm bar.
        names: the names the plans' code gives your objects, where your loop calls them otherwise:
            ``{"model": "net", "batch": "x", "optimizer": "opt", "loss_fn": "criterion"}`` (any of
            the four). Default: the names the calling code binds to the very objects passed in (a
            notebook cell's variables, or a function's locals), else ``model``, ``batch``,
            ``optimizer``, ``loss_fn``; a name the code uses for something else (``loss``, ``out``)
            is not taken, nor a name for a loader (the code's loop names its batch).

    Returns:
        a :class:`FitResult`; ``.best`` is the fastest plan that fits (``None``: nothing does,
        ``.misses`` says by how much and ``.suggestions`` what would).

    Raises:
        ValueError: a target without a size; a batch size below 1; a margin outside [0, 1);
            a one-shot iterator as ``batch``; a loader's batch that is not tensors, or on a
            platform that cannot fork;
            ``allow`` naming an unknown technique or setting (the message lists the valid
            ones); ``names`` with another key or a value that is not an identifier; what
            :func:`vramnb.estimate` refuses.
    """
    from ..predict._batch_search import _bar
    from ..predict._estimate import estimate
    from ..predict._estimate_inputs import as_recipe
    from ..predict._gpus import resolve_target

    t0 = time.perf_counter()
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a fraction of the card in [0, 1), not {margin!r}")
    if not isinstance(verify, bool):
        raise ValueError(f"verify must be True or False, not {verify!r}")
    rename("", names)  # a bad name fails before the search
    # without names=: the names the calling code (a notebook cell) gives these objects; a loader is
    # not the step's batch, which the code's own loop names
    auto = caller_names({"model": model, "optimizer": optimizer, "loss_fn": loss_fn,
                         **({"batch": batch} if _one_batch(batch) else {})}) if names is None else {}
    tgt = resolve_target(target)
    if tgt.memory is None:
        raise ValueError(f"fit needs a target with a size; {tgt.name!r} has none (give a card or '24GiB')")
    space = _allowed(allow, tgt.capability)
    current = as_recipe(recipe) or Recipe()
    batch, worst_note, sequence = _worst_batch(batch)  # after the options' checks: a bad option reads nothing
    budget = int(tgt.memory * (1 - margin))
    notes: list[str] = []
    # the fewest it takes: the current recipe, each combination once (more micro-batches only where one does not
    # fit) and a per-block search where checkpointing is allowed; the total grows when the search needs more
    combos = math.prod(len(v) for n, v in space.items() if n != "micro_batches")
    most = 1 + combos + (combos // max(1, len(space["checkpointing"])) * 2 if "checkpointing" in space else 0)
    bar = _bar(progress, "fit (estimates)", total=most)
    cache: dict[Recipe, Plan | None] = {}

    def run(r: Recipe, baseline: bool = False) -> Plan | None:
        if r in cache:
            return cache[r]
        if bar is not None:
            bar.set_postfix_str(r.describe()[:40])
            if bar.total is not None and bar.n >= bar.total:
                bar.total = bar.n + 1
        try:
            # estimate's default, two steps: the first step's optimizer state appears mid-step, and the
            # card must hold it too (one warm step had 0.5 GiB less device memory than estimate() said)
            e = estimate(model, batch, loss_fn, optimizer, recipe=r, target=target, batch_size=batch_size,
                         margin=margin, step_time=True)
        except Exception as err:  # noqa: BLE001 - a setting this model or machine cannot run: noted, the search goes on
            if baseline:  # the user's own recipe cannot be estimated: an input error, not a plan that misses
                raise
            kind = "" if isinstance(err, ValueError) else f"{type(err).__name__}: "
            notes.append(f"{r.describe()}: not tried ({kind}{(str(err).splitlines() or [''])[0][:160]})")
            cache[r] = None
            return None
        finally:
            if bar is not None:
                bar.update(1)
        plan = Plan(r, e, bool(e.fits), e.time.seconds if e.time is not None else float("inf"))
        cache[r] = plan
        return plan

    try:
        now = run(current, baseline=True)
        micro = space.pop("micro_batches", (1,))
        techs = list(space)
        plans: list[Plan] = []
        seen: set[Recipe] = set()
        for values in itertools.product(*(space[n] for n in techs)):
            settings = {**current.changed(), **{n: v for n, v in zip(techs, values)}}
            need: dict[int, int] = {}  # micro-batches -> device memory estimated
            for k in micro:  # the fewest micro-batches that fit: more cost time, never memory
                if _hopeless(need, k, budget):
                    continue
                s = {**settings, "micro_batches": k}
                r = Recipe(**{n: v for n, v in s.items() if v != REGISTRY[n].default()})
                p = run(r)
                if p is not None:
                    need[k] = p.device_memory
                if p is not None and r not in seen:
                    seen.add(r)
                    plans.append(p)
                if p is not None and p.fits:
                    break
        if "checkpointing" in techs and "every block" in space["checkpointing"]:
            for values in itertools.product(*(space[n] for n in techs if n != "checkpointing")):
                other = {**current.changed(), **dict(zip([n for n in techs if n != "checkpointing"], values))}
                p = _per_block(model, batch, loss_fn, optimizer, other, run, budget, target, batch_size, margin)
                if p is not None and p.recipe not in seen:
                    seen.add(p.recipe)
                    plans.append(p)
    finally:
        if bar is not None:
            bar.total = bar.n  # fewer than the most: the search stopped early
            bar.refresh()
            bar.close()
    base = now.seconds if now is not None and now.seconds != float("inf") else None
    for p in plans:
        p.ratio = p.seconds / base if base else None
        p.code = step_code(p.recipe, current, model, batch, loss_fn, names=names)
        if auto:
            p.code = rename(p.code, safe_names(auto, p.code))
    plans.sort(key=lambda p: (not p.fits, p.seconds if p.fits else p.device_memory))
    if len(sequence) > 1:
        notes.extend(_replay_loader(plans, sequence, model, loss_fn, optimizer, target, batch_size, margin, budget))
        for p in plans:
            if p.expandable:
                p.code = EXPANDABLE_CODE + p.code
        plans.sort(key=lambda p: (not p.fits, p.seconds if p.fits else p.device_memory))
    result = FitResult(tgt.name, budget, plans, now, batch_size, notes=notes)
    if worst_note:
        result.notes.insert(0, worst_note)
    result.notes.extend(a for a in tgt.assumed)
    if result.best is None and plans:
        closest = min(plans, key=lambda p: p.device_memory)
        result.misses = closest.device_memory - budget
        result.suggestions = _suggestions(model, batch, loss_fn, optimizer, closest, budget, margin, batch_size, target)
    if verify and result.best is not None:
        result.verified = _verify(model, batch, loss_fn, optimizer, result.best, result)
    result.seconds = time.perf_counter() - t0
    return result


#: batches of a loader looked at for the largest
MAX_BATCHES = 256
#: a loader's batches replayed in order for the fragmentation of varying shapes (then the largest)
SEQUENCE = 8
#: plans that fit, checked against the loader's sequence (best first)
CHECKED = 3
EXPANDABLE_CODE = ('import os  # PyTorch reads this when CUDA starts: at the top of the notebook, or restart the kernel\n'
                   'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n')


#: how far above the budget a micro-batch count's linear prediction may be and still be estimated
HOPE = 0.10


def _hopeless(need: Mapping[int, int], k: int, budget: int) -> bool:
    """Whether ``k`` micro-batches cannot fit, from the estimates at 1 and 2: the part of the
    device memory that splitting the batch divides is ``2 * (need[1] - need[2])`` (it halves from
    1 to 2), so ``k`` parts need about ``need[1] - that * (1 - 1/k)``. Hopeless where that is more
    than :data:`HOPE` above the budget, or where 2 micro-batches saved nothing (the search tried
    every count up to 16 for each combination before: 16 estimates per plan that cannot fit)."""
    if k <= 2 or 1 not in need or 2 not in need:
        return False
    split = 2 * (need[1] - need[2])
    if split <= 0:
        return True
    return need[1] - split * (1 - 1 / k) > budget * (1 + HOPE)


def _one_batch(batch: Any) -> bool:
    """``batch`` is one batch (what :func:`_worst_batch` takes as it is), not a loader of them."""
    import torch

    return isinstance(batch, (torch.Tensor, Mapping, tuple, list)) or not isinstance(batch, Iterable)


def _worst_batch(batch: Any) -> tuple[Any, str, list[Any]]:
    """A ``DataLoader`` or another iterable of batches (not a tensor, dict, tuple or list, which
    are one batch): its largest batch, by the bytes of its tensors (a step's memory grows with
    its batch's shapes), of the first :data:`MAX_BATCHES`; a note saying which; and the
    sequence to replay: the first :data:`SEQUENCE` batches in order, then the largest if it is
    not among them (``[batch]`` for one batch). The batches are read in a copy of this process
    (:mod:`._read_aside`), so that nothing of the user's loader, sampler, generators or dataset
    changes."""

    from .._checks import _batch_tensors, refuse_one_shot

    refuse_one_shot(batch)
    if _one_batch(batch):
        return batch, "", [batch]

    from ._read_aside import read_batches

    read = read_batches(batch, MAX_BATCHES, SEQUENCE)  # in a copy of this process: nothing of the loader's changes
    best, size, seen, first = read.largest, read.size, read.seen, read.first
    if best is None:
        raise ValueError("the loader gave no batch: fit needs at least one")
    if not any(b is best for b in first):
        first.append(best)
    shapes = ", ".join(str(tuple(t.shape)) for _, t in _batch_tensors(best))
    return best, f"planned for the largest of the loader's first {seen} batches ({shapes}, {format_bytes(size)})", first


def _replay_loader(plans: list[Plan], sequence: list[Any], model: Any, loss_fn: Any, optimizer: Any, target: Any,
                   batch_size: int | None, margin: float, budget: int) -> list[str]:
    """Check the best plans that fit against the loader's batches in order: the allocator model replays
    their varying shapes (:func:`vramnb.estimate`'s ``more_batches``); a plan whose fragmentation
    takes it over the budget is retried with expandable segments, and fits with them or not at all.
    Returns the notes to show."""
    from ..predict._estimate import estimate

    notes: list[str] = []
    kw = dict(target=target, batch_size=batch_size, margin=margin, steps=1, more_batches=sequence[1:])
    checked = 0
    for p in [p for p in plans if p.fits]:
        if checked >= CHECKED:
            break
        checked += 1
        try:
            seq = estimate(model, sequence[0], loss_fn, optimizer, recipe=p.recipe, **kw)
        except Exception as err:  # noqa: BLE001 - the plan stands on its largest batch; the note says why
            notes.append(f"{p.recipe.describe()}: the loader's sequence was not replayed ({type(err).__name__}: "
                         f"{(str(err).splitlines() or [''])[0][:120]})")
            continue
        extra = int(seq.demand or 0) - int(p.estimate.demand or 0)  # on a card without limit
        if seq.fits:
            if extra > 0:
                p.loader = seq
                notes.append(f"{p.recipe.describe()}: the loader's {len(sequence)} batches in order (varying shapes) "
                             f"would leave {format_bytes(extra)} more cached than its largest batch alone; on this card "
                             "the allocator gives cached blocks back under pressure, and it fits")
            continue
        what = (f"{p.recipe.describe()}: the loader's {len(sequence)} batches in order (varying shapes) fragment the "
                "allocator's cache: it fits the largest batch alone, not the sequence")
        grown = estimate(model, sequence[0], loss_fn, optimizer, recipe=p.recipe, expandable_segments=True, **kw)
        if grown.fits:
            p.loader, p.expandable = grown, True
            notes.append(f"{what}; with expandable segments it fits (its code sets them)")
        else:
            p.loader, p.fits = seq, False
            notes.append(f"{what}, with expandable segments or without")
    return notes


def _recipe(settings: Mapping[str, Any]) -> Recipe:
    return Recipe(**{n: v for n, v in settings.items() if v != REGISTRY[n].default()})


def _cover(items: list[tuple[int, float]], need: int, steps: int = 2000) -> list[int] | None:
    """The indices of ``items`` (bytes saved, seconds it costs) whose bytes reach ``need`` at the
    least total seconds: an exact 0/1 covering knapsack, by dynamic programming over bytes in
    ``need / steps`` units (each item's bytes rounded down: the cover holds). ``None``: no cover."""
    if need <= 0:
        return []
    unit = max(1, -(-need // steps))
    cap = -(-need // unit)
    best: list[tuple[float, int] | None] = [None] * (cap + 1)  # units covered -> (seconds, chosen as bits)
    best[0] = (0.0, 0)
    for i, (saved, cost) in enumerate(items):
        w = saved // unit
        if w <= 0:
            continue
        for c in range(cap, -1, -1):
            cur = best[c]
            if cur is None:
                continue
            to = min(cap, c + w)
            cand = (cur[0] + cost, cur[1] | (1 << i))
            if best[to] is None or cand[0] < best[to][0]:  # type: ignore[index]
                best[to] = cand
    if best[cap] is None:
        return None
    bits = best[cap][1]  # type: ignore[index]
    return [i for i in range(len(items)) if bits >> i & 1]


def _per_block(model: Any, batch: Any, loss_fn: Any, optimizer: Any, other: dict[str, Any], run: Any, budget: int,
               target: Any, batch_size: int | None, margin: float) -> Plan | None:
    """Checkpointing chosen per block: where the step without checkpointing misses the budget and
    checkpointing every block fits (one micro-batch), the blocks whose checkpointing saves enough
    at the least recomputation (:func:`_cover` over each block's saved activations and forward
    time, from one estimate of the plain step), re-estimated; a miss adds its shortfall to the
    need, three times at most; a fit then drops the block dearest per byte saved while the step
    still fits (the allocator's segments make the savings uneven). ``None`` where that does not
    apply or nothing better is found."""
    from ..predict._estimate import estimate
    from ..techniques.checkpointing import find_blocks

    off = run(_recipe({**other, "micro_batches": 1, "checkpointing": "off"}))
    every = run(_recipe({**other, "micro_batches": 1, "checkpointing": "every block"}))
    if off is None or every is None or off.fits or not every.fits:
        return None
    names = {id(m): n for n, m in model.named_modules()}
    blocks = [names.get(id(b)) for b in find_blocks(model)]
    if len(blocks) < 2 or any(not n for n in blocks) or len({n.count(".") for n in blocks}) != 1:  # type: ignore[union-attr]
        return None
    depth = blocks[0].count(".") + 1  # type: ignore[union-attr]
    e = estimate(model, batch, loss_fn, optimizer, recipe=off.recipe, target=target, batch_size=batch_size,
                 margin=margin, steps=1, warm_optimizer=optimizer is not None, step_time=True, module_depth=depth)
    acts = {m.name: m.activations for m in e.steps[-1].modules}
    saved = [acts.get(n, 0) for n in blocks]  # type: ignore[arg-type]
    total = off.device_memory - every.device_memory
    if total <= 0 or not sum(saved) or e.time is None:
        return None
    # each block's share of what checkpointing them all saves, in proportion to its activations
    items = [(int(a * total / sum(saved)), e.time.forward_by_module.get(n, 0.0)) for a, n in zip(saved, blocks)]  # type: ignore[arg-type]
    need = off.device_memory - budget
    found = None
    for _ in range(3):  # the shares are linear; the allocator's segments are not: a miss grows the need
        chosen = _cover(items, need)
        if not chosen or len(chosen) == len(blocks):
            return None
        p = run(_recipe({**other, "micro_batches": 1, "checkpointing": tuple(blocks[i] for i in chosen)}))
        if p is None:
            return None
        if p.fits:
            found = (p, chosen)
            break
        need += p.device_memory - budget
    while found is not None and len(found[1]) > 1:  # and a fit may hold with fewer: drop the dearest per byte
        p, chosen = found
        drop = max(reversed(chosen), key=lambda i: items[i][1] / max(1, items[i][0]))
        fewer = [i for i in chosen if i != drop]
        q = run(_recipe({**other, "micro_batches": 1, "checkpointing": tuple(blocks[i] for i in fewer)}))
        if q is None or not q.fits:
            break
        found = (q, fewer)
    return found[0] if found is not None else None


def _suggestions(model: Any, batch: Any, loss_fn: Any, optimizer: Any, closest: Plan, budget: int, margin: float,
                 batch_size: int | None, target: Any) -> list[str]:
    """What would make the closest plan fit: a smaller batch (two estimates, linear in the batch),
    the smallest card in ``vramnb.GPUS`` that holds it, N GPUs with FSDP."""
    from ..predict._estimate import estimate
    from ..predict._gpus import GPUS
    from ..techniques.batching import batch_len

    out = []
    need = closest.device_memory
    try:
        n = batch_size or batch_len(batch)
    except Exception:  # noqa: BLE001
        n = None
    if n and n >= 2:
        try:
            half = estimate(model, batch, loss_fn, optimizer, recipe=closest.recipe, batch_size=n // 2, steps=1,
                            warm_optimizer=optimizer is not None, target=target)
            per = (need - (half.device_memory or 0)) / (n - n // 2)
            if per > 0:
                k = int((budget - (need - per * n)) // per)
                if 1 <= k < n:
                    out.append(f"a batch of about {k} fits with {closest.recipe.describe()} "
                               f"(vramnb.max_batch_size(..., recipe={closest.recipe!r}) searches it)")
        except Exception:  # noqa: BLE001 - a suggestion, not a requirement
            pass
    bigger = [(mem, name) for name, mem in GPUS.items() if mem * (1 - margin) >= need]
    if bigger:
        mem, name = min(bigger)
        out.append(f"the smallest card in vramnb.GPUS that holds {closest.recipe.describe()}: {name}")
    for world in (2, 4, 8):
        try:
            e = estimate(model, batch, loss_fn, optimizer, recipe=closest.recipe, batch_size=batch_size, steps=1,
                         warm_optimizer=optimizer is not None, target=target,
                         world_size=world, parallel="fsdp", margin=margin)
        except Exception:  # noqa: BLE001
            break
        if e.fits:
            out.append(f"{world} GPUs with FSDP (full shard): {format_bytes(e.device_memory or 0)} per GPU "
                       f"(vramnb.estimate(..., world_size={world}, parallel='fsdp'))")
            break
    return out


def verified_peak(report: Any) -> tuple[int, int]:
    """The verified step's own peak allocated memory (bytes) and what the process held beside it.

    ``report.steady.peak.allocated`` counts every tensor on the device; the estimate predicts the
    step's (model, optimizer, batch and what the step makes). The difference is the ``"other"``
    source: memory held before the step by something else in the process (a user's copies of the
    weights, another model). Returns ``(peak allocated - other, other)``.
    """
    peak = report.steady.peak
    held = int(peak.sources.get("other", 0))
    return int(peak.allocated) - held, held


def _verify(model: Any, batch: Any, loss_fn: Any, optimizer: Any, best: Plan, result: FitResult) -> Any:
    """One real step of ``best`` on the user's model where it is on a CUDA GPU, else ``None`` (a note says why)."""
    import torch

    try:
        dev = next(model.parameters()).device
    except Exception:  # noqa: BLE001
        dev = torch.device("cpu")
    if dev.type != "cuda":
        result.notes.append("verify: the model is not on a CUDA GPU here; nothing was run")
        return None
    from .._step import profile_step

    return profile_step(model, batch, loss_fn, optimizer, recipe=best.recipe)
