"""estimate() on steps that read tensor values: values come from the batch the user
passed (real CPU shadows of the fake batch), and the CPU estimate still equals the
CPU tracker's measurement byte for byte; values that do not come from the batch, or
a batch on ``meta``, are refused naming the operator and the user's line."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import Tally

HERE = os.path.basename(__file__)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _batch(ignored: int):
    torch.manual_seed(1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    y[:ignored] = -100
    return x, y


def _mine(bd):
    return {k: v for k, v in bd.sources.items() if k != "other"}


def _same_as_measured(model, batch, loss_fn, **kw):
    opt = torch.optim.AdamW(model.parameters())
    est = vramnb.estimate(model, batch, loss_fn, opt, device="cpu", **kw)
    real = vramnb.profile_step(model, batch, loss_fn, opt, module_depth=None)
    assert len(est.steps) == len(real.steps) == 2
    for e, r in zip(est.steps, real.steps):
        assert _mine(e.peak) == _mine(r.peak)
        assert e.peak_phase == r.peak_phase
    return est


LINES = Tally()  # line numbers the loss functions note as they run (a dict they filled would be put back)


def _item_check(m, b):
    x, y = b
    LINES["item"] = sys._getframe().f_lineno + 1
    if (y == -100).sum().item() > 0:  # an .item() check on the labels: an extra term when some are ignored
        return nn.functional.cross_entropy(m(x), y.clamp(min=0)) + m(x).pow(2).mean()
    return nn.functional.cross_entropy(m(x), y)


def _any_check(m, b):
    x, y = b
    out = m(x)
    LINES["any"] = sys._getframe().f_lineno + 1
    if torch.any(y == -100):
        out = out + m[0](x).repeat(64, 1).mean()  # memory that only this branch takes
    return nn.functional.cross_entropy(out, y, ignore_index=-100)


@pytest.mark.parametrize("loss_fn,key,values", [(_item_check, "item", ("5", "0")), (_any_check, "any", ("True", "False"))],
                         ids=[".item()", "torch.any"])
def test_a_value_read_from_the_labels_is_the_batch_value(loss_fn, key, values):
    model = _model()
    with_ignored = _same_as_measured(model, _batch(5), loss_fn)
    without = _same_as_measured(model, _batch(0), loss_fn)
    # the branch taken follows the batch's values: more memory when some labels are ignored
    assert with_ignored.steady.peak.total > without.steady.peak.total
    note = f"read from your batch: `aten._local_scalar_dense` at {__file__}:{LINES[key]} of your code"
    assert any(n.startswith(note) and n.endswith(f"= {values[0]} (2 reads)") for n in with_ignored.notes), with_ignored.notes
    assert any(n.startswith(note) and n.endswith(f"= {values[1]} (2 reads)") for n in without.notes), without.notes


def _masked_loss(m, b):
    x, y = b
    logits = m(x)
    keep = y != -100
    LINES["index"] = sys._getframe().f_lineno + 1
    return nn.functional.cross_entropy(logits[keep], y[keep])  # boolean indexing: the loss's input shape


def test_boolean_indexing_by_the_labels_takes_the_batch_shape():
    model = _model()
    few = _same_as_measured(model, _batch(20), _masked_loss)
    many = _same_as_measured(model, _batch(2), _masked_loss)
    assert few.steady.peak_phase and many.steady.peak.total >= few.steady.peak.total
    at = f"`aten.index` at {__file__}:{LINES['index']} of your code"
    assert any(at in n and "shape (12, 10)" in n for n in few.notes), few.notes
    assert any(at in n and "shape (30, 10)" in n for n in many.notes), many.notes


def _writes_labels(m, b):
    x, y = b
    y.masked_fill_(y == -100, 0)  # in place, into the (fake) batch
    if bool((y == 0).any()):
        return nn.functional.cross_entropy(m(x), y) * 2
    return nn.functional.cross_entropy(m(x), y)


def test_a_step_writing_into_the_batch_reads_its_own_writes_and_leaves_the_users_batch():
    x, y = _batch(5)
    before = y.clone()
    est = vramnb.estimate(_model(), (x, y), _writes_labels, device="cpu")
    assert torch.equal(y, before)
    assert any("read from your batch" in n and n.endswith("= True (2 reads)") for n in est.notes), est.notes


def test_a_resized_batch_repeats_the_batch_rows():
    model = _model()
    x, y = _batch(5)
    est = vramnb.estimate(model, (x, y), _masked_loss, torch.optim.AdamW(model.parameters()), device="cpu",
                          batch_size=64)
    rows = torch.arange(64) % 32
    real = vramnb.profile_step(model, (x[rows], y[rows]), _masked_loss, torch.optim.AdamW(model.parameters()),
                               module_depth=None)
    for e, r in zip(est.steps, real.steps):
        assert _mine(e.peak) == _mine(r.peak)
    assert any("its 32 rows repeated to 64" in n and "shape (54, 10)" in n for n in est.notes), est.notes


def _weight_mask(m, b):
    out = m(b[0])
    LINES["weights"] = sys._getframe().f_lineno + 1
    return out[out > 0].sum()  # the mask comes from activations


def test_a_shape_from_activations_names_the_op_and_the_line():
    x, y = _batch(0)
    with pytest.raises(ValueError) as err:
        vramnb.estimate(_model(), (x, y), _weight_mask, device="cpu")
    msg = str(err.value)
    assert "`aten.index`" in msg and f"{HERE}:{LINES['weights']}" in msg
    assert "weights or activations" in msg and "vramnb.profile_step" in msg


def test_a_value_of_a_meta_batch_says_to_pass_a_real_batch():
    batch = (torch.empty(32, 64, device="meta"), torch.empty(32, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError) as err:
        vramnb.estimate(_model(), batch, _any_check, device="cpu")
    msg = str(err.value)
    assert "`aten._local_scalar_dense`" in msg and f"{HERE}:{LINES['any']}" in msg
    assert "meta device" in msg and "Pass a real batch" in msg


def test_a_speech_model_that_checks_its_labels_and_takes_ctc_lengths():
    """Hugging Face's CTC heads (wav2vec2, HuBERT, WavLM, data2vec-audio, SEW) check ``labels.max()``,
    ``masked_select`` the labels and give CTC tensor lengths: all read from the batch."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                      conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4), vocab_size=20,
                                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, layerdrop=0.0,
                                      mask_time_prob=0.0)
    torch.manual_seed(0)
    model = transformers.Wav2Vec2ForCTC(cfg)
    labels = torch.randint(1, 20, (2, 12))
    labels[0, 9:] = -100  # padding: 21 targets
    batch = {"input_values": torch.randn(2, 4000), "labels": labels}
    est = _same_as_measured(model, batch, lambda m, b: m(**b).loss)
    assert any("read from your batch: `aten._local_scalar_dense`" in n and "labels.max()" in n and "= False" in n
               for n in est.notes), est.notes
    assert any("`aten.masked_select`" in n and "shape (21,)" in n for n in est.notes), est.notes
    assert any("`aten._ctc_loss`" in n for n in est.notes), est.notes
    cuda = vramnb.estimate(model, batch, lambda m, b: m(**b).loss, target="A100")  # the CUDA model on top reads them too
    assert cuda.fits and any("`aten.masked_select`" in n for n in cuda.notes)


# -- more reads of the same kind: shapes and values that follow the labels ---------------------------------
def _nonzero(m, b):
    x, y = b
    idx = (y != -100).nonzero().squeeze(1)
    return nn.functional.cross_entropy(m(x).index_select(0, idx), y[idx])


def _unique(m, b):
    x, y = b
    return nn.functional.cross_entropy(m(x), y.clamp(min=0)) * torch.unique(y[y >= 0]).numel()


def _where(m, b):
    x, y = b
    (i,) = torch.where(y >= 0)
    return nn.functional.cross_entropy(m(x[i]), y[i])


def _repeat(m, b):
    x, y = b
    return torch.repeat_interleave(m(x), y.clamp(min=0), dim=0).pow(2).mean()


def _equal(m, b):
    x, y = b
    return nn.functional.cross_entropy(m(x), y.clamp(min=0)) * (2 if torch.equal(y, y.clamp(min=0)) else 1)


def _tolist(m, b):
    x, y = b
    n = sum(1 for v in y.tolist() if v >= 0)
    return nn.functional.cross_entropy(m(x[:n]), y.clamp(min=0)[:n])


def _bincount(m, b):
    x, y = b
    w = 1.0 / torch.bincount(y.clamp(min=0), minlength=10).clamp(min=1).float()
    return nn.functional.cross_entropy(m(x), y.clamp(min=0), weight=w)


def _int_slice(m, b):
    x, y = b
    k = int((y >= 0).sum())
    return nn.functional.cross_entropy(m(x[:k]), y[-k:])


def _setitem(m, b):
    x, y = b
    y = y.clone()
    y[y == -100] = 0
    if y.min().item() == 0:
        return nn.functional.cross_entropy(m(torch.cat([x, x])), torch.cat([y, y]))
    return nn.functional.cross_entropy(m(x), y)


@pytest.mark.parametrize("loss_fn,op", [(_nonzero, "nonzero"), (_unique, "_unique2"), (_where, "nonzero"),
                                        (_repeat, "repeat_interleave"), (_equal, "equal"),
                                        (_tolist, "_local_scalar_dense"), (_bincount, "bincount"),
                                        (_int_slice, "_local_scalar_dense"), (_setitem, "_local_scalar_dense")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_reads_that_follow_the_labels_equal_the_measurement(loss_fn, op):
    est = _same_as_measured(_model(), _batch(5), loss_fn)
    assert any(n.startswith(f"read from your batch: `aten.{op}` at {__file__}:") for n in est.notes), est.notes


def _layer_drop(m, b):
    x, y = b
    out = m(x)
    LINES["drop"] = sys._getframe().f_lineno + 1
    if torch.rand(()) < 2.0:  # LayerDrop's draw (always true here): the extra branch runs
        out = out + m[0](x).repeat(64, 1).mean()
    return nn.functional.cross_entropy(out, y.clamp(min=0))


def test_a_random_draw_read_in_the_step_is_drawn_by_the_estimate_not_from_the_users_generator():
    model, batch = _model(), _batch(0)
    state = torch.get_rng_state()
    est = vramnb.estimate(model, batch, _layer_drop, device="cpu")
    assert torch.equal(torch.get_rng_state(), state)
    assert any(n.startswith(f"drawn at random by the estimate (your step draws its own values): "
                            f"`aten._local_scalar_dense` at {__file__}:{LINES['drop']} of your code") and "= True" in n
               for n in est.notes), est.notes
    _same_as_measured(model, batch, _layer_drop)


class _Packed(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(64, 16, batch_first=True), nn.Linear(16, 10)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        LINES["packed"] = sys._getframe().f_lineno + 1
        _, h = self.rnn(packed)
        return self.fc(h[-1])


def test_data_read_inside_a_cpp_kernel_names_the_line():
    """An RNN on a PackedSequence reads batch_sizes in C++, below any dispatch mode: refused clearly."""
    torch.manual_seed(0)
    batch = (torch.randn(8, 7, 64), torch.randint(0, 10, (8,)), torch.randint(1, 8, (8,)))
    with pytest.raises(ValueError) as err:
        vramnb.estimate(_Packed(), batch, lambda m, b: nn.functional.cross_entropy(m(b[0], b[2]), b[1]), device="cpu")
    msg = str(err.value)
    assert f"{HERE}:{LINES['packed']}" in msg and "PackedSequence" in msg and "vramnb.profile_step" in msg


def test_shadows_are_not_counted_and_are_freed_after_the_estimate(monkeypatch):
    """The batch's shadows are real CPU storages: the estimate's meta tracker never counts them (the bytes equal
    the measurement above), and none outlives the estimate."""
    import weakref

    from vramnb.predict import _batch_values, _estimate

    made = []

    class Recording(_batch_values.BatchValues):
        def add_batch(self, real, fake):
            super().add_batch(real, fake)
            made.extend(weakref.ref(e[1]) for e in self._shadows.values()
                        if isinstance(e[1], torch.UntypedStorage))

    monkeypatch.setattr(_estimate, "BatchValues", Recording)
    est = _same_as_measured(_model(), _batch(5), _masked_loss)
    assert made and all(r() is None for r in made)
    assert any("read from your batch" in n for n in est.notes)


def test_transformers_is_fake_tensor_is_answered_only_inside_an_estimate_and_put_back():
    pytest.importorskip("transformers")
    from transformers.utils import import_utils

    from vramnb.predict._library_hooks import untraced_where_known

    original = import_utils.is_fake_tensor
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        t = torch.empty(3)
    with untraced_where_known(lambda x: x is t):
        assert import_utils.is_fake_tensor(t) is False  # its values are known: not a trace
        with FakeTensorMode():
            u = torch.empty(3)
        assert import_utils.is_fake_tensor(u) is True  # unknown values: still fake to transformers
    assert import_utils.is_fake_tensor is original and original(t)


def test_a_batch_resized_past_the_limit_keeps_no_copy_and_a_value_read_says_why():
    """batch_size= far above the user's batch: its values would be a host copy the user never had
    (LIMIT bytes and more). Without a value read the estimate runs; with one it says why it cannot."""
    import vramnb
    from vramnb.predict._batch_values import LIMIT

    net = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    rows = LIMIT // (64 * 4) + 1  # one row more than LIMIT bytes of fp32
    e = vramnb.estimate(net, x, lambda m, b: m(b).mean(), None, batch_size=rows, device="cpu")
    assert e.steps[0].peak.sources["input batch"] == rows * 64 * 4
    masked = lambda m, b: m(b[b[:, 0] > 0]).mean()  # noqa: E731 - a shape that follows the batch's values
    with pytest.raises(ValueError, match="larger than the estimate keeps values for"):
        vramnb.estimate(net, x, masked, None, batch_size=rows, device="cpu")
    vramnb.estimate(net, x, masked, None, batch_size=64, device="cpu")  # small enough: its values are kept


def test_a_read_in_an_installed_package_is_not_called_your_code():
    """A value read inside a library (torch_geometric's add_self_loops, transformers' masks) is that
    package's line, not the user's."""
    import os
    import sysconfig

    from vramnb.predict._value_reads import Read, notes

    lib = os.path.join(sysconfig.get_paths()["purelib"], "torch_geometric", "utils", "loop.py") + ":650"
    (line,) = notes([Read("index", lib, "edge_index = edge_index[:, mask]", "shape (2, 49996)", 1)])
    assert line == (f"read from your batch: `index` at {lib} of the installed package torch_geometric "
                    "(`edge_index = edge_index[:, mask]`) = shape (2, 49996)")
    mine = f"{__file__}:1"
    (line,) = notes([Read("index", mine, "", "shape (2,)", 1)])
    assert line == f"read from your batch: `index` at {mine} of your code = shape (2,)"
