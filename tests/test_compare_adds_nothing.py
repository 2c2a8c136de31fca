"""compare says where a recipe's extra settings change nothing at the peak (newuser8, 2026-12-04 g: on T5,
"frozen: all but the last block · LoRA r=8" was identical to "LoRA r=8" alone, and its 'why' credited the freeze
with LoRA's savings a second time)."""

from __future__ import annotations

import torch
from torch import nn

import vramnb
from vramnb.techniques import Recipe


def test_a_freeze_under_lora_adds_nothing_and_is_not_credited() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters())
    lora, both = Recipe(lora="r=8"), Recipe(lora="r=8", freeze="all but the last block")
    cmp = vramnb.compare(model, torch.randn(8, 32), lambda m, b: m(b).mean(), opt, recipes=[Recipe(), lora, both],
                         progress=False)
    by = {v.recipe.describe(): v for v in cmp.variants}
    v_lora, v_both = by[lora.describe()], by[both.describe()]
    assert v_lora.peak == v_both.peak and v_both.peak is not None
    assert [(a.recipe.describe(), b.recipe.describe()) for a, b in cmp.adds_nothing()] == \
        [(both.describe(), lora.describe())]
    text = str(cmp)
    assert (f"{both.describe()}: the same peak as {lora.describe()}: frozen: all but the last block adds nothing "
            "at the peak here") in text
    why = cmp.reason(v_both)
    assert why.startswith(both.describe() + ": ") and "frozen parameters get no gradient" not in why
    assert why[len(both.describe()):] == cmp.reason(v_lora)[len(lora.describe()):]


def test_recipe_extends_is_the_one_rule_compare_and_fit_share() -> None:
    from vramnb.techniques import Recipe

    base, bf16 = Recipe(), Recipe(precision="bf16")
    both = Recipe(precision="bf16", optimizer="SGD")
    assert both.extends(bf16) and both.extends(base) and bf16.extends(base)
    assert not bf16.extends(both) and not bf16.extends(Recipe(precision="bf16"))  # not itself
    assert not Recipe(precision="fp16", optimizer="SGD").extends(bf16)  # another value is not "more"
