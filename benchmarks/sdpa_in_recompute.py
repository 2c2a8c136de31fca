"""Which SDPA kernel runs in a checkpointed region's recomputation, against the forward (CUDA).

Mistral-shaped attention (batch 8, 12 query heads, 4 key/value heads, 1024 positions, head 64,
fp32, causal, ``enable_gqa=True``), run through ``torch.utils.checkpoint`` (non-reentrant):
the ATen attention operators the profiler sees in the forward and in backward, each counted.

    python benchmarks/sdpa_in_recompute.py
"""

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

dev = "cuda"
q = torch.randn(8, 12, 1024, 64, device=dev, requires_grad=True)
k = torch.randn(8, 4, 1024, 64, device=dev, requires_grad=True)
v = torch.randn(8, 4, 1024, 64, device=dev, requires_grad=True)


def attn(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


for label, fn in (("plain", lambda: attn(q, k, v)),
                  ("checkpointed", lambda: checkpoint(attn, q, k, v, use_reentrant=False))):
    for phase in ("forward", "backward"):
        out = fn() if phase == "backward" else None
        with profile(activities=[ProfilerActivity.CPU]) as p:
            if phase == "forward":
                out = fn()
            else:
                out.sum().backward()
        names = {e.key: e.count for e in p.key_averages() if "attention" in e.key or "softmax" in e.key}
        print(label, phase, names, flush=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
