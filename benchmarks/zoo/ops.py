"""Single operators in a minimal trainable module, over the flags that decide their CUDA kernel.

The op-level conformance of the predictions issue: each case is one operator (attention,
recurrent layers, convolutions, normalisation, embeddings, a large-vocabulary loss) between two
small linear maps, so that a step's memory is the operator's (its saved tensors, outputs,
workspaces). Flags: dtype (by recipe: fp32, bf16 autocast, fp16 autocast), causal, dropout,
grouped-query heads, masks, head size; layers, direction; kernel sizes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Case

ALL = ["fp32", "bf16", "fp16-scaler"]


class Attention(nn.Module):
    """Projections, then ``scaled_dot_product_attention`` (or the matmul-softmax path of
    models that do not use SDPA: T5, older BERTs), then an output projection."""

    def __init__(self, d=1024, heads=16, kv_heads=16, causal=False, dropout=0.0, mask=None, gqa="sdpa",
                 sdpa=True, bias=False):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.causal, self.p, self.mask, self.gqa, self.sdpa = causal, dropout, mask, gqa, sdpa
        self.bias = nn.Parameter(torch.zeros(1, heads, 1, 1)) if bias else None

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        gqa = {}
        if self.kv != self.h:
            if self.gqa == "repeat":  # Hugging Face's repeat_kv
                n = self.h // self.kv
                k = k[:, :, None].expand(b, self.kv, n, t, self.hd).reshape(b, self.h, t, self.hd)
                v = v[:, :, None].expand(b, self.kv, n, t, self.hd).reshape(b, self.h, t, self.hd)
            else:
                gqa = {"enable_gqa": True}
        mask = None
        if self.mask == "bool":
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        elif self.mask == "float":
            mask = torch.zeros(b, 1, t, t, dtype=q.dtype, device=x.device)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0,
                                               is_causal=self.causal, **gqa)
        else:  # T5's attention: scores, an additive position bias, softmax in fp32, dropout
            s = torch.matmul(q, k.transpose(3, 2))
            if self.bias is not None:
                s = s + self.bias
            w = F.softmax(s.float(), dim=-1).type_as(s)
            w = F.dropout(w, p=self.p, training=self.training)
            y = torch.matmul(w, v)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class Recurrent(nn.Module):
    def __init__(self, kind="LSTM", d=512, layers=2, bidirectional=False):
        super().__init__()
        self.rnn = getattr(nn, kind)(d, d, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(d * (2 if bidirectional else 1), d)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class Conv(nn.Module):
    def __init__(self, dims=3, c=64, k=3, stride=1, groups=1, norm=False):
        super().__init__()
        conv = nn.Conv3d if dims == 3 else nn.Conv2d
        bn = nn.BatchNorm3d if dims == 3 else nn.BatchNorm2d
        self.stem = conv(3, c, 3, padding=1)
        self.conv = conv(c, c, k, stride=stride, padding=k // 2, groups=groups)
        self.norm = bn(c) if norm else nn.Identity()

    def forward(self, x):
        return self.norm(self.conv(F.relu(self.stem(x))))


class Vocab(nn.Module):
    def __init__(self, vocab=151936, d=896):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.emb(ids))


def _x(shape):
    def make(bs, device):
        g = torch.Generator().manual_seed(0)
        return torch.randn(bs, *shape, generator=g).to(device)
    return make


def _sum_loss(m, b):
    return m(b).float().pow(2).mean()


def _ce_loss(m, b):
    logits = m(b)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), b.reshape(-1))


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name, build, batch, bs, recipes=ALL, loss=_sum_loss, family="op"):
        out.append(Case(f"op/{name}", family, build, batch, loss, batch_size=bs, cpu_batch_size=1,
                        recipe_list=list(recipes)))

    seq = _x((1024, 1024))
    for causal in (False, True):
        for p in (0.0, 0.1):
            tag = f"sdpa_{'causal' if causal else 'full'}_p{p}"
            add(tag, lambda c=causal, p=p: Attention(causal=c, dropout=p), seq, 8)
    add("sdpa_gqa_causal", lambda: Attention(kv_heads=4, causal=True), seq, 8)
    add("sdpa_gqa_repeat_causal", lambda: Attention(kv_heads=4, causal=True, gqa="repeat"), seq, 8)
    add("sdpa_gqa_causal_p0.1", lambda: Attention(kv_heads=4, causal=True, dropout=0.1), seq, 8)
    add("sdpa_mask_bool", lambda: Attention(mask="bool"), seq, 8)
    add("sdpa_mask_float", lambda: Attention(mask="float"), seq, 8)
    add("sdpa_mask_float_p0.1", lambda: Attention(mask="float", dropout=0.1), seq, 8)
    add("sdpa_head128_causal", lambda: Attention(heads=8, kv_heads=8, causal=True), seq, 8)
    add("sdpa_head256_full", lambda: Attention(heads=4, kv_heads=4), seq, 8)
    add("matmul_softmax_attention", lambda: Attention(sdpa=False), seq, 4)
    add("matmul_softmax_attention_bias_p0.1", lambda: Attention(sdpa=False, bias=True, dropout=0.1), seq, 4)
    for kind in ("LSTM", "GRU", "RNN"):
        for layers, bi in ((1, False), (2, False), (2, True)):
            add(f"{kind.lower()}_l{layers}{'_bi' if bi else ''}", lambda k=kind, n=layers, b=bi: Recurrent(k, 512, n, b),
                _x((256, 512)), 32)
    for k, stride in ((3, 1), (1, 1), (3, 2)):
        add(f"conv3d_k{k}_s{stride}", lambda k=k, s=stride: Conv(3, 64, k, s), _x((3, 16, 112, 112)), 8)
    add("conv3d_bn", lambda: Conv(3, 64, 3, 1, norm=True), _x((3, 16, 112, 112)), 8)
    add("conv2d_k3", lambda: Conv(2, 128, 3), _x((3, 224, 224)), 32)
    add("conv2d_k7_s2", lambda: Conv(2, 128, 7, 2), _x((3, 224, 224)), 32)
    add("conv2d_depthwise", lambda: Conv(2, 128, 3, 1, groups=128), _x((3, 224, 224)), 32)
    add("conv2d_bn", lambda: Conv(2, 128, 3, 1, norm=True), _x((3, 224, 224)), 32)

    def ids(bs, device):
        return torch.randint(0, 151936, (bs, 1024), generator=torch.Generator().manual_seed(0)).to(device)
    add("vocab151936_ce", Vocab, ids, 4, loss=_ce_loss)
    add("layer_norm", lambda: nn.Sequential(nn.Linear(1024, 1024), nn.LayerNorm(1024), nn.Linear(1024, 1024)),
        seq, 16)
    add("rms_norm_gelu", lambda: nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024),
                                               nn.RMSNorm(1024) if hasattr(nn, "RMSNorm") else nn.LayerNorm(1024)),
        seq, 16)
    add("embedding_bag_free", lambda: nn.Sequential(nn.Linear(1024, 1024), nn.Dropout(0.1), nn.Linear(1024, 1024)),
        seq, 16)
    return out


def describe() -> str:  # for the results table
    return "; ".join(c.name for c in cases())


_ = math  # noqa: F841
