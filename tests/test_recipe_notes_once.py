"""A technique says what it did once (newuser8, 2026-12-04 g: an estimate of a Hugging Face model with
checkpointing printed "checkpointing every block: Qwen2ForCausalLM's own activation_checkpointing_enable()" and
then a bare "checkpointing every block")."""

from __future__ import annotations

import pytest
import torch

import vramnb
from vramnb.techniques import Recipe

transformers = pytest.importorskip("transformers")


def test_hf_checkpointing_is_said_once_with_how() -> None:
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 128, (2, 8))
    est = vramnb.estimate(model, {"input_ids": ids, "labels": ids}, None, lambda p: torch.optim.AdamW(p),
                          recipe=Recipe(checkpointing="every block"), device="cpu")
    said = [n for n in est.notes if n.startswith("checkpointing every block")]
    assert said == ["checkpointing every block: LlamaForCausalLM's own "
                    f"{'activation' if hasattr(model, 'activation_checkpointing_enable') else 'gradient'}"
                    "_checkpointing_enable()"], est.notes


def test_a_plain_technique_is_still_said() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    est = vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).mean(), lambda p: torch.optim.SGD(p, lr=0.1),
                          recipe=Recipe(micro_batches=2), device="cpu")
    assert [n for n in est.notes if n.startswith("2 micro-batches")] == ["2 micro-batches"], est.notes
