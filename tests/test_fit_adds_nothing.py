"""fit's table leaves out a plan whose extra techniques lower nothing (newuser8, 2026-12-04 g: on a CNN,
"checkpointing every 2nd block · 8 micro-batches" was listed with the same 8.4 GiB, 14.8 GiB and 1.47× as
"8 micro-batches", and "checkpointing every block · 8 micro-batches" as high and slower), and never picks one
as the fastest where a plan with fewer techniques is as fast."""

from __future__ import annotations

from types import SimpleNamespace

from vramnb.planner._fit import FitResult, Plan
from vramnb.techniques import Recipe

GiB = 1 << 30


def _plan(recipe: Recipe, peak: int, device: int, ratio: float) -> Plan:
    est = SimpleNamespace(peak_allocated=peak, device_memory=device, time=None)
    return Plan(recipe, est, fits=True, seconds=ratio, ratio=ratio, code=f"# {recipe.describe()}")


def test_plans_that_add_nothing_are_left_out_and_not_chosen() -> None:
    mb = _plan(Recipe(micro_batches=8), 8 * GiB, 14 * GiB, 1.47)
    ck2 = _plan(Recipe(micro_batches=8, checkpointing="every 2nd block"), 8 * GiB, 14 * GiB, 1.47)
    ck1 = _plan(Recipe(micro_batches=8, checkpointing="every block"), 8 * GiB, 14 * GiB, 1.60)
    # lower device memory: not left out, though no faster
    fp = _plan(Recipe(precision="fp16", micro_batches=4), 9 * GiB, 14 * GiB, 0.62)
    fpck = _plan(Recipe(precision="fp16", micro_batches=4, checkpointing="every block"), 9 * GiB, 11 * GiB, 0.69)
    # ck2 first among the equally fast: it was the one picked before
    fit = FitResult("T4 (16 GB)", 15 * GiB, [fp, fpck, ck2, mb, ck1], None, batch_size=64)
    over = fit.adds_nothing()
    assert over == {id(ck2): mb, id(ck1): mb}
    text = repr(fit)
    rows = [ln.strip().split("  ")[0] for ln in text.splitlines()[2:7]]
    assert ck2.recipe.describe() not in rows and ck1.recipe.describe() not in rows
    assert mb.recipe.describe() in text and fpck.recipe.describe() in rows
    assert (f"left out, their extra techniques lowering neither the peak, the device memory nor the step time of "
            f"a plan with fewer: {ck2.recipe.describe()} (no better than {mb.recipe.describe()}); "
            f"{ck1.recipe.describe()} (no better than {mb.recipe.describe()})") in text
    assert fit.best is fp
    slow = FitResult("T4 (16 GB)", 15 * GiB, [ck2, mb, ck1], None, batch_size=64)
    assert slow.best is mb and slow.code == "# 8 micro-batches"
