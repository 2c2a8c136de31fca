"""The blocks activation checkpointing, freezing and the sharded what-if work on: the repeated blocks
of every stack of the model, the encoder's and the decoder's (issue 28: only nn.Transformer's encoder
layers were found, the longest list), and not the parts inside a block (a MoE layer's experts,
attention heads) nor two heads beside a 12-layer stack."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import vramnb
from vramnb import Recipe
from vramnb.techniques.checkpointing import find_blocks


def _transformer():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested-tensor notice about batch_first
        return nn.Transformer(d_model=32, nhead=2, num_encoder_layers=3, num_decoder_layers=2, dim_feedforward=64)


def test_pytorch_transformer_blocks_are_both_stacks_encoder_first():
    m = _transformer()
    assert find_blocks(m) == [*m.encoder.layers, *m.decoder.layers]


def test_hugging_face_encoder_decoders_from_config():
    transformers = pytest.importorskip("transformers")
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        d_model=32, d_ff=64, num_layers=3, num_decoder_layers=2, num_heads=2, d_kv=8, vocab_size=100))
    assert find_blocks(t5) == [*t5.encoder.block, *t5.decoder.block]
    bart = transformers.BartForConditionalGeneration(transformers.BartConfig(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100))
    assert find_blocks(bart) == [*bart.model.encoder.layers, *bart.model.decoder.layers]
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=3, n_head=2, vocab_size=100))
    assert find_blocks(gpt2) == list(gpt2.transformer.h)  # one stack: as before


class _Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)


class _MoELayer(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.experts = nn.ModuleList([_Expert() for _ in range(experts)])
        self.norm = nn.LayerNorm(8)


class _Stage(nn.Module):
    def __init__(self, down):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.downsample = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)) if down else None


def test_parts_inside_blocks_are_not_blocks():
    moe = nn.Module()
    moe.layers = nn.ModuleList([_MoELayer(16) for _ in range(3)])  # more experts per layer than layers
    assert find_blocks(moe) == list(moe.layers)
    net = nn.Module()
    net.body = nn.Sequential(*[_MoELayer(2) for _ in range(12)])
    net.heads = nn.ModuleList([nn.Linear(8, 2), nn.Linear(8, 3)])  # a pair of heads beside 12 layers
    assert find_blocks(net) == list(net.body)


def test_stacks_of_stacks_take_the_level_with_more_entries():
    stages = nn.Sequential(*[nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)]) for _ in range(2)])
    assert find_blocks(stages) == [*stages[0], *stages[1]]  # 2 stages of 5 blocks: the 10 blocks
    mlps = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)) for _ in range(8)])
    assert find_blocks(mlps) == list(mlps)  # 8 blocks of two Linears each: the 8 blocks


def test_residual_stages_of_different_lengths_are_all_found_in_order():
    net = nn.Module()
    for i, n in enumerate([3, 4, 6, 3]):  # ResNet-50's stages, each opening with a downsampling block
        setattr(net, f"layer{i + 1}", nn.Sequential(_Stage(True), *[_Stage(False) for _ in range(n - 1)]))
    net.fc = nn.Linear(4, 10)
    assert find_blocks(net) == [*net.layer1, *net.layer2, *net.layer3, *net.layer4]


def test_checkpointing_every_block_of_a_transformer_recomputes_the_decoder_too():
    """The step with every block checkpointed keeps fewer activations than the step with the encoder's
    blocks only (and no checkpointing without effect is reported)."""
    m = _transformer()
    src, tgt = torch.randn(16, 4, 32), torch.randn(12, 4, 32)

    def loss_fn(model, batch):
        return model(*batch).square().mean()

    enc = vramnb.profile_step(m, (src, tgt), loss_fn, None, steps=1,
                              recipe=Recipe(checkpointing="every block", blocks="encoder.layers"))
    both = vramnb.profile_step(m, (src, tgt), loss_fn, None, steps=1, recipe=Recipe(checkpointing="every block"))
    assert both.steady.peak.sources["activations"] < enc.steady.peak.sources["activations"]
    assert not [w for w in both.warnings if "checkpoint" in w], both.warnings
