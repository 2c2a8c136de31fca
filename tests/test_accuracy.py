"""How sure an estimate is (issue 12, item 4): the kinds of a step, the expected error
from the zoo benchmark's table, and max_batch_size's safe margin. On CPU: fake tensors
and the CUDA model; the table is passed in (monkeypatched), never the shipped one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb
from vramnb.predict import _accuracy
from vramnb.predict._accuracy import ROUNDING, expected_error, safe_margin

F = nn.functional
MiB = 1 << 20


def _kinds(model, batch, loss_fn=None, recipe=None):
    e = vramnb.estimate(model, batch, loss_fn or (lambda m, b: m(b).float().pow(2).mean()),
                        lambda p: torch.optim.AdamW(p), target="H100", recipe=recipe)
    return e.expected_error.kinds


class _LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class _MatmulAttention(nn.Module):
    """Attention written out, as T5 does: matmul, a bias, softmax in fp32, matmul."""

    def __init__(self, d=16, h=2):
        super().__init__()
        self.h, self.qkv, self.out = h, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.bias = nn.Parameter(torch.zeros(h, 1, 1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.transpose(1, 2) for y in self.qkv(x).view(b, t, 3, self.h, d // self.h).unbind(2))
        w = torch.matmul(q, k.transpose(-1, -2)) + self.bias
        w = F.softmax(w.float(), dim=-1).type_as(w)
        return self.out(torch.matmul(w, v).transpose(1, 2).reshape(b, t, d))


class _MoE(nn.Module):
    """Top-2 routing over 4 identical experts, the gates scattered into a dense weight."""

    def __init__(self, d=16, n=4):
        super().__init__()
        self.gate = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d)) for _ in range(n))

    def forward(self, x):
        p = self.gate(x).softmax(-1)
        top, idx = p.topk(2, dim=-1)
        w = torch.zeros_like(p).scatter(-1, idx, top)
        return sum(w[..., i:i + 1] * e(x) for i, e in enumerate(self.experts))


class _Stack(nn.Module):
    """4 identical layers and a top-k in the loss: no routing, not a mixture of experts."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_kinds_come_from_what_the_step_contains():
    assert _kinds(_LSTM(), torch.randn(2, 5, 8)) == ("rnn/fp32",)
    assert _kinds(_LSTM(), torch.randn(2, 5, 8), recipe={"precision": "bf16"}) == ("rnn/16-bit",)
    assert _kinds(nn.Sequential(nn.Conv3d(3, 4, 3), nn.ReLU()), torch.randn(2, 3, 6, 6, 6)) == ("conv3d/fp32",)
    assert _kinds(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), torch.randn(2, 3, 6, 6),
                  recipe={"precision": "bf16"}) == ("convolutional/16-bit",)
    sdpa = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)  # need_weights=False: through SDPA
    assert _kinds(sdpa, torch.randn(2, 5, 16)) == ("sdpa/fp32",)

    class Causal(nn.Module):  # a decoder's attention: every call causal, in a fused kernel
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(32, 96)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)

    assert _kinds(Causal(), torch.randn(2, 6, 32)) == ("sdpa-causal/fp32",)
    assert _kinds(Causal(), torch.randn(2, 6, 32), recipe={"precision": "bf16"}) == ("sdpa-causal/16-bit",)
    assert _kinds(_MatmulAttention(), torch.randn(2, 5, 16)) == ("matmul-attention/fp32",)
    assert _kinds(_MatmulAttention(), torch.randn(2, 5, 16), recipe={"precision": "bf16"}) == \
        ("matmul-attention/16-bit",)

    class MHA(nn.Module):  # nn.MultiheadAttention's default need_weights=True: bmm + softmax, not SDPA
        def __init__(self):
            super().__init__()
            self.a = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return self.a(x, x, x)[0]

    assert _kinds(MHA(), torch.randn(2, 5, 16)) == ("matmul-attention/fp32",)
    assert _kinds(_MoE(), torch.randn(8, 16)) == ("moe/fp32",)
    assert _kinds(_Stack(), torch.randn(8, 4), lambda m, b: m(b).topk(2, -1).values.sum()) == ("other/fp32",)
    assert _kinds(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(8, 16)) == ("other/fp32",)


def test_math_attention_backend_is_sdpa_not_attention_written_out():
    class GQA(nn.Module):  # fp32 with grouped-query heads: the CUDA model takes the math backend
        def __init__(self):
            super().__init__()
            self.q, self.kv = nn.Linear(32, 32), nn.Linear(32, 16)

        def forward(self, x):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
            k, v = self.kv(x).view(b, t, 2, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
            k, v = (F.pad(y, (0, 4)) for y in (k, v))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    e = vramnb.estimate(GQA(), torch.randn(2, 6, 32), lambda m, b: m(b).sum(), target="H100")
    assert e.backends == {"math": 2}  # two steps; the kinds come from the first
    assert e.expected_error.kinds == ("sdpa/fp32",)


_TABLE = {
    "sdpa/16-bit": {"peak": {"cases": 40, "median_abs": 0.004, "worst": -0.029, "under": 3, "worst_under": -0.029},
                    "device": {"cases": 40, "median_abs": 0.01, "worst": -0.035, "under": 9, "worst_under": -0.035}},
    "other/fp32": {"peak": {"cases": 5, "median_abs": 0.001, "worst": 0.002, "under": 0, "worst_under": 0.0}},
    "rnn/fp32": {"peak": {"cases": 4, "median_abs": 0.07, "worst": -0.3, "under": 4, "worst_under": -0.3}},
}
_SOURCE = {"run": "test", "gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-12-02"}


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(_accuracy, "MEASURED", _TABLE)
    monkeypatch.setattr(_accuracy, "SOURCE", _SOURCE)
    return _TABLE


def test_estimate_states_its_expected_error_from_the_table(table):
    e = vramnb.estimate(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), torch.randn(2, 5, 16),
                        lambda m, b: m(b).float().sum(), target="H100", recipe={"precision": "bf16"})
    x = e.expected_error
    assert x.kinds == ("sdpa/16-bit",) and x.kind == "sdpa/16-bit" and x.missing == ()
    assert (x.median, x.worst, x.worst_under, x.worst_under_device, x.cases, x.under) == \
        (0.004, -0.029, -0.029, -0.035, 40, 3)
    note = ("expected error (zoo benchmark, H200, torch 2.11, 40 steps of this kind: sdpa/16-bit): "
            "median 0.4 %, worst −2.9 %; under-estimates 3 of 40")
    assert note in e.notes and note in repr(e)
    # no figures for the kind: said so, and nothing made up
    e = vramnb.estimate(_MoE(), torch.randn(8, 16), lambda m, b: m(b).sum(), target="H100")
    assert e.expected_error.kind is None and e.expected_error.median is None and e.expected_error.worst_under is None
    assert "no benchmark figures for this kind of step yet (moe/fp32)" in repr(e)
    # a CPU estimate is exact by construction (the CPU tracker measures the same storages)
    assert vramnb.estimate(_MoE(), torch.randn(8, 16), lambda m, b: m(b).sum(), device="cpu").expected_error is None


def test_a_step_of_several_kinds_takes_the_worst():
    x = expected_error(["other/fp32", "rnn/fp32", "moe/fp32"], _TABLE, _SOURCE)
    assert x.kind == "rnn/fp32" and x.worst_under == -0.3 and x.median == 0.07 and x.worst_under_device is None
    assert x.measured == ("other/fp32", "rnn/fp32") and x.missing == ("moe/fp32",)
    assert x.note().endswith("(the worst of its kinds other/fp32, rnn/fp32); no benchmark figures for moe/fp32 yet")


def test_safe_margin_arithmetic_is_exact():
    card = 24 << 30
    # peak under-estimated by 10 %: the real peak is d / 0.9, plus up to 20 MiB of rounding
    assert ROUNDING == 20 * MiB
    assert safe_margin(0.0, card, -0.1) == (card - (card - 20 * MiB) * 0.9) / card
    assert safe_margin(0.05, card, -0.1) == (card - (card * 0.95 - 20 * MiB) * 0.9) / card
    # device memory under-estimated worse than the peak: its margin wins (the rounding is in it)
    assert safe_margin(0.05, card, -0.01, -0.2) == (card - card * 0.95 * 0.8) / card
    # never under-estimated: only the rounding; nothing measured: the margin as asked
    assert safe_margin(0.0, card, 0.0) == 20 * MiB / card
    assert safe_margin(0.1, card, None) == 0.1
    # the margin it gives keeps a step as badly under-estimated as the worst inside the card
    m = safe_margin(0.0, card, -0.1)
    d = card * (1 - m)  # the largest estimate that fits
    assert d / 0.9 + 20 * MiB <= card + 1e-3


def _search_model():
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))


def _ce(m, b):
    return F.cross_entropy(m(b[0]), b[1])


def test_max_batch_size_safe_mode_adds_the_kinds_worst_under_estimate(table):
    batch = (torch.randn(8, 256), torch.randint(0, 10, (8,)))
    card = 2 << 30
    plain = vramnb.max_batch_size(_search_model(), batch, _ce, target=card, progress=False, safety="none")
    assert plain.margin == 0.0 and plain.margin_reason == "" and plain.estimate.margin == 0.0
    safe = vramnb.max_batch_size(_search_model(), batch, _ce, target=card, progress=False)  # the default
    assert safe.safety == "worst" and safe.expected_error.kinds == ("other/fp32",)
    assert safe.margin == safe_margin(0.0, card, 0.0) == 20 * MiB / card  # never under-estimated: the rounding
    assert safe.estimate.margin == safe.margin and safe.estimates == len(safe.tried) + 1
    assert "steady peak under-estimated by up to 0.0% plus 20.0 MiB the allocator may round up" in repr(safe)
    # the answer fits the card less the margin; one more does not
    at = vramnb.estimate(_search_model(), batch, _ce, target=card, batch_size=safe.batch_size, margin=safe.margin)
    above = vramnb.estimate(_search_model(), batch, _ce, target=card, batch_size=safe.batch_size + 1,
                            margin=safe.margin)
    assert at.fits and not above.fits and 0 < safe.batch_size < plain.batch_size


def test_max_batch_size_holds_a_kind_without_figures_to_the_worst_kind(table):
    batch = torch.randn(8, 16)
    s = vramnb.max_batch_size(_MoE(), batch, lambda m, b: m(b).sum(), target=2 << 30, progress=False, margin=0.05)
    assert s.expected_error.missing == ("moe/fp32",)
    # the worst of every kind: rnn/fp32's -30 % peak (the peak term beats sdpa's device -3.5 %)
    assert s.margin == safe_margin(0.05, 2 << 30, -0.3, -0.035)
    assert "moe/fp32 without benchmark figures: held to the worst of every measured kind (rnn/fp32)" in repr(s)


def test_max_batch_size_with_no_figures_at_all_adds_nothing(monkeypatch):
    monkeypatch.setattr(_accuracy, "MEASURED", {})
    s = vramnb.max_batch_size(_search_model(), (torch.randn(8, 256), torch.randint(0, 10, (8,))), _ce,
                              target=2 << 30, progress=False)
    assert s.margin == 0.0 and s.estimates == len(s.tried)  # the first estimate holds: no extra one
    assert "no benchmark figures yet: nothing added" in repr(s)


def test_bad_safety_values_name_the_choices():
    for bad in ("safe", "", None, 0.1, True):
        with pytest.raises(ValueError, match="safety must be one of 'worst', 'none'"):
            vramnb.max_batch_size(_search_model(), torch.randn(8, 256), lambda m, b: m(b).sum(), target="A100",
                                  progress=False, safety=bad)


class _Jump(nn.Module):
    """Memory not linear in the batch: from 48 examples on, the step keeps a 4 MiB-per-example
    activation more (a kernel switch, a padded bucket), with a fixed 64 MiB workspace."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 4)

    def forward(self, x):
        h = self.a(x)
        if x.shape[0] >= 48:
            big = torch.ones(x.shape[0], 1 << 20, device=x.device, dtype=x.dtype)
            h = h + (big * h[:, :1]).sum(1, keepdim=True)  # big is saved for backward
            h = h + torch.ones(16 << 20, device=x.device).sum()
        return self.b(h)


def test_max_batch_size_finds_the_boundary_when_memory_jumps_with_the_batch():
    batch = torch.randn(4, 64)

    def loss(m, b):
        return m(b).sum()

    card = 1 << 30  # the jump at 48 leaves no room: the true largest batch is 47
    s = vramnb.max_batch_size(_Jump(), batch, loss, target=card, progress=False, safety="none")
    fits = {n: vramnb.estimate(_Jump(), batch, loss, target=card, batch_size=n).fits for n in (46, 47, 48, 49, 200)}
    assert fits == {46: True, 47: True, 48: False, 49: False, 200: False}
    assert s.batch_size == 47


def test_max_batch_size_finds_the_boundary_when_memory_is_quadratic_in_the_batch():
    """A contrastive loss (CLIP's): a batch x batch similarity matrix, saved for backward; the line
    through two estimates under-estimates the growth, the search must still land on the boundary."""
    model = nn.Linear(64, 64)

    def loss(m, b):
        h = m(b)
        return (h @ h.T).softmax(-1).diagonal().sum()

    card = 1 << 30
    s = vramnb.max_batch_size(model, torch.randn(8, 64), loss, target=card, progress=False, safety="none",
                              limit=1 << 16)
    at = vramnb.estimate(model, torch.randn(8, 64), loss, target=card, batch_size=s.batch_size)
    above = vramnb.estimate(model, torch.randn(8, 64), loss, target=card, batch_size=s.batch_size + 1)
    assert at.fits and not above.fits and s.batch_size > 1000
    assert len(s.tried) <= (1 << 16).bit_length() + 3
