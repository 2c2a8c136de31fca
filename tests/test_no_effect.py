"""Techniques that silently do nothing (issue 13, must-have 3): checkpointing that
recomputed nothing, autocast that lowered no op, 8-bit optimizer state that
stayed 32-bit. profile_step, compare and the panel each say so in one line
(``StepReport.warnings``, from one observer: vramnb._no_effect)."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import vramnb
from tests.conftest import Tally
from vramnb._units import format_bytes


def sq(m, b):
    return m(b).square().mean()


RUNS = Tally()  # id of each Counted block, once per run of its forward (a C object: vramnb does not put it back)


class Counted(nn.Module):
    """A block that counts how often its forward runs (a recompute runs it again)."""

    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.lin = nn.Linear(n, n)

    @property
    def runs(self) -> int:
        return RUNS.count(id(self))

    def forward(self, x):
        RUNS.append(id(self))
        return torch.tanh(self.lin(x))


class Gated(nn.Module):
    """Checkpoints its block only in training mode, as Hugging Face layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Counted()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        if self.training:
            x = checkpoint(self.block, x, use_reentrant=False)
        else:
            x = self.block(x)
        return self.head(x)


class Elementwise(nn.Module):
    """Only elementwise ops: nothing autocast lowers."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.relu(x * self.w).sin()


def bf16_autocast(m, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return m(b).float().square().mean()


# -- (a) checkpointing --------------------------------------------------------
def test_checkpoint_gated_on_training_in_eval_is_said_and_in_train_recomputes():
    torch.manual_seed(0)
    model, x = Gated(), torch.randn(4, 8)
    model.eval()
    rep = vramnb.profile_step(model, x, sq, steps=2)
    assert model.block.runs == 2  # once per step: no checkpoint, no recompute
    (w,) = rep.warnings
    assert w.startswith("activation checkpointing did nothing: Gated.forward calls torch.utils.checkpoint, "
                        "but nothing was recomputed in backward: the model is in eval() mode")
    assert "call model.train()" in w
    assert "⚠ " + w in repr(rep) and w in rep._repr_mimebundle_()["text/html"]

    model.train()
    RUNS.clear()
    rep = vramnb.profile_step(model, x, sq, steps=2)
    assert model.block.runs == 4  # forward + recompute in backward, each step
    assert rep.warnings == []


def test_checkpointed_module_never_called_is_said():
    class Spare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(8, 1)
            self.unused = CkptBlock()

        def forward(self, x):
            return self.used(x)

    rep = vramnb.profile_step(Spare(), torch.randn(4, 8), sq)
    (w,) = rep.warnings
    assert w == ("activation checkpointing did nothing: CkptBlock.forward calls torch.utils.checkpoint (in unused), "
                 "but nothing was recomputed in backward: it was never called in the step")


class CkptBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return checkpoint(self.lin, x, use_reentrant=False)


def test_checkpoint_called_in_train_mode_is_not_flagged():
    class Uses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = CkptBlock()

        def forward(self, x):
            return self.block(x)

    assert vramnb.profile_step(Uses(), torch.randn(4, 8), sq).warnings == []


def test_checkpoint_wrapper_function_never_called_is_said():
    class Wrapper(nn.Module):  # as torch.distributed's CheckpointWrapper: the checkpoint function held
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.checkpoint_fn = functools.partial(checkpoint, use_reentrant=False)

        def forward(self, x):
            return self.checkpoint_fn(self.inner, x)

    model = nn.ModuleDict({"a": Wrapper(Counted()), "b": nn.Linear(8, 1)})
    rep = vramnb.profile_step(model, torch.randn(4, 8), lambda m, b: m["b"](b).square().mean())
    (w,) = rep.warnings
    assert w == ("activation checkpointing did nothing: 1 module(s) hold torch.utils.checkpoint as a wrapper (a), "
                 "but nothing was recomputed in backward: it was never called in the step")
    used = nn.ModuleDict({"a": Wrapper(Counted()), "b": nn.Linear(8, 1)})
    RUNS.clear()  # counted by id(): a freed Counted of an earlier test may have had this one's address
    assert vramnb.profile_step(used, torch.randn(4, 8), lambda m, b: m["b"](m["a"](b)).square().mean()).warnings == []
    assert used["a"].inner.runs == 4


@pytest.mark.parametrize("reentrant", [False, True])
def test_hugging_face_gradient_checkpointing_in_eval_is_said(reentrant):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    kwargs = {"use_reentrant": reentrant}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x; gradient_checkpointing_enable before
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    ids = torch.randint(0, 50, (2, 8))
    batch = {"input_ids": ids, "labels": ids}
    flagged = [n for n, m in model.named_modules() if getattr(m, "gradient_checkpointing", None) is True]
    assert flagged  # Hugging Face's own flag, set by gradient_checkpointing_enable()
    model.eval()
    (w,) = vramnb.profile_step(model, batch).warnings
    assert w.startswith(f"activation checkpointing did nothing: gradient checkpointing is enabled on {len(flagged)} "
                        f"module(s) ({', '.join(flagged[:4])}")
    assert w.endswith("the model is in eval() mode and Hugging Face checkpoints only in training mode; "
                      "call model.train() to checkpoint")
    model.train()
    assert vramnb.profile_step(model, batch).warnings == []


def test_vramnb_checkpointing_of_blocks_the_forward_never_runs_is_said():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Counted(), Counted()])
            self.spare = nn.ModuleList([Counted(), Counted()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model, x = Model(), torch.randn(4, 8)
    rep = vramnb.profile_step(model, x, sq, recipe={"checkpointing": "every block", "blocks": "spare"})
    (w,) = rep.warnings
    assert w == ("activation checkpointing: 2 of the 2 wrapped block(s) never ran in the step's forward "
                 "(spare.0, spare.1), so nothing of theirs was checkpointed: name the blocks the forward runs "
                 "with blocks='...'")
    RUNS.clear()
    rep = vramnb.profile_step(model, x, sq, recipe={"checkpointing": "every block", "blocks": "layers"})
    assert rep.warnings == []
    assert [b.runs for b in model.layers] == [4, 4]  # 2 steps x (forward + recompute)


def test_vramnb_checkpointing_in_a_forward_only_step_is_said():
    model = nn.Sequential(Counted(), Counted())
    rep = vramnb.profile_step(model, torch.randn(4, 8), sq, recipe={"checkpointing": "every block", "mode": "no_grad"})
    assert ("activation checkpointing recomputed nothing in backward for 2 of the 2 wrapped block(s) (0, 1): the step "
            "runs forward only (mode='no_grad'): there is no backward to recompute in") in rep.warnings


def test_vramnb_checkpointing_of_a_block_that_saves_nothing_is_said():
    model = nn.Sequential(nn.Linear(8, 8), nn.Identity(), nn.Linear(8, 8))
    rep = vramnb.profile_step(model, torch.randn(4, 8), sq, recipe={"checkpointing": "every block"})
    (w,) = rep.warnings
    assert w.startswith("activation checkpointing recomputed nothing in backward for 1 of the 3 wrapped block(s) (1): "
                        "they saved no tensor for backward")


# -- (b) autocast -------------------------------------------------------------
def test_autocast_around_only_elementwise_ops_is_said():
    rep = vramnb.profile_step(Elementwise(), torch.randn(4, 8), bf16_autocast, steps=2)
    (w,) = rep.warnings
    # one module call (the model) under autocast in each of the 2 steps
    assert w == ("torch.autocast('cpu', bfloat16) changed nothing: none of the 2 module call(s) under it produced a "
                 "bfloat16 output; autocast lowers only eligible ops (matmul, linear, convolution, attention): the "
                 "region's ops keep their input dtype, so it saves no memory")


def test_autocast_around_a_linear_is_not_flagged():
    assert vramnb.profile_step(nn.Linear(8, 8), torch.randn(4, 8), bf16_autocast).warnings == []


def test_recipe_bf16_on_an_elementwise_model_is_said():
    rep = vramnb.profile_step(Elementwise(), torch.randn(4, 8), sq, recipe={"precision": "bf16"}, steps=1)
    assert rep.warnings == ["torch.autocast('cpu', bfloat16) changed nothing: none of the 1 module call(s) under it "
                            "produced a bfloat16 output; autocast lowers only eligible ops (matmul, linear, "
                            "convolution, attention): the region's ops keep their input dtype, so it saves no memory"]


# -- (c) 8-bit optimizer state ------------------------------------------------
def _adamw_state_bytes(params) -> int:
    # AdamW: exp_avg and exp_avg_sq like the parameter (float32), and a float32 step tensor per parameter
    return sum(2 * p.numel() * 4 + 4 for p in params)


def test_8bit_recipe_that_falls_back_to_torch_adamw_is_said(monkeypatch):
    import vramnb.techniques.optimizer as optimizer

    monkeypatch.setattr(optimizer, "_eight_bit", lambda: ("torchao", torch.optim.AdamW))  # the fallback
    model = nn.Linear(64, 64)
    rep = vramnb.profile_step(model, torch.randn(4, 64), sq, recipe={"optimizer": "AdamW 8-bit"})
    n = 64 * 64 + 64
    total = _adamw_state_bytes(model.parameters())
    assert rep.warnings == [
        f"the recipe's 8-bit optimizer (AdamW) kept its state wide: {total / n:.1f} B of state per parameter "
        f"({format_bytes(total)} for {n} parameters; exp_avg float32, exp_avg_sq float32), where 8-bit moments "
        "take about 2.0 B: the step ran torch.optim.AdamW, not an 8-bit optimizer (a fallback)"]
    assert f"{total / n:.1f}" == "8.0"


class _Moments(torch.optim.Optimizer):
    """A stand-in for an 8-bit optimizer: two moments per parameter in ``dtype``."""

    dtype = torch.uint8

    def __init__(self, params) -> None:
        super().__init__(params, {})

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st["m1"] = torch.zeros_like(p, dtype=self.dtype)
                    st["m2"] = torch.zeros_like(p, dtype=self.dtype)


class Real8bit(_Moments):
    dtype = torch.uint8


class Fallback8bit(_Moments):
    dtype = torch.float32


def test_optimizer_named_8bit_with_8bit_state_is_not_flagged():
    model = nn.Linear(64, 64)
    assert vramnb.profile_step(model, torch.randn(4, 64), sq, Real8bit(model.parameters())).warnings == []


def test_optimizer_named_8bit_with_32bit_state_is_said():
    model = nn.Linear(64, 64)
    rep = vramnb.profile_step(model, torch.randn(4, 64), sq, Fallback8bit(model.parameters()))
    n = 64 * 64 + 64
    total = 2 * 4 * n
    assert rep.warnings == [
        f"Fallback8bit (8-bit by its name) kept its state wide: 8.0 B of state per parameter ({format_bytes(total)} "
        f"for {n} parameters; m1 float32, m2 float32), where 8-bit moments take about 2.0 B: its 8-bit path was "
        "not taken"]


def test_small_tensors_keeping_32bit_state_are_explained():
    model = nn.Linear(8, 8)  # 64 + 8 elements: under bitsandbytes' and torchao's 4096
    rep = vramnb.profile_step(model, torch.randn(4, 8), sq, Fallback8bit(model.parameters()))
    (w,) = rep.warnings
    assert w.endswith("bitsandbytes and torchao keep 32-bit state for tensors under 4096 elements, and most of "
                      "yours are smaller")
    assert f"({format_bytes(2 * 4 * 72)} for 72 parameters;" in w


def test_adamw_is_not_flagged():
    model = nn.Linear(64, 64)
    assert vramnb.profile_step(model, torch.randn(4, 64), sq, torch.optim.AdamW(model.parameters())).warnings == []


# -- the front-ends -----------------------------------------------------------
def test_compare_says_it_per_recipe():
    cmp = vramnb.compare(Elementwise(), torch.randn(4, 8), sq, recipes=[{"precision": "bf16"}], progress=False)
    recs = {r["recipe"]: r for r in cmp.to_records()}
    assert recs["baseline"]["warnings"] == []
    (w,) = recs["bf16 autocast"]["warnings"]
    assert w.startswith("torch.autocast('cpu', bfloat16) changed nothing")
    assert f"⚠ bf16 autocast: {w}" in repr(cmp)


def test_panel_says_it_under_the_run():
    pytest.importorskip("ipywidgets")
    model = Elementwise()  # the panel holds it weakly
    p = vramnb.panel(model, torch.randn(4, 8), sq, display=False)
    p.controls["precision"].value = "bf16"
    p.button.click()
    (w,) = p.results[0]["warnings"]
    assert w.startswith("torch.autocast('cpu', bfloat16) changed nothing")
    assert "vramnb-run-warning" in p.table.value and "changed nothing" in p.table.value
    assert f"⚠ {w}" in repr(p)


# -- more techniques of the same kind ------------------------------------------
@pytest.mark.parametrize("mode, said", [("no_grad", True), ("train", False)])
def test_activation_offload_that_moved_nothing_is_said(monkeypatch, mode, said):
    from vramnb.techniques.offload import ActivationOffload

    # save_on_cpu runs on a CPU model too (it pins only where CUDA is available); vramnb offers it only on GPUs
    monkeypatch.setattr(ActivationOffload, "unavailable", classmethod(lambda cls, value, plan: None))
    rep = vramnb.profile_step(nn.Sequential(nn.Linear(8, 8), nn.Tanh()), torch.randn(4, 8), sq,
                              recipe={"activation_offload": "CPU", "mode": mode})
    line = ("activation offload moved nothing to host memory: the step runs forward only (mode='no_grad'), so nothing "
            "is saved for backward")
    assert [w for w in rep.warnings if w.startswith("activation offload")] == ([line] if said else [])


def test_fp8_with_no_eligible_linear_is_refused_before_it_runs():
    model = nn.Sequential(nn.Linear(10, 24), nn.Linear(24, 3))  # no layer with both dimensions multiples of 16
    with pytest.raises(vramnb.techniques.Unavailable, match=r"fp8 would change nothing: none of the 2 nn.Linear "
                       r"layer\(s\) of Sequential has both dimensions divisible by 16"):
        vramnb.profile_step(model, torch.randn(4, 10), sq, recipe={"precision": "fp8"})


def test_freezing_what_is_already_frozen_is_refused():
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 1))
    model[0].weight.requires_grad_(False)
    with pytest.raises(vramnb.techniques.Unavailable, match=r"freezing 'embeddings' would change nothing: its 1 "
                       r"parameter\(s\) are already frozen"):
        vramnb.profile_step(model, torch.randint(0, 10, (4, 3)), lambda m, b: m(b).square().mean(),
                            recipe={"freeze": "embeddings"})
    assert model[0].weight.requires_grad is False and model[1].weight.requires_grad is True


def test_torch_checkpoint_wrapper_never_called_is_said_and_called_recomputes():
    cw = pytest.importorskip("torch.distributed.algorithms._checkpoint.checkpoint_wrapper")

    def model_of() -> nn.ModuleDict:
        return nn.ModuleDict({"a": cw.checkpoint_wrapper(Counted()), "b": nn.Linear(8, 1)})

    (w,) = vramnb.profile_step(model_of(), torch.randn(4, 8), lambda m, b: m["b"](b).square().mean()).warnings
    assert w == ("activation checkpointing did nothing: 1 module(s) hold torch.utils.checkpoint as a wrapper (a), "
                 "but nothing was recomputed in backward: it was never called in the step")
    used = model_of()
    used.eval()  # CheckpointWrapper checkpoints in eval() too: no gate on training
    RUNS.clear()
    assert vramnb.profile_step(used, torch.randn(4, 8), lambda m, b: m["b"](m["a"](b)).square().mean()).warnings == []
    assert RUNS.count(id(used["a"]._checkpoint_wrapped_module)) == 4


def test_reentrant_checkpointing_without_input_grads_is_said():
    class Layer(nn.Module):  # as a Hugging Face layer: a gradient_checkpointing flag, on
        gradient_checkpointing = True

        def __init__(self) -> None:
            super().__init__()
            self.block = Counted()

        def forward(self, x):
            if self.gradient_checkpointing and self.training:
                return checkpoint(self.block, x, use_reentrant=True)
            return self.block(x)

    model = nn.Sequential(Layer(), nn.Linear(8, 1))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own "None of the inputs have requires_grad=True"
        rep = vramnb.profile_step(model, torch.randn(4, 8), sq)  # the batch needs no grad
    (w,) = rep.warnings
    assert w == ("activation checkpointing did nothing: gradient checkpointing is enabled on 1 module(s) (0), but "
                 "nothing was recomputed in backward: the region's inputs do not require grad, and a reentrant "
                 "checkpoint (use_reentrant=True) then computes no gradient for it, so its parameters got none: pass "
                 "use_reentrant=False, or make the inputs require grad (Hugging Face: "
                 "model.enable_input_require_grads())")
    assert rep.steady.missing_grads == ["0.block.lin.weight", "0.block.lin.bias"]


class Fake4bit(_Moments):
    dtype = torch.uint8  # 8 bits where 4 were promised


def test_4bit_optimizer_whose_state_is_8bit_is_said():
    model = nn.Linear(64, 64)
    n = 64 * 64 + 64
    (w,) = vramnb.profile_step(model, torch.randn(4, 64), sq, Fake4bit(model.parameters())).warnings
    assert w == (f"Fake4bit (4-bit by its name) kept its state wide: 2.0 B of state per parameter "
                 f"({format_bytes(2 * n)} for {n} parameters; m1 uint8, m2 uint8), where 4-bit moments take about "
                 "1.0 B: its 4-bit path was not taken")


# -- on the GPU (skipped without CUDA) ------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
def test_cuda_autocast_of_the_wrong_device_type_is_said():
    model = nn.Linear(64, 64).cuda()
    x = torch.randn(8, 64, device="cuda")

    def cpu_autocast(m, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the wrong device type for a CUDA model
            return m(b).float().square().mean()

    (w,) = vramnb.profile_step(model, x, cpu_autocast).warnings
    assert w.endswith("the step's tensors are on cuda, and autocast('cpu') affects only cpu ops: use "
                      "torch.autocast('cuda', dtype=torch.bfloat16)")

    def cuda_autocast(m, b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return m(b).float().square().mean()

    assert vramnb.profile_step(model, x, cuda_autocast).warnings == []
    assert vramnb.profile_step(model, x, sq, recipe={"precision": "bf16"}).warnings == []


@pytest.mark.cuda
@cuda
def test_cuda_real_8bit_adamw_is_not_flagged_and_small_tensors_are_explained():
    from vramnb.techniques.optimizer import _eight_bit

    if _eight_bit() is None:
        pytest.skip("no bitsandbytes or torchao here")
    big = nn.Linear(256, 256).cuda()  # 65536 weight elements: 8-bit state
    assert vramnb.profile_step(big, torch.randn(8, 256, device="cuda"), sq,
                               recipe={"optimizer": "AdamW 8-bit"}).warnings == []
    small = nn.Linear(16, 16).cuda()  # 256 + 16 elements: under 4096, kept in 32 bits by both libraries
    (w,) = vramnb.profile_step(small, torch.randn(8, 16, device="cuda"), sq, recipe={"optimizer": "AdamW 8-bit"}).warnings
    assert "keep 32-bit state for tensors under 4096 elements" in w


@pytest.mark.cuda
@cuda
def test_cuda_checkpoint_recompute_on_the_engine_thread_is_seen():
    torch.manual_seed(0)
    model = Gated().cuda()
    x = torch.randn(4, 8, device="cuda")
    RUNS.clear()
    assert vramnb.profile_step(model, x, sq).warnings == []  # the recompute runs on the autograd engine's thread
    assert model.block.runs == 4
    model.eval()
    (w,) = vramnb.profile_step(model, x, sq).warnings
    assert "the model is in eval() mode" in w


def test_autocast_around_a_float64_model_is_said():
    model = nn.Linear(8, 8).double()  # autocast casts float32 only: a float64 linear stays float64
    (w,) = vramnb.profile_step(model, torch.randn(4, 8, dtype=torch.float64), bf16_autocast, steps=1).warnings
    assert w == ("torch.autocast('cpu', bfloat16) changed nothing: none of the 1 module call(s) under it produced a "
                 "bfloat16 output; autocast casts only float32 tensors, and the region's are float64")


def test_compare_says_a_line_every_recipe_has_once():
    model = Gated()
    model.eval()  # its checkpoint is gated on self.training: no recipe checkpoints it
    cmp = vramnb.compare(model, torch.randn(4, 8), sq, recipes=[{"optimizer": "SGD"}], progress=False)
    text = repr(cmp)
    (w,) = cmp.to_records()[0]["warnings"]
    assert all(r["warnings"] == [w] for r in cmp.to_records())
    assert text.count(w) == 1 and f"⚠ every recipe: {w}" in text
