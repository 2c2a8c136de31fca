"""Adversary 2026-12-04 #11 and #12: a ``torch.compile``'d model stays compiled through vramnb's entry points.

Dynamo keeps its compiled code per code object (one ``wrap_inline`` frame for every compiled
``nn.Module`` whose forward is PyTorch's): estimate's fake step under a dispatch mode made dynamo
mark that code skipped for good (#12), and compare's recipes filled its cache up to the recompile
limit (#11). A counting backend counts the compiled graph's runs and compilations exactly.
"""

from __future__ import annotations

import pytest
import torch

import vramnb

torch_dynamo = pytest.importorskip("torch._dynamo")
from torch._dynamo.eval_frame import _debug_get_cache_entry_list  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """Each test starts from empty dynamo caches: the compiled frame is shared by every compiled
    Sequential, so earlier tests' entries would count towards this one's recompile limit."""
    torch_dynamo.reset()


class Counting:
    """A backend that counts compilations and runs of what it compiled."""

    def __init__(self) -> None:
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: list) -> object:
        self.compiles += 1

        def run(*args: object) -> object:
            self.runs += 1
            return gm.forward(*args)

        return run


def _loss(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).sum()


def _compiled(backend: object) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    cm = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(cm.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    cm(x).sum().backward()  # compiled once, run once
    return cm, opt, x


def _cache(cm: torch.nn.Module) -> list:
    """The compiled entries of the frame dynamo compiles for a compiled nn.Module (wrap_inline's)."""
    return [e.code for e in _debug_get_cache_entry_list(cm.forward.__wrapped__.__code__)]


CALLS = {
    "estimate": lambda cm, x, opt: vramnb.estimate(cm, x, _loss, opt, target="24GiB"),
    "estimate cpu": lambda cm, x, opt: vramnb.estimate(cm, x, _loss, opt, device="cpu"),
    "max_batch_size": lambda cm, x, opt: vramnb.max_batch_size(cm, x, _loss, opt, target="1GiB", progress=False),
    "fit": lambda cm, x, opt: vramnb.fit(cm, x, _loss, opt, target="24GiB", progress=False),
    "profile_step": lambda cm, x, opt: vramnb.profile_step(cm, x, _loss, opt),
    "compare": lambda cm, x, opt: vramnb.compare(cm, x, _loss, opt, progress=False,
                                                 toggles={"precision": ["fp32", "bf16"], "batch_size": [None, 2]}),
    "panel run": lambda cm, x, opt: vramnb.panel(cm, x, _loss, opt, display=False).run(),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_compiled_model_keeps_running_its_compiled_graph(call: str) -> None:
    backend = Counting()
    cm, opt, x = _compiled(backend)
    cache = _cache(cm)
    assert (backend.compiles, backend.runs, len(cache)) == (1, 1, 1)
    CALLS[call](cm, x, opt)
    assert _cache(cm) == cache  # dynamo's cache for the user's code as found: nothing added, nothing dropped
    assert backend.compiles == 1  # vramnb compiled nothing
    runs = backend.runs
    for _ in range(3):
        cm(x).sum().backward()
    assert backend.runs - runs == 3  # every later step runs the compiled graph (0 before the fix: eager for good)
    assert backend.compiles == 1
    cm(torch.randn(5, 8)).sum().backward()  # a new shape still compiles, as it would without vramnb
    assert backend.compiles == 2


def test_compare_leaves_the_recompile_budget_to_the_user() -> None:
    """18 recipes (precision x mode x batch size) used to recompile the user's code until
    dynamo's recompile_limit (8) was spent: afterwards every compiled Sequential ran eagerly."""
    backend = Counting()
    cm, opt, x = _compiled(backend)
    vramnb.compare(cm, x, _loss, opt, progress=False,
                   toggles={"precision": ["fp32", "bf16"], "mode": ["train", "no_grad", "inference_mode"],
                            "batch_size": [None, 2, 8]})
    assert backend.compiles == 1 and len(_cache(cm)) == 1
    other = Counting()
    fresh = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8)), backend=other)  # shares the compiled frame
    fresh(torch.randn(3, 8))
    cm(torch.randn(5, 8))
    assert (other.compiles, other.runs) == (1, 1)
    assert backend.compiles == 2


def test_compiled_function_in_forward_and_loss_stays_compiled() -> None:
    """torch.compile of a function (called in forward, and as the loss) rather than of a module."""
    backend = Counting()

    @torch.compile(backend=backend)
    def act(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(t) * 2

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return act(self.lin(t))

    loss = torch.compile(_loss, backend=backend)
    model = Net()
    x = torch.randn(4, 8)
    loss(model, x).backward()
    compiles, runs = backend.compiles, backend.runs
    vramnb.estimate(model, x, loss, target="24GiB")
    vramnb.profile_step(model, x, loss)
    assert backend.compiles == compiles
    loss(model, x).backward()
    assert backend.compiles == compiles and backend.runs > runs  # compiled code ran, nothing recompiled


def test_reports_say_the_compiled_model_ran_eagerly() -> None:
    cm, opt, x = _compiled("eager")
    est = vramnb.estimate(cm, x, _loss, opt, target="24GiB")
    rep = vramnb.profile_step(cm, x, _loss, opt)
    for notes, what in ((est.notes, "the fake step"), (rep.notes, "the profiled steps")):
        said = [n for n in notes if n.startswith("torch.compile'd code")]
        assert said == [f"torch.compile'd code (the model) ran eagerly in {what} (torch.compiler.set_stance("
                        "'force_eager')), so that your compiled code's caches and recompile budget stay as they "
                        "were; its compiled kernels' memory may differ from these eager ones' (inductor fuses "
                        "operators and plans its own buffers)"]
    plain = torch.nn.Linear(8, 1)
    assert not [n for n in vramnb.estimate(plain, x, _loss, target="24GiB").notes if "torch.compile" in n]
    assert not [n for n in vramnb.profile_step(plain, x, _loss).notes if "torch.compile" in n]
    inner = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    inner[1].compile(backend="eager")  # compiled in place, as a submodule
    said = [n for n in vramnb.estimate(inner, x, _loss, target="24GiB").notes if "torch.compile" in n]
    assert len(said) == 1 and said[0].startswith("torch.compile'd code (1) ran eagerly in the fake step")


def test_users_stance_is_kept() -> None:
    from torch._dynamo import eval_frame

    cm, opt, x = _compiled("eager")
    with torch.compiler.set_stance("eager_on_recompile"):
        vramnb.estimate(cm, x, _loss, opt, target="24GiB")
        assert eval_frame._stance.stance == "eager_on_recompile"
    assert eval_frame._stance.stance == "default"


def test_estimate_of_a_model_compiled_in_place() -> None:
    """``m.compile()`` (a submodule, or the model) compiles the user's bound ``_call_impl``: the fake copy
    used to call it, reached the user's real module and was refused ("loss_fn uses the notebook's model")."""
    def build() -> torch.nn.Sequential:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    x = torch.randn(4, 8)
    plain = vramnb.estimate(build(), x, _loss, target="24GiB")
    for which in ("model", "submodule"):
        m = build()
        (m if which == "model" else m[0]).compile(backend="eager")
        est = vramnb.estimate(m, x, _loss, target="24GiB")
        assert est.peak_allocated == plain.peak_allocated
        assert m._compiled_call_impl is not None or m[0]._compiled_call_impl is not None  # the user's compile kept
