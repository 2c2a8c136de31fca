"""The largest batch that fits a card, found over predictions (no out-of-memory trials).

:func:`max_batch_size` asks :func:`vramnb.estimate` whether a batch size fits
the target and searches on those answers. Device memory grows with the batch
size almost linearly (activations and the batch scale with it; parameters,
gradients and optimizer state do not), so two estimates give a line whose
crossing with the card's capacity is the first guess; the search then
brackets the answer (a size that fits, the next that does not) by
interpolation, falling back to bisection where the caching allocator's
rounding bends the line. Each estimate runs the step on fake tensors in
about a second, whatever the card.

``safety="worst"`` (the default) widens the margin by the worst under-estimate
the zoo benchmark measured for the step's kinds (:mod:`vramnb.predict._accuracy`),
so that the answer fits wherever the estimate errs no worse than it did there;
``safety="none"`` searches on the estimates as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .._extras import progress_bar
from .._render import Rendered, Table
from .._units import format_bytes, format_seconds
from ._accuracy import ROUNDING, ExpectedError, safe_margin, safety_basis
from ._estimate import Estimate, estimate
from ._estimate_inputs import as_recipe
from ._fake import resize_batch
from .._global_state import kept_as_found

__all__ = ["SAFETY", "BatchSearch", "max_batch_size"]

#: the choices of ``max_batch_size(safety=...)``
SAFETY = ("worst", "none")


@dataclass
class BatchSearch(Rendered):
    """The result of :func:`max_batch_size`.

    Attributes:
        batch_size: the largest batch size predicted to fit (0: not even 1 fits).
        estimate: the :class:`~vramnb.Estimate` at that size (at size 1 if none fits).
        tried: ``(batch size, fits, predicted device memory in bytes)`` per estimate, in order.
        peaks: batch size -> predicted peak allocated bytes (what the tensors of the step hold at
            once), for each size in ``tried``: what "fits" weighs against the card less the margin,
            with the allocator's fragmentation on top.
        seconds: wall time of the search.
        verified: the real step's :class:`~vramnb.StepReport` at ``batch_size`` when
            ``verify=True`` ran one, else ``None``.
        at_limit: the search stopped at its ``limit`` with every size fitting:
            ``batch_size`` is the limit, and larger batches may fit too.
        limit: the largest batch size the search considered.
        safety: the ``safety`` the search ran with.
        margin: the margin it used (fraction of the card): the one asked for, widened by
            ``safety="worst"``; ``margin_reason`` says by what.
        expected_error: the step's expected error (kinds, benchmark figures).
        estimates: how many estimates the search ran (``tried``, and the first one
            where ``safety="worst"`` changed the margin after it).
    """

    batch_size: int
    estimate: Estimate
    tried: list[tuple[int, bool, int]] = field(default_factory=list)
    seconds: float = 0.0
    verified: Any = None
    at_limit: bool = False
    limit: int = 0
    safety: str = "worst"
    margin: float = 0.0
    margin_reason: str = ""
    expected_error: ExpectedError | None = None
    estimates: int = 0
    peaks: dict[int, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        return self._table().to_text()

    def _table(self) -> Table:
        e = self.estimate
        card = e.target.name if e.target is not None else "?"
        peaks = self.peaks if all(n in self.peaks for n, _, _ in self.tried) else {}
        t = Table(f"vram max batch size · {card} · {e.label}",
                  ("batch size", "fits", *(("peak allocated",) if peaks else ()), "device memory"))
        for n, ok, mem in sorted(self.tried):
            t.rows.append((str(n), "yes" if ok else "no", *((format_bytes(peaks[n]),) if peaks else ()),
                           format_bytes(mem)))
        if self.at_limit:
            found = (f"fits at least up to the search limit {self.batch_size}: the search stopped there, larger "
                     "batches may fit too (raise limit= to look further)")
        elif self.batch_size == 0:
            found = "not even a batch of 1 fits"
        else:
            found = f"largest batch that fits: {self.batch_size}"
        t.note(f"{found} (predicted device memory {format_bytes(e.device_memory or 0)}, margin {e.margin:.0%}); "
               f"{self.estimates or len(self.tried)} estimates, no out-of-memory trial, {format_seconds(self.seconds)}",
               warn=self.at_limit or not self.batch_size)
        room = int(e.target.memory * (1 - e.margin)) if e.target is not None and e.target.memory else None
        if room is not None and any(mem > room for _, ok, mem in self.tried if ok):
            # "fits" is the steps run within the card less the margin; device memory is on the whole card
            t.note(f"fits: the steps run within {format_bytes(room)} (the card less the margin): their peak allocated "
                   "bytes plus what the caching allocator's fragmentation leaves unusable, the allocator giving back "
                   "cached segments as it nears that; device memory: what the whole card would show, where it keeps "
                   "them cached (so a size that fits can show more than one that does not)")
        if self.margin_reason:
            t.note(f"safety {self.safety!r}: margin {self.margin:.1%}: {self.margin_reason}")
        if self.verified is not None:
            v = self.verified.steady.peak
            t.note(f"verified by one real step: peak allocated {format_bytes(v.allocated)} "
                   f"(predicted {format_bytes(e.peak_allocated)})")
        return t


@kept_as_found
def max_batch_size(
    model: Any,
    batch: Any,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] | None = None,
    optimizer: Any = None,
    *,
    target: str | int | None = None,
    recipe: Any = None,
    margin: float = 0.0,
    limit: int = 1 << 20,
    expandable_segments: bool = False,
    verify: bool = False,
    progress: bool = True,
    safety: str = "worst",
) -> BatchSearch:
    """The largest batch size whose predicted memory fits ``target``.

    Args:
        model, batch, loss_fn, optimizer, recipe, target, expandable_segments:
            as for :func:`vramnb.estimate`; the batch's tensors share their
            first dimension, the batch size, which the search changes.
        margin: fraction of the card to keep free (e.g. 0.05).
        safety: ``"worst"`` (default): add to ``margin`` the worst under-estimate that
            the zoo benchmark measured for steps of this kind (its device memory, or its
            peak plus the allocator's rounding, the larger), so the batch found fits
            whenever the estimate errs no worse than there (a kind without figures is
            held to the worst of every kind); one estimate more classifies the step.
            ``"none"``: the estimates as they are (the largest batch predicted to fit).
        limit: the largest batch size considered; where it fits, the result's
            ``at_limit`` is ``True`` and its report says the search stopped there.
        verify: where a CUDA GPU is present and the model is on it, run one
            real step (:func:`vramnb.profile_step`) at the size found.
        progress: show a tqdm progress bar.

    Returns:
        a :class:`BatchSearch` (``batch_size``, the estimate there, the sizes tried,
        ``at_limit``: whether the search stopped at ``limit``).

    Raises:
        ValueError: as :func:`vramnb.estimate`; a batch without a batch
            dimension (a 0-dim tensor, a dict of scalars, no tensors) or whose
            tensors do not share a first dimension; a ``limit`` below 1; a
            ``batch_size`` in the recipe; a target without a size; a ``safety``
            other than ``"worst"`` or ``"none"``.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    if not isinstance(safety, str) or safety not in SAFETY:
        raise ValueError(f"safety must be one of {', '.join(map(repr, SAFETY))}, not {safety!r}")
    recipe = as_recipe(recipe)  # ValueError for what is not a recipe, before any estimate
    settings = recipe.changed() if recipe is not None else {}
    if settings.get("batch_size") not in (None, "as given"):
        raise ValueError("max_batch_size searches the batch size itself: leave batch_size out of the recipe")
    step = int(settings.get("micro_batches") or 1)  # sizes must split into that many equal micro-batches
    t0 = time.perf_counter()
    start = resize_batch(batch)
    cache: dict[int, Estimate] = {}
    tried: list[tuple[int, bool, int]] = []
    bar = _bar(progress)

    used = margin

    runs = [0]
    ran: list[int] = []  # batch sizes whose step ran

    def run(n: int, m: float) -> Estimate:
        runs[0] += 1
        try:
            e = estimate(model, batch, loss_fn, optimizer, recipe=recipe, target=target, batch_size=n,
                         margin=m, expandable_segments=expandable_segments)
        except Exception as err:
            if ran and n != start and hasattr(err, "add_note"):  # the step ran at the batch's own size
                err.add_note(
                    f"max_batch_size: the step ran at your batch's size ({', '.join(map(str, sorted(set(ran))))}) and "
                    f"raised this at batch size {n}: it changes the first dimension of the tensors in `batch` only; "
                    "a tensor your loss function or model takes from elsewhere (a target, a mask, noise) keeps its "
                    "size: pass it in the batch")
            raise
        ran.append(n)
        if e.fits is None:
            raise ValueError("max_batch_size needs a target with a size (a GPU name or a size such as '24GiB')")
        return e

    def est(k: int) -> Estimate:
        n = k * step  # the search runs over k; the batch has k × micro-batches examples
        if n not in cache:
            cache[n] = e = run(n, used)
            tried.append((n, bool(e.fits), e.device_memory or 0))
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"batch {n}: {'fits' if e.fits else 'too big'}")
        return cache[n]

    n0 = max(1, min(start, limit) // step)
    try:
        first = run(n0 * step, margin)  # its kinds decide the margin
        if bar is not None:
            bar.update(1)
        used, reason = _margin(first, margin, safety)
        if used == margin:  # the first estimate holds for the search
            cache[n0 * step] = first
            tried.append((n0 * step, bool(first.fits), first.device_memory or 0))
        good, bad = _search(est, n0, limit // step)
        best = est(max(good, 1))
        good *= step
    finally:
        if bar is not None:
            bar.close()
    # every size up to the limit fits (the smallest that does not is past it): the answer is the limit, not a maximum
    result = BatchSearch(good, best, tried, time.perf_counter() - t0, at_limit=bad > limit // step, limit=limit,
                         safety=safety, margin=used, margin_reason=reason, expected_error=first.expected_error,
                         estimates=runs[0], peaks={n: e.peak_allocated for n, e in cache.items()})
    if verify and good and torch.cuda.is_available() and isinstance(model, torch.nn.Module):
        result.verified = _verify(model, batch, loss_fn, optimizer, recipe, good)
        result.seconds = time.perf_counter() - t0
    return result


def _margin(first: Estimate, margin: float, safety: str) -> tuple[float, str]:
    """The margin the search uses, and why (see :func:`vramnb.predict._accuracy.safe_margin`)."""
    if safety == "none":
        return margin, ""
    under, under_device, why = safety_basis(first.expected_error)
    card = first.target.memory if first.target is not None else None
    if not card or under is None:
        return margin, why
    used = safe_margin(margin, card, under, under_device)
    if used >= 1:
        raise ValueError(f"safety='worst' leaves nothing of the card: {why} with margin={margin} covers all of it; "
                         "pass safety='none' or a smaller margin")
    by_peak = safe_margin(margin, card, under)
    what = (f"the steady peak under-estimated by up to {abs(under):.1%} plus {format_bytes(ROUNDING)} the allocator may "
            "round up" if by_peak >= used else f"device memory under-estimated by up to {abs(under_device or 0):.1%}")
    return used, f"your margin {margin:.1%} + {what}: {why}"


def _search(est: Callable[[int], Estimate], n0: int, limit: int) -> tuple[int, int]:
    """``(largest size that fits or 0, smallest that does not or limit + 1)``.

    Peak allocated memory is close to affine in the batch size, so the first
    estimate's per-example memory (its activations, temporaries and batch)
    and then the line through two estimates predict where the card is full;
    the search then steps by one across the boundary, or bisects a wide
    bracket. Where memory is not affine (a batch x batch matrix, a kernel that
    changes with the size, the allocator's steps) the line can creep towards
    the boundary from one side: where an estimate did not halve the bracket
    the next one bisects it, so the search takes at most about twice
    log2(limit) estimates."""
    good, bad = 0, limit + 1
    pts: list[tuple[int, int]] = []
    widths: list[int] = []  # bad - good after each estimate
    n = max(1, min(n0, limit))
    stride = 1  # galloping up while no size is known not to fit
    while bad - good > 1:
        e = est(n)
        if e.fits:
            good = max(good, n)
        else:
            bad = min(bad, n)
        if bad - good <= 1:
            break
        widths.append(bad - good)
        pts.append((n, e.demand or 0))
        guess = _model_guess(pts, e)
        tried = {m for m, _ in pts}
        if bad <= limit and bad - good > 4 and len(widths) >= 2 and widths[-1] > widths[-2] // 2:
            guess = (good + bad) // 2  # the line is not closing in: bisect
        elif guess is None or guess in tried or not good < guess < bad:
            # the line is spent (or bent by the allocator's steps): walk across the
            # boundary when it is near, else double or bisect
            if bad - good <= 4:
                guess = good + 1 if e.fits else bad - 1
            elif bad > limit and guess is not None and guess >= limit:
                guess = limit  # the line says the card holds more than the limit: try the limit itself
            elif bad > limit:
                guess = good + stride if len(pts) >= 2 else good * 2
                stride *= 2
            else:
                guess = (good + bad) // 2
        n = max(good + 1, min(guess, bad - 1, limit))
    return good, bad


def _model_guess(pts: list[tuple[int, int]], e: Estimate) -> int | None:
    """Where the device memory the steps demand reaches the card (less margin):
    on the line through the last two estimates, or, after one, from the
    memory per example (activations, temporaries and batch at the fullest phase)."""
    if e.target is None or not e.target.memory:
        return None
    room = e.target.memory * (1 - e.margin)
    if len(pts) >= 2 and pts[-1][0] != pts[-2][0] and pts[-1][1] != pts[-2][1]:
        (n1, m1), (n2, m2) = pts[-2], pts[-1]
        slope = (m2 - m1) / (n2 - n1)
    else:
        n2, m2 = pts[-1]
        per = [b.sources.get("activations", 0) + b.sources.get("temporaries", 0) + b.sources.get("input batch", 0)
               for b in e.steady.phase_peaks.values()] or [0]
        slope = max(per) / n2
    if slope <= 0:
        return None
    return int(n2 + (room - m2) // slope)


def _bar(progress: bool, desc: str = "max batch size (estimates)", total: int | None = None) -> Any:
    """A tqdm bar of estimates (``None`` without ``progress``); ``total``: the most it may take."""
    return progress_bar(desc=desc, unit="estimate", leave=False, total=total) if progress else None


def _verify(model: torch.nn.Module, batch: Any, loss_fn: Any, optimizer: Any, recipe: Any, n: int) -> Any:
    """One real step at batch size ``n`` (the batch's rows repeated to fill it)."""
    from .._containers import map_tensors
    from .._step import profile_step

    def grow(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0:
            return t
        reps = -(-n // t.shape[0])
        return t.repeat(reps, *([1] * (t.dim() - 1)))[:n]

    big = map_tensors(batch, grow)
    if isinstance(optimizer, torch.optim.Optimizer) or optimizer is None:
        opt = optimizer
    else:  # a factory: build it over the real model for the one verification step
        opt = optimizer([p for p in model.parameters() if p.requires_grad])
    return profile_step(model, big, loss_fn, opt, recipe=recipe, module_depth=None)
