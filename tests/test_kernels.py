"""The CUDA kernels' own memory in estimates (vramnb/predict/_kernels.py), pinned to the
op-level measurements of benchmarks/results/2026-12-01-h200-run13-zoo-ops (H200, torch 2.11).

Each modelled divergence gets its bytes pinned on the CPU: a model whose peak is the
operator's, estimated with the rule and without it, differs by exactly the rule's bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vramnb
from vramnb.predict import _kernels as K
from vramnb.predict._allocator import round_size
from vramnb.predict._cuda_model import LIBRARY_MEMORY, outside_pytorch

MiB = 1 << 20


def _peak(model, batch, loss_fn, **kw):
    return vramnb.estimate(model, batch, loss_fn, target="H200", steps=1, **kw).steps[0].peak.allocated


def test_softmax_backward_holds_a_gradient_sized_temporary(monkeypatch):
    # measured: _softmax_backward_data of f32[4, 16, 1024, 1024] held 256 MiB more than its output
    model, x = nn.Linear(1024, 1024), torch.randn(64, 1024, 1024)

    def loss(m, b):
        return m(b).softmax(-1).sum()
    with_rule = _peak(model, x, loss)
    monkeypatch.delitem(K.TRANSIENT, torch.ops.aten._softmax_backward_data.default)
    assert with_rule - _peak(model, x, loss) == 64 * 1024 * 1024 * 4


def test_conv_workspace_is_input_plus_output(monkeypatch):
    # measured (cuDNN 9, NCHW): f32[32, 128, 224, 224] 3x3 forward held 1568.6 MiB = input + output
    x = torch.empty(2, 128, 56, 56)
    w = torch.empty(128, 128, 3, 3)
    out = torch.empty(2, 128, 56, 56)
    conv = torch.ops.aten.convolution.default
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert K._conv_workspace(conv, args, None, out) == 2 * 2 * 128 * 56 * 56 * 4
    pointwise = (x, torch.empty(128, 128, 1, 1), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    depthwise = (x, torch.empty(128, 1, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 128)
    assert K._conv_workspace(conv, pointwise, None, out) == 0  # measured 0 (1x1x1 forward)
    assert K._conv_workspace(conv, depthwise, None, out) == 0  # measured 0
    # the rule reaches the estimate: a convolution's forward, at the step's peak, holds input + output more
    model, batch = nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.randn(8, 64, 128, 128)

    def loss(m, b):
        return m(b).sum()
    conv_ops = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)
    for op in [op for op in K.TRANSIENT if op not in conv_ops]:  # the convolution's rule alone
        monkeypatch.delitem(K.TRANSIENT, op)
    with_rule = _peak(model, batch, loss)
    monkeypatch.delitem(K.TRANSIENT, torch.ops.aten.convolution.default)
    monkeypatch.delitem(K.TRANSIENT, torch.ops.aten.convolution_backward.default)
    without = _peak(model, batch, loss)
    # (without the workspace the peak moves to a point where a 512-byte block more is alive)
    assert with_rule - without in (2 * round_size(8 * 64 * 128 * 128 * 4), 2 * round_size(8 * 64 * 128 * 128 * 4) - 512)


@pytest.mark.parametrize("shape, dims, dtype, measured", [
    # the reduction's bytes beyond its output (run 15, H200: peak during the operator - before - output),
    # where the allocator split the block exactly (a remainder under 1 MiB stays in the block)
    ((25216, 1024), [0], torch.bfloat16, 138412032),  # a ViT's fc1 bias gradient: 132.0 MiB
    ((24000, 1024), [0], torch.bfloat16, 138412032),  # Whisper's: 132.0 MiB whatever the rows
    ((8192, 8192), [0], torch.float32, 138412032),  # 132.0 MiB
    ((128, 197, 256), [0], torch.float32, 0),  # 50432 outputs: each block sums whole outputs (measured 0 B)
    ((16, 1024, 1024), [2], torch.float32, 0),  # along the contiguous dimension (measured 0 B)
])
def test_reduction_staging_buffer_follows_reduce_cuh(shape, dims, dtype, measured):
    size, semaphores = K.reduction_staging_bytes(torch.empty(shape, dtype=dtype), dims, 4, (132, 2048))
    assert size == measured
    assert (semaphores > 0) == (size > 0)


def test_bias_gradient_holds_the_reduction_staging_buffer(monkeypatch):
    # a Linear's bias gradient grad.sum(0) over 4096 rows, 1024 outputs: 32 MiB of staging on an H200 (the
    # formula; 132 MiB measured over 25216 rows), alive during the sum, where this step peaks
    model, x = nn.Linear(256, 1024), torch.randn(4096, 256)

    def loss(m, b):
        return m(b).relu().mean()
    staging, semaphores = K.reduction_staging_bytes(torch.empty(4096, 1024), [0], 4, (132, 2048))
    assert (staging, semaphores) == (32 * MiB, 32)
    with_rule = _peak(model, x, loss)
    monkeypatch.delitem(K.TRANSIENT, torch.ops.aten.sum.dim_IntList)
    assert with_rule - _peak(model, x, loss) == round_size(staging) + round_size(semaphores)
    # fewer multiprocessors, a smaller buffer (the formula, not measured): an RTX 3060's 28 SMs of 1536 threads
    assert K.reduction_staging_bytes(torch.empty(25216, 1024), [0], 4, (28, 1536))[0] == 4 * 1024 * 42 * 32 * 4


@pytest.mark.parametrize("mode, layers, bidirectional, dtype, measured", [
    # reserve bytes of _cudnn_rnn, B=32, T=256, H=512 (run 13)
    ("lstm", 1, False, torch.float32, 83886336), ("lstm", 2, False, torch.float32, 184549632),
    ("lstm", 2, True, torch.float16, 184549632), ("gru", 1, False, torch.float16, 50331904),
    ("gru", 2, True, torch.float32, 436207872), ("rnn_tanh", 2, False, torch.float32, 50331904),
    ("rnn_tanh", 2, True, torch.float16, 50331904),
])
def test_rnn_reserve_matches_measured_cudnn(mode, layers, bidirectional, dtype, measured):
    d = 2 if bidirectional else 1
    assert K.rnn_reserve_bytes(mode, layers, d, 32, 256, 512, dtype) == measured


def test_lstm_runs_as_one_cudnn_kernel_with_its_reserve():
    torch.manual_seed(0)
    lstm = nn.LSTM(64, 128, num_layers=2, batch_first=True)
    x = torch.randn(8, 50, 64)
    est = vramnb.estimate(lstm, x, lambda m, b: m(b)[0].sum(), target="H200", steps=1)
    assert est.backends == {"cudnn rnn": 1}
    reserve = round_size(K.rnn_reserve_bytes("lstm", 2, 1, 8, 50, 128, torch.float32))
    out = round_size(8 * 50 * 128 * 4)
    # what forward keeps for backward: the reserve and the output (the input is the batch)
    assert est.steps[0].marks[1][1].sources["activations"] == reserve + out + 2 * round_size(2 * 8 * 128 * 4)
    assert "cudnn" in est.notes[-1] or est.outside_pytorch == outside_pytorch(est.target.context, {"cudnn"})


def test_lstm_under_autocast_runs_in_fp16_on_a_flat_copy_of_the_weights():
    lstm = nn.LSTM(64, 128, batch_first=True)
    x = torch.randn(8, 50, 64)

    def loss(m, b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return m(b)[0].float().sum()
    est = vramnb.estimate(lstm, x, loss, target="H200", steps=1)
    n = sum(p.numel() for p in lstm.parameters())
    acts = est.steps[0].marks[1][1].sources["activations"]
    fp16 = (round_size(2 * n) + round_size(K.rnn_reserve_bytes("lstm", 1, 1, 8, 50, 128, torch.float16))
            + round_size(8 * 50 * 64 * 2))  # the flat fp16 weights, the reserve, the fp16 input
    assert acts >= fp16


def test_grouped_query_attention_keeps_keys_unexpanded_on_hopper():
    def attention(kv_heads):
        class A(nn.Module):
            def __init__(self):
                super().__init__()
                self.q, self.kv = nn.Linear(512, 512), nn.Linear(512, 2 * kv_heads * 64)

            def forward(self, x):
                b, t, _ = x.shape
                q = self.q(x).view(b, t, 8, 64).transpose(1, 2)
                k, v = self.kv(x).view(b, t, 2, kv_heads, 64).permute(2, 0, 3, 1, 4)
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != 8)
        return A()

    x = torch.randn(4, 256, 512)

    def loss(m, b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return m(b).float().sum()
    gqa = vramnb.estimate(attention(2), x, loss, target="H200", steps=1)
    assert gqa.backends == {"cudnn": 1}
    acts = gqa.steps[0].marks[1][1].sources["activations"]
    mha = vramnb.estimate(attention(8), x, loss, target="H200", steps=1).steps[0].marks[1][1].sources["activations"]
    # the saved keys and values of 2 heads instead of 8: 6 heads x (k, v) fewer, in bf16
    assert mha - acts == 2 * 6 * round_size(4 * 256 * 64 * 2) // 2 or mha > acts


def test_outside_pytorch_counts_the_libraries_a_step_uses():
    conv = vramnb.estimate(nn.Conv2d(3, 8, 3), torch.randn(2, 3, 32, 32), lambda m, b: m(b).sum(), target="H200")
    assert conv.outside_pytorch == conv.target.context + LIBRARY_MEMORY["cudnn"]  # no matmul: no cuBLAS
    mlp = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), lambda m, b: m(b).sum(), target="H200")
    assert mlp.outside_pytorch == mlp.target.context + LIBRARY_MEMORY["cublas:forward"] + LIBRARY_MEMORY["cublas:backward"]


@pytest.mark.parametrize("norm", [nn.LayerNorm(64), nn.GroupNorm(4, 64)])
def test_norm_statistics_of_a_16_bit_input_with_fp32_weights_are_fp32_on_the_cpu(norm):
    # CPU autocast feeds a bf16 activation to an fp32-weighted norm (torchvision's Swin in bf16)
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.norm = nn.Linear(64, 64), norm

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.lin(x)
            return self.norm(h if isinstance(self.norm, nn.LayerNorm) else h.transpose(1, 2)).float().pow(2).mean()

    torch.manual_seed(0)
    m, x = M(), torch.randn(8, 128, 64)
    est = vramnb.estimate(m, x, lambda m, b: m(b), device="cpu", steps=1)
    real = vramnb.profile_step(m, x, lambda m, b: m(b), steps=1)
    def sources(r):  # 'other' is the process's own leftovers (a real run's 512-byte scalars), not the step
        return {k: v for k, v in r.steps[0].peak.sources.items() if k != "other"}
    assert sources(est) == sources(real)


def test_cudnn_attention_output_follows_the_query_layout():
    # alloc_with_matching_layout (sdp_utils.h): the output's dimensions in the order of q's strides.
    # Measured (Whisper, bf16, run 15): a query made contiguous in [B, H, L, D] gave an output that
    # `.transpose(1, 2).contiguous()` then copied: 11.7 MiB more kept per encoder layer
    q = torch.empty(2, 4, 16, 8, dtype=torch.bfloat16)  # contiguous [B, H, L, D]
    assert K._matching_layout(q, (2, 4, 16, 8)).is_contiguous()
    qt = torch.empty(2, 16, 4, 8, dtype=torch.bfloat16).transpose(1, 2)  # [B, L, H, D] storage
    out = K._matching_layout(qt, (2, 4, 16, 8))
    assert out.stride() == qt.stride() and not out.is_contiguous()

    class A(nn.Module):
        def __init__(self, contiguous):
            super().__init__()
            self.qkv, self.o, self.contiguous = nn.Linear(256, 3 * 256), nn.Linear(256, 256), contiguous

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (y.view(b, t, 4, 64).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
            if self.contiguous:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous().view(b, t, 256)
            return self.o(y)

    x = torch.randn(8, 512, 256)

    def loss(m, b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return m(b).float().sum()
    acts = {c: vramnb.estimate(A(c), x, loss, target="H200", steps=1).steps[0].marks[1][1].sources["activations"]
            for c in (False, True)}
    # contiguous q, k, v: their copies are kept instead of the qkv projection (which they free: +-0); the
    # output, now [B, H, L, D], is copied by .contiguous() and the copy kept by the output Linear, besides the
    # output attention keeps (with a [B, L, H, D] query both are one tensor): one copy more
    assert acts[True] - acts[False] == round_size(8 * 512 * 256 * 2)
