"""estimate(), max_batch_size() and the caching-allocator model, on CPU.

A CPU estimate runs the same dispatch on fake tensors that a CPU step runs on
real ones, so it must agree with the CPU tracker's measurement byte for byte
(sources other than "other", which counts unrelated tensors of the process).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import assert_same_steps
from vramnb.predict._allocator import LARGE_BUFFER, MiB, SMALL_BUFFER, AllocatorModel, replay, round_size, segment_size
from vramnb.predict._cuda_model import LIBRARY_MEMORY
from vramnb._units import format_bytes
from vramnb.predict._gpus import GPUS

torch.manual_seed(0)


def _mlp():
    m = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    return m, (x, y), lambda mm, b: nn.functional.cross_entropy(mm(b[0]), b[1])


def _transformer():
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    m = nn.Sequential(nn.TransformerEncoder(layer, 3, enable_nested_tensor=False), nn.Flatten(), nn.Linear(64 * 16, 5))
    x, y = torch.randn(8, 16, 64), torch.randint(0, 5, (8,))
    return m, (x, y), lambda mm, b: nn.functional.cross_entropy(mm(b[0]), b[1])


def _cnn():
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    return m, (x, y), lambda mm, b: nn.functional.cross_entropy(mm(b[0]), b[1])


def _mine(bd):
    return {k: v for k, v in bd.sources.items() if k != "other"}


@pytest.mark.parametrize("make", [_mlp, _transformer, _cnn], ids=["mlp", "transformer", "cnn"])
@pytest.mark.parametrize("recipe", [None, {"precision": "bf16"}, {"checkpointing": "every block"},
                                    {"optimizer": "SGD momentum", "micro_batches": 2}],
                         ids=["plain", "bf16", "checkpointing", "momentum+micro"])
def test_cpu_estimate_equals_cpu_measurement(make, recipe):
    model, batch, loss_fn = make()
    opt = torch.optim.AdamW(model.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    est = vramnb.estimate(model, batch, loss_fn, opt, device="cpu", recipe=recipe)
    # the estimate touched nothing of the user's
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not opt.state and all(p.grad is None for p in model.parameters())
    real = vramnb.profile_step(model, batch, loss_fn, opt, recipe=recipe, module_depth=None)
    assert_same_steps(est, real, 2)
    # and the exact parameter bytes, from shapes
    n_param = sum(p.numel() * p.element_size() for p in model.parameters())
    assert est.steady.peak.sources["parameters"] == n_param
    assert est.steady.peak.sources["optimizer state"] == (2 * n_param + 4 * len(list(model.parameters()))
                                                          if not recipe or "optimizer" not in recipe else n_param)


def test_factory_and_meta_batch_use_no_memory():
    def factory():
        return nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))

    batch = torch.empty(64, 4096, device="meta")
    est = vramnb.estimate(factory, batch, lambda m, b: m(b).sum(), lambda p: torch.optim.SGD(p, lr=0.1), target="A100")
    n_param = 2 * (4096 * 4096 + 4096) * 4
    assert est.steady.peak.sources["parameters"] == 2 * round_size(4096 * 4096 * 4) + 2 * round_size(4096 * 4)
    assert est.steady.peak.sources["parameters"] >= n_param
    assert est.fits and est.target.name == "A100 (40 GB)"
    # outside PyTorch: the context, and cuBLAS's handles of the forward and backward threads (measured on an H200)
    assert est.outside_pytorch == est.target.context + LIBRARY_MEMORY["cublas:forward"] + LIBRARY_MEMORY["cublas:backward"]
    assert est.device_memory == est.peak_reserved + est.outside_pytorch
    assert est.peak_reserved >= est.peak_allocated >= est.steady.peak.total


def test_cuda_estimate_models_cuda_choices():
    model, batch, loss_fn = _transformer()
    est = vramnb.estimate(model, batch, loss_fn, torch.optim.AdamW(model.parameters()), target="H100")
    # memory-efficient attention on fp32; on bf16 flash (sdp_utils.cpp priorities), cuDNN's on Hopper (measured)
    assert est.backends == {"efficient": 6}
    bf = vramnb.estimate(model, batch, loss_fn, torch.optim.AdamW(model.parameters()), target="H100",
                         recipe={"precision": "bf16"})
    assert bf.backends == {"cudnn": 6}
    ampere = vramnb.estimate(model, batch, loss_fn, torch.optim.AdamW(model.parameters()), target="A100",
                             recipe={"precision": "bf16"})
    assert ampere.backends == {"flash": 6}
    old = vramnb.estimate(model, batch, loss_fn, torch.optim.AdamW(model.parameters()), target="V100",
                          recipe={"precision": "fp16"})
    assert old.backends == {"efficient": 6}  # no flash before compute capability 8.0
    # two cuBLAS workspaces (forward thread, backward thread) + cuBLASLt's on Hopper
    assert est.steady.peak.sources["workspace"] == 2 * 32 * MiB + 1 * MiB
    assert old.steady.peak.sources["workspace"] == 2 * (8 * MiB + 128 * 1024) + 1 * MiB
    # every storage is a whole number of 512-byte blocks
    assert all(v % 512 == 0 for v in est.steady.peak.sources.values())


def test_foreach_default_on_cuda_costs_a_copy_of_the_parameters():
    model, batch, loss_fn = _mlp()
    n_param = sum(round_size(p.numel() * 4) for p in model.parameters())
    cpu = vramnb.estimate(model, batch, loss_fn, torch.optim.Adam(model.parameters()), device="cpu")
    cuda = vramnb.estimate(model, batch, loss_fn, torch.optim.Adam(model.parameters()), target="H100")
    largest = max(round_size(p.numel() * 4) for p in model.parameters())
    # CUDA Adam defaults to foreach: its update holds sqrt(exp_avg_sq) of every parameter at once
    assert cuda.steady.phase_peaks["optimizer step"].sources["temporaries"] == n_param
    # the per-parameter loop (CPU's default) holds two temporaries of the parameter at hand
    assert 2 * largest <= cpu.steady.phase_peaks["optimizer step"].sources["temporaries"] < 2 * largest + 8192


def test_max_batch_size_is_the_largest_predicted_fit():
    model, batch, loss_fn = _mlp()
    card = 900 * MiB  # context and cuBLAS (749 MiB) + ~150 MiB for the allocator
    s = vramnb.max_batch_size(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), target=card,
                              progress=False, limit=1 << 16, safety="none")  # the search on the estimates as they are
    assert s.batch_size > 32
    at = vramnb.estimate(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), target=card,
                         batch_size=s.batch_size)
    above = vramnb.estimate(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), target=card,
                            batch_size=s.batch_size + 1)
    assert at.fits and not above.fits
    # line search, then bisection where the allocator's steps bend the line: at most log2(limit) + 3
    assert len(s.tried) <= (1 << 16).bit_length() + 3
    assert "largest batch that fits" in repr(s)
    # the table shows what "fits" weighs (newuser8: a size that fits showed more device memory than one that did
    # not, under a note saying the steps run within less than either): each size's peak allocated bytes
    assert sorted(s.peaks) == sorted(n for n, _, _ in s.tried)
    assert s.peaks[s.batch_size] == at.peak_allocated and s.peaks.get(s.batch_size + 1, above.peak_allocated) == \
        above.peak_allocated
    lines = repr(s).splitlines()
    assert lines[1].split() == ["batch", "size", "fits", "peak", "allocated", "device", "memory"]
    row = next(ln.split() for ln in lines[2:] if ln.split()[:1] == [str(s.batch_size)])
    assert " ".join(row[2:4]) == format_bytes(at.peak_allocated)


def test_bad_targets_and_arguments():
    model, batch, loss_fn = _mlp()
    with pytest.raises(ValueError, match="unknown GPU 'H900'.*A100 \\(40 GB\\)"):
        vramnb.estimate(model, batch, loss_fn, target="H900")
    for bad in (0, -5, "0GB"):
        with pytest.raises(ValueError, match="positive|invalid size"):
            vramnb.estimate(model, batch, loss_fn, target=bad)
    with pytest.raises(ValueError, match="device must be 'cuda'"):
        vramnb.estimate(model, batch, loss_fn, device="tpu")
    with pytest.raises(ValueError, match="margin"):
        vramnb.estimate(model, batch, loss_fn, margin=1.5)
    with pytest.raises(ValueError, match="batch must be a tensor"):
        vramnb.estimate(model, [1, 2], loss_fn)
    with pytest.raises(ValueError, match="not the model's"):
        vramnb.estimate(model, batch, loss_fn, torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1))
    with pytest.raises(ValueError, match="first dimensions"):
        vramnb.max_batch_size(model, (torch.randn(4, 256), torch.randint(0, 10, (5,))), loss_fn, progress=False)
    with pytest.raises(ValueError, match="weights or activations.*fake tensors have shapes, no data"):
        vramnb.estimate(model, batch, lambda m, b: m(b[0])[m(b[0])[:, 0] > 0].sum(), device="cpu")


def test_known_cards_resolve_by_short_name():
    for name in GPUS:
        short = name.split(" (")[0]
        assert vramnb.estimate.__module__  # the public name exists
        from vramnb.predict._estimate import resolve_target

        assert resolve_target(short.lower()).memory == GPUS[name] or short in ("V100", "A100")


# -- the allocator model ---------------------------------------------------------
def test_round_and_segment_sizes():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(1 * MiB) == SMALL_BUFFER
    assert segment_size(1 * MiB + 512) == LARGE_BUFFER
    assert segment_size(10 * MiB) == 10 * MiB
    assert segment_size(10 * MiB + 512) == 12 * MiB


def test_replay_splits_reuses_and_merges():
    r = replay([(1, 0, 1000), (2, 0, 3 * MiB), (1, 1000, 0), (3, 0, 1 * MiB), (2, 3 * MiB, 0), (4, 0, 15 * MiB)])
    assert r.allocated == [1024, 1024 + 3 * MiB, 3 * MiB, 4 * MiB, 1 * MiB, 16 * MiB]
    # one small segment (2 MiB) and one large (20 MiB); the freed 3 MiB merged back for the 15 MiB request
    assert r.reserved[-1] == SMALL_BUFFER + LARGE_BUFFER


def test_unsplit_block_counts_whole():
    # 19.5 MiB from a 20 MiB segment: less than 1 MiB would remain, so the block stays whole
    r = replay([(1, 0, 9 * MiB), (1, 9 * MiB, 0), (2, 0, 19 * MiB + MiB // 2)])
    assert r.allocated[-1] == 20 * MiB


def test_fragmentation_and_expandable_segments():
    # growing requests (variable sequence lengths): each no longer fits the freed segment before it
    ev = []
    for i, mib in enumerate((11, 13, 15, 17)):
        ev += [(i, 0, mib * MiB), (i, mib * MiB, 0)]
    plain = replay(ev)
    assert plain.reserved[-1] == (12 + 14 + 16 + 18) * MiB
    grow = replay(ev, expandable=True)  # one segment, grown in 20 MiB pages
    assert grow.reserved[-1] == LARGE_BUFFER
    # the plain allocator hands out its 12 MiB segment whole (less than 1 MiB would remain)
    assert plain.allocated[0] == 12 * MiB and grow.allocated[0] == 11 * MiB


def test_capacity_releases_cache_then_reports_oom():
    ev = [(1, 0, 30 * MiB), (1, 30 * MiB, 0), (2, 0, 40 * MiB)]
    ok = replay(ev, capacity=50 * MiB)  # the free 30 MiB segment goes back, then 40 MiB fits
    assert ok.oom_at is None and ok.reserved[-1] == 40 * MiB
    bad = replay(ev + [(3, 0, 20 * MiB)], capacity=50 * MiB)
    assert bad.oom_at == 3
    m = AllocatorModel()
    b = m.malloc(100)
    m.free(b)
    assert m.allocated == 0 and m.reserved == SMALL_BUFFER


def test_warm_optimizer_makes_one_step_steady():
    model, batch, loss_fn = _mlp()
    e = vramnb.estimate(model, batch, loss_fn, lambda p: torch.optim.Adam(p), device="cpu", steps=1, warm_optimizer=True)
    n_param = sum(p.numel() * 4 for p in model.parameters())
    assert e.steps[0].kind == "steady state"
    assert e.steps[0].mark("start").sources["optimizer state"] == 2 * n_param + 4 * len(list(model.parameters()))


@pytest.mark.cuda
def test_estimate_matches_a_real_cuda_step():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from transformers import GPT2Config, GPT2LMHeadModel

    for recipe in ({}, {"precision": "bf16"}):
        torch.cuda.empty_cache()
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_positions=512)).cuda()
        ids = torch.randint(0, 50257, (4, 512), device="cuda")
        batch = {"input_ids": ids, "labels": ids}
        opt = torch.optim.AdamW(model.parameters())
        est = vramnb.estimate(model, batch, None, opt, recipe=recipe or None)
        real = vramnb.profile_step(model, batch, None, opt, recipe=recipe or None, module_depth=None)
        err = (est.steady.peak.allocated - real.steady.peak.allocated) / real.steady.peak.allocated
        assert abs(err) < 0.03, (recipe, err)
        del model, opt, batch, ids


def test_vram_estimate_magic(ip):
    ip.run_cell("from torch import nn\nm = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))\n"
                "x = (torch.randn(16, 64), torch.randint(0, 4, (16,)))\n"
                "lf = lambda mm, b: nn.functional.cross_entropy(mm(b[0]), b[1])\n"
                "opt = torch.optim.AdamW(m.parameters())")
    r = ip.run_cell("%vram estimate m x lf opt --target A100 --recipe precision=bf16 -q -o e")
    r.raise_error()
    e = ip.user_ns["e"]
    assert isinstance(e, vramnb.Estimate) and e.target.name == "A100 (40 GB)" and e.fits
    assert e.steady.peak.sources["parameters"] == sum(round_size(p.numel() * 4) for p in ip.user_ns["m"].parameters())
    r = ip.run_cell("%vram estimate m x lf opt --target 1GiB --max-batch -q -o s")
    r.raise_error()
    assert isinstance(ip.user_ns["s"], vramnb.BatchSearch) and ip.user_ns["s"].batch_size > 16
    from IPython.core.error import UsageError

    for line, msg in (("%vram estimate m x lf opt --target H900", "unknown GPU"),
                      ("%vram estimate m x --recipe precision", "not name=value"),
                      ("%vram estimate m x --recipe precision=fp64", "precision"),
                      ("%vram estimate m", "usage: %vram estimate MODEL BATCH"),
                      ("%vram estimate m nope", "no variable named 'nope'"),
                      ("%vram --target A100", "does not take --target")):
        r = ip.run_cell(line)
        assert isinstance(r.error_in_exec, UsageError) and msg in str(r.error_in_exec), (line, r.error_in_exec)


def test_multi_gpu_sharding_divides_parameters_and_state():
    pytest.importorskip("torch.distributed.fsdp")
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])
    x = torch.randn(32, 1024)
    total = sum(p.numel() * 4 for p in model.parameters())
    one = vramnb.estimate(model, x, lambda m, b: m(b).sum(), lambda p: torch.optim.AdamW(p), device="cpu")
    for parallel in ("fsdp", "zero2"):
        e = vramnb.estimate(model, x, lambda m, b: m(b).sum(), lambda p: torch.optim.AdamW(p), device="cpu",
                            world_size=4, parallel=parallel)
        start = e.steady.mark("start").sources
        assert start["parameters"] == total // 4  # 1024 rows split evenly over 4 ranks
        assert start["optimizer state"] == 2 * total // 4 + 4 * 8  # exp_avg, exp_avg_sq shards + 8 step counters
        assert e.peak_allocated < one.peak_allocated
    ddp = vramnb.estimate(model, x, lambda m, b: m(b).sum(), lambda p: torch.optim.AdamW(p), device="cpu",
                          world_size=4, parallel="ddp")
    assert ddp.steady.mark("start").sources["workspace"] == total  # the gradient buckets
    assert ddp.steady.mark("start").sources["parameters"] == total
    with pytest.raises(ValueError, match="valid: ddp, fsdp, zero2, zero3"):
        vramnb.estimate(model, x, lambda m, b: m(b).sum(), world_size=2, parallel="zero4")
    with pytest.raises(ValueError, match="needs parallel="):
        vramnb.estimate(model, x, lambda m, b: m(b).sum(), world_size=2)


def test_magic_values_with_spaces_and_repeated_recipes(ip):
    ip.run_cell("from torch import nn\n"
                "m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))\n"
                "x = torch.randn(16, 64)\nlf = lambda mm, b: mm(b).sum()")
    r = ip.run_cell("%vram estimate m x lf --target \"A100 (80 GB)\" --recipe 'precision=bf16' "
                    "--recipe \"checkpointing=every block\" -q -o e")
    r.raise_error()
    e = ip.user_ns["e"]
    assert e.target.name == "A100 (80 GB)"
    assert e.recipe.changed() == {"precision": "bf16", "checkpointing": "every block"}
    r = ip.run_cell("%vram estimate m x lf --target 4090 -q -o e2")
    r.raise_error()
    assert ip.user_ns["e2"].target.name == "RTX 4090 (24 GB)"


def test_sharded_estimate_with_an_adamw_instance():
    pytest.importorskip("torch.distributed.fsdp")
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(2)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    e = vramnb.estimate(model, torch.randn(8, 256), lambda m, b: m(b).sum(), opt, device="cpu", world_size=2,
                        parallel="fsdp")
    total = sum(p.numel() * 4 for p in model.parameters())
    assert e.steady.mark("start").sources["optimizer state"] == 2 * total // 2 + 4 * 4
    assert not opt.state  # the user's optimizer untouched
    assert e.label.startswith("Sequential · AdamW"), e.label  # not FSDP's subclass name, FSDPSequential


@pytest.mark.parametrize("make_opt", [lambda p: torch.optim.AdamW(p), lambda p: torch.optim.Adafactor(p),
                                      lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)], ids=["adamw", "adafactor", "momentum"])
def test_optimizer_that_has_stepped_is_estimated_exactly(make_opt):
    if not hasattr(torch.optim, "Adafactor"):
        pytest.skip("torch.optim.Adafactor needs torch >= 2.5")
    model, batch, loss_fn = _mlp()
    opt = make_opt(model.parameters())
    loss_fn(model, batch).backward()
    opt.step()
    opt.zero_grad()
    state = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in st.items()} for p, st in opt.state.items()}
    est = vramnb.estimate(model, batch, loss_fn, opt, device="cpu")
    real = vramnb.profile_step(model, batch, loss_fn, opt, module_depth=None)
    assert all(s.kind == "steady state" for s in est.steps)
    for e, r in zip(est.steps, real.steps):
        assert _mine(e.peak) == _mine(r.peak)
    for p, st in opt.state.items():  # the user's state untouched
        for k, v in st.items():
            assert torch.equal(v, state[id(p)][k]) if isinstance(v, torch.Tensor) else v == state[id(p)][k]


def test_batch_containers_and_micro_batch_search():
    from collections import namedtuple

    Batch = namedtuple("Batch", "x y")
    model, (x, y), _ = _mlp()
    e = vramnb.estimate(model, Batch(x, y), lambda m, b: nn.functional.cross_entropy(m(b.x), b.y), device="cpu")
    assert e.steady.peak.sources["input batch"] == x.numel() * 4 + y.numel() * 8
    s = vramnb.max_batch_size(model, (x, y), lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
                              target="900MiB", recipe={"micro_batches": 4}, progress=False)
    assert s.batch_size % 4 == 0 and all(n % 4 == 0 for n, _, _ in s.tried)
    with pytest.raises(ValueError, match="leave batch_size out"):
        vramnb.max_batch_size(model, (x, y), lambda m, b: m(b[0]).sum(), target="900MiB", recipe={"batch_size": 4})


def test_inference_mode_takes_a_cublas_workspace_too():
    model, batch, _ = _mlp()
    for mode in ("no_grad", "inference_mode"):
        e = vramnb.estimate(model, batch[0], lambda m, b: m(b).sum(), target="H100", recipe={"mode": mode})
        assert e.steady.peak.sources["workspace"] == 32 * MiB + 1 * MiB  # the forward thread's handle only


def test_notebook_hooks_do_not_see_fake_tensors():
    model, batch, loss_fn = _mlp()
    kept = {}
    ns = {"kept": kept}
    exec("def hook(mod, inp, out):\n    kept['out'] = out.detach()\n", ns)  # defined in the notebook: __main__-like
    ns["hook"].__module__ = "__main__"
    h = model[0].register_forward_hook(ns["hook"])
    model(batch[0])
    real = kept["out"]
    model.table = [torch.zeros(256, 1024)]  # a tensor in a list attribute
    try:
        e = vramnb.estimate(model, batch, loss_fn, device="cpu")
    finally:
        h.remove()
        del model.table
    assert kept["out"] is real  # the user's dict still holds the real tensor
    assert any("hook(s) of your own were not run" in n for n in e.notes)


_CUDA_IN_THE_STEP = r'''
import sys, torch, vramnb
from torch import nn

def ctx(m, b):
    with torch.device("cuda"):
        z = torch.zeros(())
    return m(b).sum() + z

def default_device(m, b):
    torch.set_default_device("cuda")
    try:
        z = torch.zeros(())
    finally:
        torch.set_default_device(None)
    return m(b).sum() + z

class CudaInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g + torch.zeros((), device="cuda")

CASES = {
    "issue: zeros(1).sum()": lambda m, b: m(b).sum() + torch.zeros(1, device="cuda").sum(),
    "0-dim zeros": lambda m, b: m(b).sum() + torch.zeros((), device="cuda"),
    "zeros(3)": lambda m, b: m(b).sum() + torch.zeros(3, device="cuda"),
    "torch.tensor": lambda m, b: m(b).sum() + torch.tensor(1.0, device="cuda"),
    "as_tensor": lambda m, b: m(b).sum() + torch.as_tensor([1.0], device="cuda").sum(),
    "full": lambda m, b: m(b).sum() * torch.full((), 2.0, device="cuda"),
    "scalar_tensor": lambda m, b: m(b).sum() * torch.scalar_tensor(2.0, device="cuda"),
    "randn": lambda m, b: m(b).sum() + torch.randn((), device="cuda"),
    "arange": lambda m, b: m(b).sum() + torch.arange(1, device="cuda").float().sum(),
    "zeros_like": lambda m, b: m(b).sum() + torch.zeros_like(m(b).sum(), device="cuda"),
    "new_zeros": lambda m, b: m(b).sum() + b.new_zeros((), device="cuda"),
    "torch.device kwarg": lambda m, b: m(b).sum() + torch.ones(1, device=torch.device("cuda", 0)).sum(),
    ".cuda()": lambda m, b: m(b).sum().cuda(),
    ".cuda() of a constant": lambda m, b: m(b).sum() * torch.ones(()).cuda(),
    ".to('cuda')": lambda m, b: m(b).sum().to("cuda"),
    ".to(torch.device)": lambda m, b: m(b).sum().to(torch.device("cuda", 0)),
    ".to(device=)": lambda m, b: m(b).sum().to(device="cuda:0"),
    ".type(torch.cuda.FloatTensor)": lambda m, b: m(b).sum().type(torch.cuda.FloatTensor),
    "copy_ into a CUDA tensor": lambda m, b: torch.empty((), device="cuda").copy_(m(b).sum()),
    "requires_grad leaf": lambda m, b: m(b).sum() + (torch.ones(3, device="cuda", requires_grad=True) * 2).sum().cpu(),
    "a module built on cuda": lambda m, b: m(b).sum() + nn.Linear(4, 1, device="cuda")(torch.ones(4, device="cuda")).sum(),
    "torch.device context": ctx,
    "set_default_device": default_device,
    "in backward": lambda m, b: CudaInBackward.apply(m(b)).sum(),
    "mps": lambda m, b: m(b).sum() + torch.zeros((), device="mps"),
    "device=0": lambda m, b: m(b).sum() + torch.zeros((), device=0),
    "new_tensor": lambda m, b: m(b).sum() + b.new_tensor(1.0, device="cuda"),
    "eye": lambda m, b: m(b).sum() + torch.eye(1, device="cuda").sum(),
    "empty_strided": lambda m, b: m(b).sum() + torch.empty_strided((1,), (1,), device="cuda").sum(),
    "a real constant .to('cuda')": lambda m, b: m(b).sum() + torch.ones(1, dtype=torch.float64).to("cuda").sum(),
    "a CUDA generator": lambda m, b: m(b).sum() + torch.randn((), generator=torch.Generator(device="cuda")),
}
if not torch.cuda.is_available():  # CUDA calls that work where there is a GPU
    CASES["torch.cuda.synchronize()"] = lambda m, b: (torch.cuda.synchronize(), m(b).sum())[1]
    CASES["torch.cuda.FloatTensor(1)"] = lambda m, b: m(b).sum() + torch.cuda.FloatTensor(1).sum()
    CASES["torch.cuda.Stream()"] = lambda m, b: (torch.cuda.Stream(), m(b).sum())[1]
    CASES["device=torch.cuda.current_device()"] = lambda m, b: m(b).sum() + torch.zeros((), device=torch.cuda.current_device())
print(len(CASES), flush=True)
for name, fn in CASES.items():
    for where in ({"target": "A100"}, {"device": "cpu"}):
        print(name, where, end=": ", flush=True)
        try:
            vramnb.estimate(nn.Linear(16, 4), torch.randn(8, 16), fn, **where)
            print("no error", flush=True)
        except Exception as e:
            print(type(e).__name__, str(e).replace("\n", " "), flush=True)
print("optimizer factory", end=": ", flush=True)
try:
    vramnb.estimate(nn.Linear(16, 4), torch.randn(8, 16), lambda m, b: m(b).sum(),
                    lambda p: torch.optim.Adam(p, lr=torch.tensor(0.01, device="cuda")), target="A100")
    print("no error", flush=True)
except Exception as e:
    print(type(e).__name__, str(e).replace("\n", " "), flush=True)
'''


def test_cuda_tensors_made_in_the_step_are_refused_not_fatal():
    """A fake ``cuda`` tensor on a PyTorch without CUDA aborts the process in autograd
    (exit 134): every way of making one in the step is refused with a ValueError first.
    In a subprocess, since the failure kills the interpreter."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CUDA_IN_THE_STEP], capture_output=True, text=True, timeout=600)
    n, *lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, (proc.returncode, lines[-1:], proc.stderr[-2000:])
    assert len(lines) == 2 * int(n) + 1 and int(n) >= 27
    for line in lines:
        assert ": ValueError " in line and "device of the model or batch" in line, line
    assert sum("makes a tensor on cuda:0" in line for line in lines) >= 40


def test_a_cuda_default_device_does_not_reach_the_fake_step():
    """With ``torch.set_default_device("cuda")`` the step's device-less factories make the
    card's tensors: fake CPU ones in the estimate, not fake CUDA ones (refused, or fatal)."""
    torch.set_default_device("cuda")
    try:
        e = vramnb.estimate(lambda: nn.Linear(16, 4), torch.empty(8, 16, device="meta"),
                            lambda m, b: m(b).sum() + torch.zeros(()), target="A100")
    finally:
        torch.set_default_device(None)
    assert e.steady.peak.sources["parameters"] == round_size(16 * 4 * 4) + round_size(4 * 4)


@pytest.mark.parametrize("batch, found", [
    (torch.tensor(3.0), "(batch of shape ())"),
    ({"a": torch.tensor(1.0), "b": torch.tensor(2)}, "(batch['a'] of shape (), batch['b'] of shape ())"),
    ([torch.tensor(1.0)], "(batch[0] of shape ())"),
    ([], "(an empty list, no tensors)"),
], ids=["0-dim", "dict of scalars", "list of a scalar", "empty list"])
def test_a_batch_without_a_batch_dimension_is_named(batch, found):
    model = nn.Linear(16, 4)
    with pytest.raises(ValueError, match="no batch dimension") as e:
        vramnb.max_batch_size(model, batch, lambda m, b: m(torch.ones(2, 16)).sum(), target="A100", progress=False)
    assert found in str(e.value) and "first dimension is the batch size" in str(e.value)
    with pytest.raises(ValueError, match="no batch dimension"):
        vramnb.estimate(model, batch, lambda m, b: m(torch.ones(2, 16)).sum(), target="A100", batch_size=4)


def test_bad_input_to_estimate_and_max_batch_size_says_what_to_do():
    model, batch, loss_fn = _mlp()
    with pytest.raises(ValueError, match="batch\\[0\\] is a int; a batch must be a tensor"):
        vramnb.max_batch_size(model, [1, 2], loss_fn, target="A100", progress=False)
    with pytest.raises(ValueError, match="first dimensions \\[4, 5\\] \\(batch\\[0\\] of shape \\(4, 256\\), "
                                         "batch\\[1\\] of shape \\(5,\\)\\)"):
        vramnb.max_batch_size(model, (torch.randn(4, 256), torch.randint(0, 10, (5,))), loss_fn, progress=False)
    with pytest.raises(ValueError, match="recipe must be a vramnb.Recipe or a dict.*not str"):
        vramnb.max_batch_size(model, batch, loss_fn, target="A100", recipe="bf16", progress=False)
    with pytest.raises(ValueError, match="micro_batches='x': give a positive integer"):
        vramnb.max_batch_size(model, batch, loss_fn, target="A100", recipe={"micro_batches": "x"}, progress=False)
    with pytest.raises(ValueError, match="margin must be a fraction.*not -0.1"):
        vramnb.max_batch_size(model, batch, loss_fn, target="A100", margin=-0.1, progress=False)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, not 0"):
        vramnb.estimate(model, batch, loss_fn, target="A100", batch_size=0)
    with pytest.raises(ValueError, match="the model factory is called with no arguments"):
        vramnb.estimate(lambda n: nn.Linear(4, n), torch.randn(8, 4), lambda m, b: m(b).sum(), target="A100")
    with pytest.raises(ValueError, match="the optimizer factory is called with the list of trainable parameters"):
        vramnb.estimate(model, batch, loss_fn, lambda: None, target="A100")
    with pytest.raises(ValueError, match="the step pins host memory.*pin the batch before the step"):
        vramnb.estimate(model, batch, lambda m, b: loss_fn(m, (b[0].pin_memory(), b[1])), target="A100")
    with pytest.raises(ValueError, match="expandable_segments must be True or False"):
        vramnb.estimate(model, batch, loss_fn, target="A100", expandable_segments="yes")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="the model factory puts tensors on CUDA"):
            vramnb.estimate(lambda: nn.Linear(4, 4, device="cuda"), torch.randn(8, 4), lambda m, b: m(b).sum(),
                            target="A100")


def test_lazy_models_nested_batches_and_torchscript_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="is a TorchScript module.*estimate the Python module"):
        vramnb.estimate(torch.jit.script(nn.Linear(16, 4)), torch.randn(8, 16), lambda m, b: m(b).sum(), target="A100")
    with pytest.raises(ValueError, match="LazyLinear has parameters not made yet \\(weight, bias"):
        vramnb.estimate(nn.LazyLinear(4), torch.randn(8, 16), lambda m, b: m(b).sum(), target="A100")
    nested = torch.nested.nested_tensor([torch.randn(2, 16), torch.randn(3, 16)])
    for call in (lambda: vramnb.estimate(nn.Linear(16, 4), nested, lambda m, b: m(b).sum(), target="A100"),
                 lambda: vramnb.max_batch_size(nn.Linear(16, 4), {"x": nested}, lambda m, b: m(b["x"]).sum(),
                                               target="A100", progress=False)):
        with pytest.raises(ValueError, match="is a nested \\(ragged\\) tensor.*pad it"):
            call()


def test_a_tuple_batch_without_loss_fn_that_forward_cannot_take_is_named():
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    with pytest.raises(ValueError, match=r"model\(\*batch\).*cannot take that"):
        vramnb.estimate(torch.nn.Linear(8, 2), (x, y))


def test_an_rnn_estimate_runs_cudnn_and_says_how_sure_it_is():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.rnn = nn.GRU(16, 16, batch_first=True)
            self.head = nn.Linear(16, 50)

        def forward(self, ids):
            return self.head(self.rnn(self.emb(ids))[0]).float().logsumexp(-1).mean()

    ids = torch.randint(0, 50, (2, 8))
    est = vramnb.estimate(LM(), ids, target="A100")
    assert est.backends == {"cudnn rnn": 2}  # one cuDNN kernel per step for the sequence, not a loop of cells
    assert est.expected_error.kinds == ("rnn/fp32",)
    assert any(n.startswith("expected error") and "rnn/fp32" in n for n in est.notes)
    on_cpu = vramnb.estimate(LM(), ids, device="cpu")  # a CPU estimate runs the CPU kernels themselves
    assert on_cpu.backends == {} and on_cpu.expected_error is None


class _ConvertsInForward(nn.Module):
    """A module that converts a submodule in its forward, as Switch Transformers' router does
    (``self.classifier = self.classifier.to(self.dtype)``)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.inner = nn.Linear(64, 64)
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        self.inner = self.inner.to(self.dtype)
        return self.head(self.inner(x.to(self.dtype)).float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["to-own-dtype", "to-float64"])
def test_a_forward_that_converts_a_submodule_is_estimated_exactly(dtype):
    # PyTorch swaps fake parameters on .to(), which the fake mode's weak references refuse
    # ("_apply(): Couldn't swap Linear.weight"); the fake copy converts them as real modules are
    model, x = _ConvertsInForward(dtype), torch.randn(32, 64)
    opt = torch.optim.AdamW(model.parameters())
    est = vramnb.estimate(model, x, lambda m, b: m(b).sum(), opt, device="cpu")
    assert model.inner.weight.dtype == torch.float32  # the user's model was not converted
    real = vramnb.profile_step(model, x, lambda m, b: m(b).sum(), opt, module_depth=None)
    assert model.inner.weight.dtype == torch.float32  # nor by the measurement, which restores it
    # the steady step equal; in the first step of the float64 case, the measurement's snapshot
    # (kept to restore the model) holds the fp32 weights that set_data replaced, which a plain step frees
    steps = list(zip(est.steps, real.steps))
    for e, r in steps if dtype == torch.float32 else steps[1:]:
        assert _mine(e.peak) == _mine(r.peak)
    size = dtype.itemsize
    n_param = (64 * 64 + 64) * size + (64 * 4 + 4) * 4
    assert est.steady.peak.sources["parameters"] == n_param


def _gpt2():
    import transformers as tf

    torch.manual_seed(0)
    gpt = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2))
    ids = torch.randint(0, 256, (4, 32))
    return gpt, {"input_ids": ids, "labels": ids}, None


@pytest.mark.parametrize("make", [_mlp, _gpt2], ids=["mlp", "gpt2"])
def test_lora_estimate_equals_cpu_measurement(make):
    # peft builds each adapter during the fake step and moves it .to its base layer: the conversion must not swap
    model, batch, loss_fn = make()
    opt = torch.optim.AdamW(model.parameters())
    recipe = {"lora": "r=8"}
    est = vramnb.estimate(model, batch, loss_fn, opt, device="cpu", recipe=recipe)
    real = vramnb.profile_step(model, batch, loss_fn, opt, recipe=recipe, module_depth=None)
    assert len(est.steps) == len(real.steps) == 2
    for e, r in zip(est.steps, real.steps):
        # each source at each mark: the adapters are parameters from the first step's start (they were
        # activations there, first seen when the forward used them), their gradients gradients
        for (mark, eb), (_, rb) in zip(e.marks, r.marks):
            assert _mine(eb) == _mine(rb), (e.kind, mark)
        assert _mine(e.peak) == _mine(r.peak)
    assert torch.nn.Module._apply is torch.nn.Module.__dict__["_apply"]


def test_lora_adapters_are_parameters_gradients_and_state_from_the_first_step():
    """Exact bytes from shapes: r=8 on both Linear(64, 64) adds A (8 x 64) and B (64 x 8) to each."""
    pytest.importorskip("peft")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    est = vramnb.estimate(model, torch.randn(8, 64), lambda m, b: m(b).square().mean(),
                          lambda p: torch.optim.AdamW(p, foreach=False), device="cpu", recipe={"lora": "r=8"})
    base = 2 * (64 * 64 + 64) * 4
    adapters = 2 * (8 * 64 + 64 * 8) * 4
    first = est.steps[0]
    assert first.mark("start")["parameters"] == base + adapters
    assert first.mark("after backward")["gradients"] == adapters
    # AdamW: exp_avg and exp_avg_sq of each adapter, and a float32 step per adapter tensor (4)
    assert first.mark("after optimizer step")["optimizer state"] == 2 * adapters + 4 * 4
    for step in est.steps:
        assert step.mark("after backward")["activations"] == 0
        # the first forward saves what the steady one does (no adapter counted as saved)
        assert step.mark("after forward")["activations"] == est.steady.mark("after forward")["activations"]


@pytest.mark.parametrize("make_x", [lambda: torch.randn(1, 256).expand(64, 256),
                                    lambda: torch.randn(256).expand(64, 256),
                                    lambda: torch.randn(64, 1).expand(64, 256)], ids=["rows", "1d", "columns"])
def test_an_expanded_batch_is_its_real_storage(make_x):
    # stride 0: 64 rows share one row's memory; the fake keeps the real strides and storage size
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 4))
    x = make_x()
    opt = torch.optim.AdamW(model.parameters())
    est = vramnb.estimate(model, x, lambda m, b: m(b).sum(), opt, device="cpu")
    real = vramnb.profile_step(model, x, lambda m, b: m(b).sum(), opt, module_depth=None)
    assert len(est.steps) == len(real.steps) == 2
    for e, r in zip(est.steps, real.steps):
        assert _mine(e.peak) == _mine(r.peak)
        assert e.peak.sources["input batch"] == x.untyped_storage().nbytes() < x.numel() * x.element_size()


@pytest.mark.parametrize("nested", [False, True], ids=["whole", "inside"])
def test_a_torch_export_module_is_estimated_exactly(nested):
    """``torch.export.export(...).module()`` holds bound methods of itself (its input-checking hook):
    the copy read its attributes before copying it and met it again through them, without end
    (RecursionError). Now each source at each mark is the measured step's, and the module is left
    as it was."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 4))
    x = torch.randn(4, 256)
    exported = torch.export.export(net, (x,)).module()
    model = nn.Sequential(exported, nn.Linear(4, 4)) if nested else exported
    before = {k: v.clone() for k, v in model.state_dict().items()}
    nodes = [n.name for n in exported.graph.nodes]
    hooks = dict(exported._forward_pre_hooks)
    loss_fn = lambda m, b: m(b).square().mean()  # noqa: E731
    est = vramnb.estimate(model, x, loss_fn, lambda p: torch.optim.AdamW(p, foreach=False), device="cpu")
    assert [n.name for n in exported.graph.nodes] == nodes and dict(exported._forward_pre_hooks) == hooks
    assert all(torch.equal(v, before[k]) and type(v) is torch.Tensor for k, v in model.state_dict().items())
    params = sum(p.numel() * 4 for p in model.parameters())
    assert est.steps[0].mark("start")["parameters"] == params
    assert est.steps[0].mark("after backward")["gradients"] == params
    real = vramnb.profile_step(model, x, loss_fn, torch.optim.AdamW(model.parameters(), foreach=False),
                               module_depth=None)
    for e, r in zip(est.steps, real.steps):
        for (mark, eb), (_, rb) in zip(e.marks, r.marks):
            assert _mine(eb) == _mine(rb), (e.kind, mark)


class _SelfHelper:
    """Holds a method bound to its module, and copies itself through ``__deepcopy__``."""

    def __init__(self, fn):
        self.fn = fn

    def __deepcopy__(self, memo):
        import copy

        return _SelfHelper(copy.deepcopy(self.fn, memo))


class _ReducingNet(nn.Module):
    """A module with a copy protocol of its own whose attribute reaches back to it through a bound
    method held by another object with its own protocol (what an exported module's hook does)."""

    def __init__(self):
        super().__init__()
        self.helper = _SelfHelper(self.forward)
        self.lin = nn.Linear(64, 64)

    def forward(self, x):
        return self.lin(x)

    def __reduce_ex__(self, proto):
        return nn.Module.__reduce_ex__(self, proto)


def test_a_module_reached_back_through_an_attributes_copy_protocol_is_copied_with_fakes():
    """The attribute's own protocol copies the module before the module's pre-pass is done: its
    parameters must already be fakes then (they were real copies, or the copy recursed)."""
    from torch._subclasses.fake_tensor import FakeTensor

    from vramnb.predict._fake import new_mode
    from vramnb.predict._fake_model import fake_model

    torch.manual_seed(0)
    net = _ReducingNet()
    copied = fake_model(net, new_mode())[0]
    assert all(isinstance(p, FakeTensor) for p in copied.parameters())
    assert copied.helper.fn.__self__ is copied and net.helper.fn.__self__ is net
    x = torch.randn(8, 64)
    loss_fn = lambda m, b: m(b).square().mean()  # noqa: E731
    est = vramnb.estimate(net, x, loss_fn, lambda p: torch.optim.AdamW(p, foreach=False), device="cpu")
    real = vramnb.profile_step(net, x, loss_fn, torch.optim.AdamW(net.parameters(), foreach=False), module_depth=None)
    for e, r in zip(est.steps, real.steps):
        for (mark, eb), (_, rb) in zip(e.marks, r.marks):
            assert _mine(eb) == _mine(rb), (e.kind, mark)


def test_a_dtensor_parameter_is_refused_naming_the_way_around():
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
        net[0].weight = nn.Parameter(DTensor.from_local(net[0].weight.detach(), mesh, [Shard(0)]))
        with pytest.raises(ValueError, match=r"parameter '0.weight' is a sharded DTensor .*world_size=N, parallel='fsdp'"):
            vramnb.estimate(net, torch.randn(4, 16), lambda m, b: m(b).sum(), None, device="cpu")
        # a replicated one holds the whole tensor on each rank: estimated as it is (its bytes, from shapes)
        net[0].weight = nn.Parameter(DTensor.from_local(torch.randn(16, 16), mesh, [Replicate()]))
        est = vramnb.estimate(net, torch.randn(4, 16), lambda m, b: m(b).sum(), None, device="cpu")
        assert est.steady.peak.sources["parameters"] == (16 * 16 + 16 + 16 * 4 + 4) * 4
    finally:
        dist.destroy_process_group()
