"""compare's one-line reasons, computed from the measured per-source deltas, with
exact bytes on CPU; compare's LoRA with the user's own settings."""

from __future__ import annotations

import pytest
import torch

from vramnb import Recipe, compare
from vramnb._units import format_bytes, format_delta

D, B, N = 256, 8, 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(D, D) for _ in range(N)])


def _loss(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).sum()


def _why(cmp, describe: str) -> str:  # type: ignore[no-untyped-def]
    rec = {r["recipe"]: r for r in cmp.to_records()}
    line = rec[describe]["reason"]
    assert isinstance(line, str) and line.startswith(describe)
    assert f"why: {line}" in repr(cmp)
    return line


def test_checkpointing_linear_blocks_saves_nothing_and_says_why() -> None:
    m = _model()
    c = compare(m, torch.randn(B, D), _loss, torch.optim.AdamW(m.parameters()),
                recipes=[{"checkpointing": "every block"}], progress=False)
    line = _why(c, "checkpointing every block")
    assert "no source changed" in line
    assert "same bytes" in line and "recomputation saves nothing" in line


def test_autocast_at_small_batch_says_the_copies_outweigh() -> None:
    m = _model()
    c = compare(m, torch.randn(B, D), _loss, torch.optim.AdamW(m.parameters()),
                recipes=[{"precision": "bf16"}], progress=False)
    line = _why(c, "bf16 autocast")
    fp32_saved = (N - 1) * B * D * 4  # each Linear but the first saves its fp32 input
    # bf16: every Linear saves its bf16 input; each but the first (whose input needs no grad) its bf16 weight
    bf16_saved = N * B * D * 2 + (N - 1) * D * D * 2
    assert f"activations after forward {format_bytes(fp32_saved)} → {format_bytes(bf16_saved)}" in line
    assert line.endswith("here the copies outweigh the low-precision activations' saving")
    assert "keeps the fp32 weights" in line


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_lora_takes_the_users_settings_and_says_why(dropout: float) -> None:
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=[str(i) for i in range(N)])
    before = repr(cfg)
    m = _model()
    c = compare(m, torch.randn(B, D), _loss, torch.optim.AdamW(m.parameters()), recipes=[{"lora": cfg}],
                progress=False)
    desc = f"LoRA r=4 alpha=8 dropout={dropout} on 0,1,2,3"
    line = _why(c, desc)
    params = N * (4 * D + D * 4) * 4  # lora_A (4×D) and lora_B (D×4), fp32
    assert f"the adapters add {format_bytes(params)} of parameters" in line
    assert f"gradients {format_delta(-N * (D * D + D) * 4)}" in line  # the frozen weights' and biases' gradients
    assert ("with dropout 0.1" in line) is bool(dropout)
    assert repr(cfg) == before  # the user's config is not changed
    v = c.variants[1]
    assert v.report is not None


def test_lora_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="valid: 'off', 'r=8'.*LoraConfig.*lora_dropout"):
        Recipe(lora={"rank": 4})
    with pytest.raises(ValueError, match="positive int"):
        Recipe(lora={"r": 0})
    with pytest.raises(ValueError, match=r"lora_dropout=1.5 must be a float in \[0, 1\)"):
        Recipe(lora={"r": 4, "lora_dropout": 1.5})
    with pytest.raises(ValueError, match="is not a valid setting"):
        Recipe(lora=4)
    assert Recipe(lora={"r": 4}) == Recipe(lora={"r": 4, "target_modules": "all-linear"})
    # module names are a set to peft: the same settings in another order are one recipe
    assert Recipe(lora={"r": 4, "target_modules": ["1", "0"]}) == Recipe(lora={"r": 4, "target_modules": ["0", "1"]})


def test_lora_on_a_peft_model_names_its_config() -> None:
    peft = pytest.importorskip("peft")
    m = peft.get_peft_model(_model(), peft.LoraConfig(r=2, lora_alpha=4, target_modules=["0"]))
    c = compare(m, torch.randn(B, D), _loss, None, recipes=[{"lora": "r=8"}], progress=False)
    v = c.variants[1]
    assert v.unavailable is not None and "r=2 alpha=4 dropout=0.0 on 0" in v.unavailable
    assert "peft_config['default']" in v.unavailable


def test_panel_says_why_against_the_first_run() -> None:
    pytest.importorskip("ipywidgets")
    import vramnb

    m = _model()
    p = vramnb.panel(m, torch.randn(B, D), _loss, torch.optim.AdamW(m.parameters()), display=False)
    p.button.click()
    p.controls["checkpointing"].value = "every block"
    p.button.click()
    newest = p.results[0]
    line = newest["reason"]
    assert line.startswith("checkpointing every block: at its peak") and "against the first run's" in line
    assert "recomputation saves nothing" in line
    assert p.results[1]["reason"] == ""
    assert f"why: {line}" in repr(p) and "vramnb-run-reason" in p.table.value


def test_combined_recipe_does_not_credit_its_whole_change_to_each_technique() -> None:
    # alone, checkpointing these Linear blocks keeps the same bytes and bf16's copies outweigh its saving;
    # together the change after forward is the recipe's: neither technique's clause may claim it as its own
    m = _model()
    c = compare(m, torch.randn(B, D), _loss, torch.optim.AdamW(m.parameters()),
                recipes=[{"checkpointing": "every block"}, {"precision": "bf16", "checkpointing": "every block"}],
                progress=False)
    alone = _why(c, "checkpointing every block")
    assert "same bytes" in alone
    both = _why(c, "bf16 autocast · checkpointing every block")
    assert "activations after forward" in both  # the recipe's own change, stated once in the head
    assert "here the inputs kept are larger" not in both and "same bytes" not in both
    assert "here the copies outweigh" not in both
    assert "blocks recompute their saved tensors in backward" in both and "autocast keeps the fp32 weights" in both
    assert "after forward)" not in both


def test_fp8_reason_does_not_claim_autocast() -> None:
    """fp8 is torchao's Float8Linear, not autocast: its why-line names what it does (the H200 run of
    2026-12-04c printed "autocast keeps the fp32 weights" for an fp8 recipe without autocast)."""
    from vramnb._reasons import _precision

    for a1 in (100, 80):
        line = _precision("fp8", 100, a1, alone=True)
        assert "autocast" not in line and "Float8Linear" in line
    assert _precision("fp8", 100, 100, alone=True).endswith("the tensors saved for backward did not change")
    assert "autocast keeps the fp32 weights" in _precision("bf16", 100, 80, alone=True)
