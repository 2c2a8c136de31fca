"""The architectures the benchmarks run: name -> make() returning (model, batch,
loss_fn), built on the given device (under ``torch.device``, so ``meta`` and
FakeTensorMode work too). ``small`` shrinks them for a quick check of a script.
"""

from __future__ import annotations

import torch
from torch import nn


def archs(device, small=False):
    """name -> make() returning (model, batch, loss_fn) on ``device`` (built there,
    under ``torch.device``: works on ``meta`` and under FakeTensorMode too)."""
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    def tiny(n):
        return max(1, n // 8) if small else n

    def gpt2():
        with torch.device(device):
            m = GPT2LMHeadModel(GPT2Config(n_layer=tiny(12)))
        ids = torch.randint(0, 50257, (8, tiny(1024)), device=device)
        return m, {"input_ids": ids, "labels": ids}, None

    def bert():
        with torch.device(device):
            m = BertForMaskedLM(BertConfig(num_hidden_layers=tiny(12)))
        ids = torch.randint(0, 30522, (16, tiny(512)), device=device)
        return m, {"input_ids": ids, "labels": ids}, None

    def llama():
        cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=tiny(8), num_attention_heads=16,
                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
        with torch.device(device):
            m = LlamaForCausalLM(cfg)
        ids = torch.randint(0, 32000, (8, tiny(1024)), device=device)
        return m, {"input_ids": ids, "labels": ids}, None

    def ce(mm, b):
        return nn.functional.cross_entropy(mm(b[0]), b[1])

    def vision(ctor, batch=32):
        def make():
            with torch.device(device):
                m = ctor(num_classes=1000)
            x = torch.randn(tiny(batch), 3, 224, 224, device=device)
            y = torch.randint(0, 1000, (tiny(batch),), device=device)
            return m, (x, y), ce
        return make

    class LSTMLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32000, 1024)
            self.rnn = nn.LSTM(1024, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 32000)

        def forward(self, ids):
            return self.head(self.rnn(self.emb(ids))[0])

    def lstm():
        with torch.device(device):
            m = LSTMLM()
        ids = torch.randint(0, 32000, (tiny(32), 256), device=device)
        return m, ids, lambda mm, b: nn.functional.cross_entropy(mm(b).flatten(0, 1), b.flatten())

    def mlp():
        with torch.device(device):
            m = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 1000))
        x = torch.randn(tiny(512), 4096, device=device)
        y = torch.randint(0, 1000, (tiny(512),), device=device)
        return m, (x, y), ce

    out = {"gpt2-small": gpt2, "bert-base": bert, "llama-gqa": llama, "lstm-lm": lstm, "mlp": mlp}
    try:
        import torchvision

        out.update({"resnet50": vision(torchvision.models.resnet50), "vit-b-16": vision(torchvision.models.vit_b_16),
                    "convnext-tiny": vision(torchvision.models.convnext_tiny)})
    except ImportError:
        pass
    return out
