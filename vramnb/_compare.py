"""The what-if matrix: profile one step of a live model under several recipes
and compare them, ranked by peak memory.

Fairness: each recipe runs two steps and the comparison uses the second, the
steady-state step. One-time costs (the optimizer state a first ``step()``
creates, the cuBLAS workspaces of the first matrix multiplication, CUDA's lazy
module loading) fall in each recipe's first step and are left out of the
comparison, so the first recipe run pays nothing the others skip. Autocast's
cache of low-precision weight copies lives only inside the autocast region and
is part of the mixed-precision step itself.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ._breakdown import CPU_TIME, StepReport
from ._reasons import reason
from ._report import oom_lines
from ._versions import versions
from ._render import Rendered, Table, dataframe
from ._sources import SOURCES
from ._checks import InputError
from ._extras import progress_bar
from ._step import check_inputs, check_loss_fn, profile_step
from ._units import format_bytes, format_delta, format_seconds
from .techniques import REGISTRY, Recipe, Unavailable
from ._global_state import kept_as_found

__all__ = ["compare", "Comparison", "Variant"]


@dataclass
class Variant:
    """One recipe's outcome: its report, or why it did not run."""

    recipe: Recipe
    report: StepReport | None = None
    unavailable: str | None = None
    error: str | None = None

    @property
    def peak(self) -> int | None:
        return self.report.steady.peak.allocated if self.report is not None else None


@dataclass
class Comparison(Rendered):
    """Recipes compared on one model, ranked by steady-state peak.

    Attributes:
        variants: one :class:`Variant` per recipe, in the order run (the
            baseline first).
        device: the device measured.
    """

    variants: list[Variant]
    device: str
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)  # what it was measured with (see StepReport)

    def __repr__(self) -> str:
        return self._table().to_text()

    @property
    def baseline(self) -> Variant:
        """The first recipe run (your step as it is, unless you listed recipes without one): what savings are against."""
        return self.variants[0]

    def ranked(self) -> list[Variant]:
        """Variants that ran, lowest peak first; then those that did not."""
        ran = sorted((v for v in self.variants if v.peak is not None), key=lambda v: v.peak or 0)
        return ran + [v for v in self.variants if v.peak is None]

    def reason(self, v: Variant) -> str:
        """Why ``v`` saved what it saved, in one line computed from the measured per-source deltas
        against the baseline's steady-state step (``""`` for the baseline or a variant that did not run)."""
        base = self.baseline.report
        if v is self.baseline or v.report is None or base is None:
            return ""
        w = self._same_as_fewer().get(id(v))
        if w is not None and w is not self.baseline:  # the same peak as a recipe with fewer settings: only that
            # recipe's mechanisms explain it (the table's note says what adds nothing)
            why, head = reason(w.recipe, base.steady, v.report.steady), w.recipe.describe() + ": "
            return v.recipe.describe() + ": " + why[len(head):] if why.startswith(head) else why
        return reason(v.recipe, base.steady, v.report.steady)

    @staticmethod
    def _extra(v: Variant, w: Variant) -> str:
        """The settings ``v`` has beyond ``w``'s, in words."""
        ws = w.recipe.changed()
        return " · ".join(REGISTRY[k].describe(x) for k, x in v.recipe.changed().items()
                          if ws.get(k, REGISTRY[k].default()) != x)

    def adds_nothing(self) -> list[tuple[Variant, Variant]]:
        """``(v, w)`` where ``v``'s recipe extends ``w``'s (:meth:`Recipe.extends`: all of ``w``'s settings and
        more) and its steady peak is the same bytes as ``w``'s: what ``v`` adds changed nothing at the peak (a
        freeze under LoRA, which already freezes the base weights)."""
        return [(v, w) for v in self.variants if (w := self._same_as_fewer().get(id(v))) is not None]

    def _same_as_fewer(self) -> dict[int, Variant]:
        """``id(v)`` -> the first ``w`` of :meth:`adds_nothing`, computed once per list of variants (the table
        and every variant's :meth:`reason` ask for it)."""
        key = tuple((id(v), v.peak) for v in self.variants)
        cached = self.__dict__.get("_same_as_fewer_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        ran = [v for v in self.variants if v.peak is not None]
        out = {id(v): w for v in ran
               if (w := next((w for w in ran if w.peak == v.peak and v.recipe.extends(w.recipe)), None)) is not None}
        self.__dict__["_same_as_fewer_cache"] = (key, out)
        return out

    def _changed_sources(self) -> list[str]:
        base = self.baseline.report
        if base is None:
            return []
        b = base.steady.peak.sources
        return [s for s in SOURCES if any(v.report is not None and v.report.steady.peak.sources.get(s, 0) != b.get(s, 0)
                                          for v in self.variants)]

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per variant: recipe, peak, saving, step time, each
        source at the peak (bytes, seconds), and ``warnings``: the lines saying
        which configured technique had no effect in its step, and ``reason``: why it saved what it saved
        (:meth:`reason`)."""
        base = self.baseline.peak
        out = []
        for v in self.ranked():
            rec: dict[str, Any] = {"recipe": v.recipe.describe(), **{f"setting:{k}": x for k, x in v.recipe.changed().items()}}
            rec["peak_allocated"] = v.peak
            rec["saving"] = (base - v.peak) if (base is not None and v.peak is not None) else None
            rec["step_time"] = v.report.steady.step_time if v.report is not None else None
            if v.report is not None:
                rec.update({f"peak:{s}": n for s, n in v.report.steady.peak.sources.items()})
                rec["reserved"] = v.report.steady.peak.reserved
            rec["unavailable"] = v.unavailable
            rec["error"] = v.error
            rec["warnings"] = list(v.report.warnings) if v.report is not None else []
            rec["reason"] = self.reason(v)
            out.append(rec)
        return out

    def to_dataframe(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`to_records`.

        Raises:
            MissingDependencyError: pandas is not installed (the message says ``pip install "vramnb[pandas]"``).
        """
        return dataframe(self.to_records(), "Comparison.to_dataframe")

    def plot(self) -> Any:
        """Side-by-side breakdowns at each variant's peak, ranked (a matplotlib figure).

        Raises:
            MissingDependencyError: matplotlib is not installed (``pip install "vramnb[plot]"``).
        """
        from ._plot import plot_compare

        ran = [(v, v.report) for v in self.ranked() if v.report is not None]
        return plot_compare([r for _, r in ran], [v.recipe.describe() for v, _ in ran])

    def _table(self) -> Table:
        changed = self._changed_sources()
        heads = ["recipe", "peak", "saving", "step time"] + [f"saved: {s}" for s in changed]
        t = Table(f"what if · {self.device} · steady-state step, ranked by peak", heads, align="l" + "r" * (len(heads) - 1))
        base = self.baseline
        base_src = base.report.steady.peak.sources if base.report is not None else {}
        for v in self.ranked():
            if v.report is None:
                t.rows.append([v.recipe.describe(), "—", "not available" if v.unavailable else "failed", ""]
                              + [""] * len(changed))
                t.note(f"{v.recipe.describe()}: {v.unavailable or v.error}", warn=v.error is not None)
                continue
            src = v.report.steady.peak.sources
            saving = ""
            if base.peak is not None and v is not base:
                d = base.peak - (v.peak or 0)
                saving = f"{format_delta(d)} ({d / base.peak:+.0%})"
            t.rows.append([v.recipe.describe(), format_bytes(v.peak or 0), saving or "baseline",
                           format_seconds(v.report.steady.step_time)]
                          + [format_delta(base_src.get(s, 0) - src.get(s, 0)) for s in changed])
        for v in self.ranked():
            why = self.reason(v)
            if why:
                t.note(f"why: {why}")
        for v, same in self.adds_nothing():
            t.note(f"{v.recipe.describe()}: the same peak as {same.recipe.describe()}: {self._extra(v, same)} adds "
                   "nothing at the peak here")
        # a technique that had no effect in its step (vramnb._no_effect); a line every recipe has, once
        ran = [(v, v.report) for v in self.ranked() if v.report is not None]
        common = [w for w in (ran[0][1].warnings if ran else []) if all(w in r.warnings for _, r in ran)]
        for w in common if len(ran) > 1 else []:
            t.note(f"every recipe: {w}", warn=True)
        for v, r in ran:
            for w in r.warnings:
                if len(ran) == 1 or w not in common:
                    t.note(f"{v.recipe.describe()}: {w}", warn=True)
        t.note("saving and saved columns: the baseline's bytes minus this recipe's (positive: memory saved; negative: more)")
        if self.device == "cpu" and ran:
            t.note("step time" + CPU_TIME)
        for n in self.notes:
            t.note(n)
        return t


def _recipes(recipes: Iterable[Any] | None, toggles: Mapping[str, Sequence[Any]] | None) -> list[Recipe]:
    out = [Recipe()]
    if isinstance(recipes, (Recipe, Mapping, str)):
        raise ValueError(f"recipes must be a list of vramnb.Recipe objects or dicts of settings, not one "
                         f"{type(recipes).__name__}: recipes=[{recipes!r}]")
    if toggles is not None and not isinstance(toggles, Mapping):
        raise ValueError(f"toggles must be a dict of technique -> list of settings, e.g. "
                         f"{{'precision': ['fp32', 'bf16']}}, not {type(toggles).__name__}")
    for name, values in (toggles or {}).items():
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            choices = REGISTRY[name].choices if name in REGISTRY else ()
            raise ValueError(f"toggles[{name!r}] must be a list of settings, not {type(values).__name__} {values!r}: "
                             f"e.g. toggles={{{name!r}: {list(choices[:2])!r}}}"
                             + (f" (valid: {', '.join(repr(c) for c in choices)})" if choices else ""))
    if recipes is not None:
        for r in recipes:
            rec = r if isinstance(r, Recipe) else Recipe(**r) if isinstance(r, Mapping) else None
            if rec is None:
                raise ValueError(f"each recipe must be a vramnb.Recipe or a dict of settings, not {type(r).__name__}")
            out.append(rec)
    if toggles:
        unknown = [k for k in toggles if k not in REGISTRY]
        if unknown:
            raise ValueError(f"unknown technique {unknown[0]!r}; valid: {', '.join(REGISTRY)}")
        names = list(toggles)
        for values in itertools.product(*(toggles[n] for n in names)):
            out.append(Recipe(**dict(zip(names, values))))
    seen, unique = set(), []
    for r in out:
        if r not in seen:
            seen.add(r)
            unique.append(r)
    return unique


@kept_as_found
def compare(
    model: torch.nn.Module,
    batch: Any,
    loss_fn: Any = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    recipes: Iterable[Any] | None = None,
    toggles: Mapping[str, Sequence[Any]] | None = None,
    progress: bool = True,
    module_depth: int | None = None,
) -> Comparison:
    """Profile one training step under each recipe and compare them.

    Args:
        model, batch, loss_fn, optimizer: as for :func:`vramnb.profile_step`.
        recipes: :class:`Recipe` objects or dicts of settings.
        toggles: technique → values; every combination is run (the full product),
            e.g. ``{"precision": ["fp32", "bf16"], "checkpointing": ["off", "every block"]}``.
        progress: show a progress bar (tqdm: a widget in a notebook with ipywidgets, else text) while it runs.
        module_depth: per-module attribution depth (off by default here).

    The baseline (no technique) always runs first. A recipe this machine
    cannot run is listed with the reason; a recipe whose step fails (out of
    memory, or any exception of the user's code, ``ValueError`` included) is
    listed with the error; the model is restored after each.

    Returns:
        a :class:`Comparison` (table ranked by peak, ``.plot()``, ``.to_dataframe()``);
        a recipe whose technique had no effect in its step (checkpointing that
        recomputed nothing, autocast that lowered no op, ...) gets a ⚠ line
        under the table and its lines in the records' ``warnings``.

    Raises:
        ValueError: bad recipes or toggles (unknown technique or value), or bad
            model/batch/optimizer/loss (vramnb's own :class:`InputError`, see
            :func:`vramnb.profile_step`), raised before anything runs or when
            the first recipe's checks fail.
    """
    todo = _recipes(recipes, toggles)
    # bad input fails before the first recipe runs; the device is known even if every recipe fails
    device = str(check_inputs(model, batch, optimizer))
    check_loss_fn(model, batch, loss_fn)
    bar = progress_bar(total=len(todo), desc="what-if", leave=False) if progress else None
    variants = []
    try:
        for r in todo:
            if bar is not None:
                bar.set_postfix_str(r.describe()[:40])
            v = Variant(r)
            try:
                v.report = profile_step(model, batch, loss_fn, optimizer, recipe=r, module_depth=module_depth)
                device = v.report.device
            except Unavailable as e:
                v.unavailable = str(e).split(": ", 1)[-1]
            except InputError:  # vramnb refusing the inputs: the same for every recipe
                raise
            except Exception as e:  # noqa: BLE001 - a failing recipe is a result, not a crash
                oom = getattr(getattr(e, "vramnb_report", None), "oom", None)
                if oom is not None:  # the post-mortem's first line and verdict, not the allocator's raw message
                    lines = oom_lines(oom)
                    v.error = lines[0] + (f"; {lines[1]}" if len(lines) > 1 and lines[1].startswith("verdict") else "")
                else:
                    v.error = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                # only the message is kept: drop the frames' locals (the failed step's graph
                # and activations), which a cycle through autograd's C++ nodes would keep alive
                traceback.clear_frames(e.__traceback__)
            variants.append(v)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    cmp = Comparison(variants, device, versions=versions(device))
    cmp.notes.append("each recipe runs 2 steps; compared: the steady-state step, so one-time costs "
                     "(first optimizer step, first-matmul workspaces, lazy CUDA loading) are left out")
    return cmp
