"""profile_step and compare on models from the libraries users bring (diffusers,
PyG, transformers, peft, timm): afterwards the state dict is bitwise equal, the
config is whole (diffusers' FrozenDict refuses updates), hooks, training flags
and submodules are the same objects (issue 28 item 17). Each test skips where
its library is not installed."""

from __future__ import annotations

import json

import pytest
import torch

import vramnb


def _record(model):
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "modules": [(n, m, m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks))
                        for n, m in model.named_modules()],
            "grads": [p.grad for p in model.parameters()],
            "flags": [p.requires_grad for p in model.parameters()]}


def _check(model, before):
    after = _record(model)
    assert before["state"].keys() == after["state"].keys()
    for k, v in before["state"].items():
        assert v.dtype == after["state"][k].dtype
        assert torch.equal(v.view(torch.uint8) if v.dtype.is_floating_point else v,
                           after["state"][k].view(torch.uint8) if v.dtype.is_floating_point else after["state"][k]), k
    assert len(before["modules"]) == len(after["modules"])
    for (n, m, tr, fh, ph), (n2, m2, tr2, fh2, ph2) in zip(before["modules"], after["modules"]):
        assert n == n2 and m is m2 and tr == tr2 and fh == fh2 and ph == ph2
    assert all(a is b for a, b in zip(before["grads"], after["grads"]))
    assert before["flags"] == after["flags"]


def _profile_and_compare(model, batch, loss):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    before = _record(model)
    vramnb.profile_step(model, batch, loss, opt)
    _check(model, before)
    cmp = vramnb.compare(model, batch, loss, opt, recipes=[{}, {"checkpointing": "every block"}],
                         progress=False)
    _check(model, before)
    assert cmp.device == "cpu"
    assert len(opt.state) == 0
    return cmp


def _diffusers_check(model, batch, loss, tmp_path):
    config = dict(model.config)
    internal = model._internal_dict
    _profile_and_compare(model, batch, loss)
    assert model._internal_dict is internal
    assert dict(model.config) == config
    model.save_pretrained(tmp_path)
    again = type(model).from_pretrained(tmp_path)
    # JSON turns tuples into lists; the reloaded config may add private keys (_class_name, ...)
    def public(c):
        return json.loads(json.dumps({k: v for k, v in c.items() if not k.startswith("_")}))

    assert {k: v for k, v in public(again.config).items() if k in config} == public(config)
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_diffusers_unet2d(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 8),
                                  layers_per_block=1, norm_num_groups=4,
                                  down_block_types=("DownBlock2D", "DownBlock2D"),
                                  up_block_types=("UpBlock2D", "UpBlock2D"))
    batch = (torch.randn(2, 1, 8, 8), torch.tensor([1, 2]))
    _diffusers_check(model, batch, lambda m, b: m(b[0], b[1]).sample.pow(2).mean(), tmp_path)


def test_diffusers_unet2d_condition(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 8), layers_per_block=1,
        norm_num_groups=4, cross_attention_dim=8, attention_head_dim=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    batch = (torch.randn(2, 1, 8, 8), torch.tensor([1, 2]), torch.randn(2, 3, 8))
    _diffusers_check(model, batch, lambda m, b: m(b[0], b[1], b[2]).sample.pow(2).mean(), tmp_path)


def test_diffusers_autoencoder_kl(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.AutoencoderKL(in_channels=1, out_channels=1, block_out_channels=(8,), latent_channels=2,
                                    norm_num_groups=4, layers_per_block=1)
    _diffusers_check(model, torch.randn(2, 1, 8, 8), lambda m, b: m(b).sample.pow(2).mean(), tmp_path)


def test_pyg_layers():
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gat = pyg.GATConv(4, 8, heads=2)
            self.gcn = pyg.GCNConv(16, 3, cached=True)

        def forward(self, x, edge_index):
            return self.gcn(self.gat(x, edge_index).relu(), edge_index)

    model = Net()
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    _profile_and_compare(model, (torch.randn(5, 4), edge_index), lambda m, b: m(*b).pow(2).mean())
    assert model.gcn._cached_edge_index is None  # the cache the step filled is gone


def test_transformers_model_keeps_its_configs():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    config, gen = model.config.to_dict(), model.generation_config.to_dict()
    ids = torch.randint(0, 64, (2, 8))
    _profile_and_compare(model, {"input_ids": ids, "labels": ids}, None)
    assert model.config.to_dict() == config and model.generation_config.to_dict() == gen


def test_peft_lora_model():
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=64, n_positions=16)
    model = peft.get_peft_model(transformers.GPT2LMHeadModel(cfg), peft.LoraConfig(r=2, target_modules=["c_attn"]))
    peft_config = model.peft_config["default"].to_dict()
    ids = torch.randint(0, 64, (2, 8))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    before = _record(model)
    vramnb.profile_step(model, {"input_ids": ids, "labels": ids}, None, opt)
    _check(model, before)
    assert model.peft_config["default"].to_dict() == peft_config


def test_timm_model():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("resnet10t", num_classes=3, pretrained=False)
    _profile_and_compare(model, torch.randn(2, 3, 32, 32), lambda m, b: m(b).pow(2).mean())
