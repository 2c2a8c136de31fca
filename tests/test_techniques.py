"""Each technique on CPU: direction and rough size of its saving, measured;
clear errors for bad settings; and exact undo (property-based)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import vramnb
from vramnb.techniques import REGISTRY, Recipe, Unavailable

F32 = 4


class Block(nn.Module):
    def __init__(self, d=32, h=128):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.l2(torch.relu(self.l1(x)))


class Net(nn.Module):
    def __init__(self, n_blocks=4, vocab=50, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_blocks))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def lm_loss(model, batch):
    return nn.functional.cross_entropy(model(batch).flatten(0, 1), batch.flatten())


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters())
    batch = torch.randint(0, 50, (16, 24))
    return model, opt, batch


def run(setup, **settings):
    model, opt, batch = setup
    return vramnb.profile_step(model, batch, lm_loss, opt, recipe=Recipe(**settings), module_depth=None).steady


def param_bytes(model):
    return sum(p.numel() for p in model.parameters()) * F32


def test_optimizer_state_per_parameter(setup):
    p = param_bytes(setup[0])
    n_tensors = len(list(setup[0].parameters()))
    assert run(setup, optimizer="SGD").mark("start")["optimizer state"] == 0
    assert run(setup, optimizer="SGD momentum").mark("start")["optimizer state"] == p  # one buffer
    assert run(setup, optimizer="AdamW").mark("start")["optimizer state"] == 2 * p + 4 * n_tensors  # + CPU step counters
    adafactor = run(setup, optimizer="Adafactor").mark("start")["optimizer state"]
    assert 0 < adafactor < 0.2 * p  # factored second moments
    pytest.importorskip("lion_pytorch")
    assert run(setup, optimizer="Lion").mark("start")["optimizer state"] == p  # one momentum buffer


def test_bf16_roughly_halves_activations(setup):
    base = run(setup).mark("after forward")["activations"]
    bf16 = run(setup, precision="bf16").mark("after forward")["activations"]
    assert 0.4 * base < bf16 < 0.8 * base


def test_checkpointing_keeps_block_inputs_only(setup):
    base = run(setup).mark("after forward")["activations"]
    full = run(setup, checkpointing="every block").mark("after forward")["activations"]
    half = run(setup, checkpointing="every 2nd block").mark("after forward")["activations"]
    assert full < half < base
    # what stays: per block its input (16 x 24 x 32 float32), plus what the layers outside the blocks save
    assert full < base / 2
    selective = run(setup, checkpointing="selective").mark("after forward")["activations"]
    assert selective > full  # it keeps the matmul outputs


def test_micro_batches_divide_activations_and_keep_the_step(setup):
    base = run(setup).mark("after forward")["activations"]
    four = run(setup, micro_batches=4)
    assert 0.2 * base < four.mark("after forward")["activations"] < 0.3 * base
    assert four.mark("after backward")["gradients"] == param_bytes(setup[0])


def test_batch_size_scales_activations(setup):
    base = run(setup).mark("after forward")["activations"]
    double = run(setup, batch_size=32)
    assert 1.9 * base < double.mark("after forward")["activations"] < 2.1 * base
    assert double.mark("start")["input batch"] == 32 * 24 * 8


@pytest.mark.parametrize("size", [4, 32], ids=["smaller", "larger"])
def test_batch_size_row_is_what_a_loop_running_that_batch_gets(setup, size):
    """compare's batch_size row leaves out the batch as given (the notebook keeps it; a loop that runs
    the resized batch would not): its peak and every source equal a step run on that batch alone."""
    model, opt, batch = setup
    comp = vramnb.compare(model, batch, lm_loss, opt, recipes=[{}, {"batch_size": size}], progress=False)
    base, resized = (v.report for v in comp.variants)
    given = batch.numel() * batch.element_size()
    for step in resized.steps:  # the resized batch is the step's only input, from shapes
        assert step.mark("start")["input batch"] == size * 24 * 8
        assert step.mark("start").allocated == sum(step.mark("start").sources.values())
    # what the same steps give with only that batch in memory (the batch as given let go)
    alone = vramnb.profile_step(model, batch[torch.arange(size) % len(batch)].clone(), lm_loss, opt, module_depth=None)
    assert resized.steady.peak.sources["other"] == base.steady.peak.sources["other"]  # the same process beside it
    for r, a in zip(resized.steps, alone.steps):
        assert {k: v for k, v in r.peak.sources.items() if k != "other"} == {
            k: v for k, v in a.peak.sources.items() if k != "other"}
        assert r.peak.allocated - r.peak.sources["other"] == a.peak.allocated - a.peak.sources["other"]
    # the row's peak (what its saving is computed from) counts nothing of the given batch
    assert comp.variants[1].peak == resized.steady.peak.allocated == sum(resized.steady.peak.sources.values())
    note = [n for n in resized.notes if n.startswith("the batch as given")]
    assert note == [f"the batch as given ({vramnb.format_bytes(given)}) is left out of these steps' figures: they ran "
                    "the recipe's resized batch, and a loop that runs that batch does not hold the given one"]
    assert not any(n.startswith("the batch as given") for n in base.notes)


def test_batch_size_row_keeps_a_dataset_the_batch_is_sliced_from(setup):
    """A batch that views part of a dataset held in one tensor: the dataset stays in a loop of any batch
    size, so the resized step's figures keep it (as 'other') and no note says anything was left out."""
    model, opt, _ = setup
    data = torch.randint(0, 50, (64, 24))
    batch = data[16:32]
    comp = vramnb.compare(model, batch, lm_loss, opt, recipes=[{}, {"batch_size": 4}], progress=False)
    base, resized = (v.report for v in comp.variants)
    assert not any(n.startswith("the batch as given") for n in resized.notes)
    # the baseline's input batch is the 16 viewed rows; the dataset's other 48 rows are 'other' in both
    assert base.steady.mark("start")["input batch"] == 16 * 24 * 8
    assert resized.steady.mark("start")["input batch"] == 4 * 24 * 8
    assert resized.steady.mark("start")["other"] - base.steady.mark("start")["other"] == 16 * 24 * 8


def test_freeze_and_modes(setup):
    model = setup[0]
    emb = model.emb.weight.numel() * F32
    frozen = run(setup, freeze="embeddings")
    assert frozen.mark("after backward")["gradients"] == param_bytes(model) - emb
    nograd = run(setup, mode="no_grad")
    assert nograd.mark("after forward")["activations"] == 0 and nograd.mark("after backward")["gradients"] == 0
    inference = run(setup, mode="inference_mode")
    assert inference.peak.allocated <= nograd.peak.allocated
    zeros = run(setup, zero_grad="zeros")
    assert zeros.mark("after zero_grad")["gradients"] == param_bytes(model)


def test_unavailable_here_says_why(setup):
    model, opt, batch = setup
    for settings_, fragment in [
        (dict(precision="fp16"), "needs a CUDA GPU"),
        (dict(activation_offload="CPU"), "already in host memory"),
        (dict(precision="fp8"), "compute capability"),
        (dict(micro_batches=5), "does not split into 5"),
        (dict(checkpointing="every block", blocks="nope"), "names no submodule"),
    ]:
        with pytest.raises(Unavailable, match=fragment):
            vramnb.profile_step(model, batch, lm_loss, opt, recipe=Recipe(**settings_))


@pytest.mark.parametrize(
    "settings_, fragment",
    [
        (dict(precison="bf16"), "unknown technique 'precison'; valid: precision"),
        (dict(precision="fp64"), "valid: 'fp32', 'bf16', 'fp16', 'fp8'"),
        (dict(micro_batches=0), "positive integer"),
        (dict(batch_size=True), "positive integer"),
        (dict(optimizer="RMSprop"), "valid: 'yours', 'SGD'"),
    ],
)
def test_bad_settings_are_value_errors(settings_, fragment):
    with pytest.raises(ValueError, match=fragment):
        Recipe(**settings_)


def test_compare_ranks_and_lists_unavailable(setup):
    model, opt, batch = setup
    cmp = vramnb.compare(model, batch, lm_loss, opt, toggles={"precision": ["fp32", "bf16", "fp16"]},
                         recipes=[{"optimizer": "SGD"}], progress=False)
    ranked = cmp.ranked()
    peaks = [v.peak for v in ranked if v.peak is not None]
    assert peaks == sorted(peaks)
    fp16 = next(v for v in cmp.variants if v.recipe["precision"] == "fp16")
    assert fp16.report is None and "CUDA" in fp16.unavailable
    text = cmp._table().to_text()
    assert "baseline" in text and "not available" in text
    recs = cmp.to_records()
    assert {r["recipe"] for r in recs} >= {"baseline", "bf16 autocast", "optimizer SGD"}
    assert cmp.plot()._repr_png_()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="unknown technique"):
        vramnb.compare(model, batch, lm_loss, opt, toggles={"precisoin": ["bf16"]}, progress=False)


# -- exact undo, property-based -------------------------------------------------

def _fingerprint(model, opt):
    return {
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "buffers": {n: b.clone() for n, b in model.named_buffers()},
        "ids": {n: id(p) for n, p in model.named_parameters()},
        "flags": {n: p.requires_grad for n, p in model.named_parameters()},
        "dtypes": {n: (p.dtype, p.device) for n, p in model.named_parameters()},
        "grads": {n: None if p.grad is None else (id(p.grad), p.grad.clone()) for n, p in model.named_parameters()},
        "forward": {n: "forward" in m.__dict__ for n, m in model.named_modules()},
        "training": {n: m.training for n, m in model.named_modules()},
        "hooks": {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks)) for n, m in model.named_modules()},
        "modules": [n for n, _ in model.named_modules()],
        "state": {id(p): {k: (id(v), v.clone()) if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                  for p, s in opt.state.items()},
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
        "rng": torch.random.get_rng_state(),
    }


def _same(a, b):
    assert a["ids"] == b["ids"] and a["flags"] == b["flags"] and a["dtypes"] == b["dtypes"]
    assert a["forward"] == b["forward"] and a["training"] == b["training"] and a["modules"] == b["modules"]
    assert a["hooks"] == b["hooks"] and a["groups"] == b["groups"]
    assert torch.equal(a["rng"], b["rng"])
    for n in a["params"]:
        assert torch.equal(a["params"][n], b["params"][n]), n
    for n in a["buffers"]:
        assert torch.equal(a["buffers"][n], b["buffers"][n]), n
    for n in a["grads"]:
        ga, gb = a["grads"][n], b["grads"][n]
        assert (ga is None) == (gb is None), n
        if ga is not None:
            assert ga[0] == gb[0] and torch.equal(ga[1], gb[1])
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        for name, v in a["state"][k].items():
            w = b["state"][k][name]
            if isinstance(v, tuple):
                assert v[0] == w[0] and torch.equal(v[1], w[1])
            else:
                assert v == w


def _models():
    torch.manual_seed(1)
    net = Net(n_blocks=3)
    net.blocks[0].register_forward_hook(lambda m, i, o: None)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.2), nn.Flatten(), nn.Linear(8 * 6 * 6, 50))
    return [
        (net, torch.randint(0, 50, (8, 12)), lm_loss),
        (cnn, torch.randn(8, 3, 8, 8), lambda m, b: m(b).square().mean()),
    ]


_MODELS = _models()
_SETTINGS = {
    name: st.sampled_from([c for c in REGISTRY[name].choices if c is not None])
    for name in ("precision", "checkpointing", "freeze", "optimizer", "micro_batches", "zero_grad", "mode")
}
recipe_strategy = st.fixed_dictionaries({}, optional=_SETTINGS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(_MODELS) - 1), recipes=st.lists(recipe_strategy, min_size=1, max_size=3),
       with_state=st.booleans(), train_mode=st.booleans())
def test_any_recipe_sequence_restores_everything(which, recipes, with_state, train_mode):
    model, batch, loss_fn = _MODELS[which]
    model.train(train_mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if with_state:  # a user mid-training: gradients and optimizer state exist
        loss_fn(model, batch).backward()
        opt.step()
        loss_fn(model, batch).backward()
    before = _fingerprint(model, opt)
    for settings_ in recipes:
        try:
            vramnb.profile_step(model, batch, loss_fn, opt, recipe=Recipe(**settings_), module_depth=None)
        except Unavailable:
            pass
        _same(before, _fingerprint(model, opt))
    model.zero_grad(set_to_none=True)
    model.train(True)


def test_a_failing_step_restores_everything():
    model, batch, loss_fn = _MODELS[0]
    opt = torch.optim.AdamW(model.parameters())
    before = _fingerprint(model, opt)

    def boom(m, b):
        loss_fn(m, b)
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes.")

    with pytest.raises(RuntimeError, match="can't allocate memory"):
        vramnb.profile_step(model, batch, boom, opt, recipe=Recipe(checkpointing="every block", freeze="embeddings"))
    _same(before, _fingerprint(model, opt))


def test_blocks_found_in_a_nested_sequential():
    from vramnb.techniques.checkpointing import find_blocks

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.dropout = nn.Dropout()
            self.layers = nn.Sequential(*[Layer() for _ in range(6)])
            self.ln = nn.LayerNorm(4)

    class ViTLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_proj = nn.Conv2d(3, 4, 2)
            self.encoder = Encoder()
            self.heads = nn.Sequential(nn.Linear(4, 2))

    blocks = find_blocks(ViTLike())
    assert len(blocks) == 6 and all(isinstance(b, Layer) for b in blocks)
    with pytest.raises(ValueError, match="names no submodule"):
        find_blocks(ViTLike(), "encoder.nope")


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def _sq(m, b):
    return m(b).square().mean()


def test_a_swapped_optimizer_runs_without_the_users_state():
    """After one Adam step the user's state (2 copies of the parameters) is moved
    aside for a recipe that trains with another optimizer: SGD momentum keeps one
    copy, so it saves one copy plus Adam's step counters, exactly."""
    model, x = _mlp(), torch.randn(32, 64)
    opt = torch.optim.Adam(model.parameters())
    _sq(model, x).backward()
    opt.step()
    opt.zero_grad()
    state = {k: v.clone() for p in opt.state for k, v in opt.state[p].items()}
    cmp = vramnb.compare(model, x, _sq, opt, recipes=[{"optimizer": "SGD momentum"}], progress=False)
    base, sgd = cmp.variants
    P = param_bytes(model)
    steps = 4 * len(list(model.parameters()))  # Adam's float32 step counters
    b, s = base.report.steady.peak.sources, sgd.report.steady.peak.sources
    assert b["optimizer state"] == 2 * P + steps
    assert s["optimizer state"] == P
    assert s["other"] == b["other"]  # the user's Adam state is not "other" in SGD's step
    assert b["optimizer state"] - s["optimizer state"] == P + steps
    assert any("moved to host memory" in n for n in sgd.report.notes)
    after = {k: v for p in opt.state for k, v in opt.state[p].items()}
    assert all(torch.equal(state[k], after[k]) for k in state)  # and it is back, bit for bit


def test_lora_with_the_users_adamw_trains_only_adapters():
    pytest.importorskip("peft")
    model, x = _mlp(), torch.randn(32, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    keys = list(model.state_dict())
    rep = vramnb.profile_step(model, x, _sq, opt, recipe=Recipe(lora="r=8"), module_depth=None)
    # adapters on both linears: A (r x in) and B (out x r)
    adapters = (8 * 64 + 256 * 8 + 8 * 256 + 64 * 8) * F32
    assert rep.first.mark("after backward")["gradients"] == adapters
    assert rep.steady.mark("after optimizer step")["optimizer state"] == 2 * adapters + 4 * 4
    assert list(model.state_dict()) == keys and all(p.requires_grad for p in model.parameters())


def test_rebuild_optimizer_keeps_the_users_settings():
    from vramnb._optim import rebuild_optimizer

    p = nn.Parameter(torch.ones(3))
    for opt in (torch.optim.AdamW([nn.Parameter(torch.ones(2))], lr=0.01, weight_decay=0.3, betas=(0.8, 0.9)),
                torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.2, momentum=0.5, nesterov=True),
                torch.optim.Adam([nn.Parameter(torch.ones(2))], lr=torch.tensor(0.01))):
        opt.param_groups[0]["lr"] = opt.param_groups[0]["lr"] * 0.5  # a scheduler changed it
        new = rebuild_optimizer(opt, [p])
        assert type(new) is type(opt) and new.param_groups[0]["params"] == [p]
        for k, v in opt.param_groups[0].items():
            if k != "params":
                assert (torch.equal(v, new.param_groups[0][k]) if isinstance(v, torch.Tensor) else v == new.param_groups[0][k]), k
        if isinstance(opt.param_groups[0]["lr"], torch.Tensor):
            assert new.param_groups[0]["lr"] is not opt.param_groups[0]["lr"]


@pytest.mark.parametrize("toggles, fragment", [
    ({"precision": "bf16"}, r"toggles\['precision'\] must be a list of settings"),
    (["precision"], "toggles must be a dict"),
])
def test_compare_bad_toggles_are_clear(setup, toggles, fragment):
    model, opt, batch = setup
    with pytest.raises(ValueError, match=fragment):
        vramnb.compare(model, batch, lm_loss, opt, toggles=toggles, progress=False)


def test_compare_one_recipe_instead_of_a_list_is_clear(setup):
    model, opt, batch = setup
    with pytest.raises(ValueError, match="recipes must be a list"):
        vramnb.compare(model, batch, lm_loss, opt, recipes=Recipe(precision="bf16"), progress=False)


def test_technique_edits_are_undone_also_without_restore():
    model, x = _mlp(), torch.randn(8, 64)
    model[0].register_forward_hook(lambda *a: None)
    flags = [p.requires_grad for p in model.parameters()]
    fwd = dict(model[0].__dict__).get("forward")
    vramnb.profile_step(model, x, _sq, None, recipe=Recipe(freeze="first half of blocks", checkpointing="every block"),
                        restore=False, module_depth=None)
    assert [p.requires_grad for p in model.parameters()] == flags
    assert dict(model[0].__dict__).get("forward") is fwd


def test_lora_on_gpt2_shows_the_user_no_library_warnings():
    pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    import warnings

    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 50, (2, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vramnb.profile_step(model, {"input_ids": ids, "labels": ids}, optimizer=torch.optim.AdamW(model.parameters()),
                            recipe={"lora": "r=8"})
    assert not [str(w.message) for w in caught if "fan_in_fan_out" in str(w.message) or w.category is FutureWarning]


def test_a_block_shared_by_every_position_is_found_and_checkpointed_at_each_call():
    """ModuleList([blk] * 8): one module called 8 times (children() lists it once). It is the
    block; wrapped once, every call is checkpointed: the saved activations drop to the blocks'
    inputs, and the estimate of that step is exact on CPU."""
    from vramnb.techniques.checkpointing import find_blocks

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            blk = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
            self.layers = torch.nn.ModuleList([blk] * 8)
            self.head = torch.nn.Linear(64, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = x + layer(x)
            return self.head(x).sum()

    torch.manual_seed(0)
    net, x = Tied(), torch.randn(512, 64)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    assert find_blocks(net) == [net.layers[0]]
    plain = vramnb.profile_step(net, x, None, opt)
    ck = vramnb.profile_step(net, x, None, opt, recipe={"checkpointing": "every block"})
    # plain, at its peak: the 8 calls' GELU input and output (512×256 fp32 each) and the block inputs
    # after the batch (7 × 512×64); checkpointed: a few 512×64 block inputs, never a 512×256
    assert plain.steady.peak.sources["activations"] == 4 * 512 * (8 * (256 + 256) + 7 * 64)
    assert ck.steady.peak.sources["activations"] < 4 * 512 * 256 * 2
    est = vramnb.estimate(net, x, None, opt, recipe={"checkpointing": "every block"}, device="cpu")
    assert est.peak_allocated == ck.steady.peak.allocated - ck.steady.peak.sources["other"]  # the step's own
