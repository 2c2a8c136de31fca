"""Optimizer choice: how much state each keeps per parameter.

SGD: none; SGD with momentum: one buffer (1 × parameter bytes); Adam/AdamW:
``exp_avg`` and ``exp_avg_sq`` (2 ×; Kingma & Ba 2015; Loshchilov & Hutter 2019);
Adafactor: factored second moments, O(rows + columns) per matrix (Shazeer &
Stern 2018; ``torch.optim.Adafactor``, torch >= 2.5); Lion: one momentum
buffer (Chen et al. 2023, ``lion-pytorch``); 8-bit AdamW: both moments in 8 bits,
about a quarter of AdamW's state (Dettmers et al. 2022; bitsandbytes or torchao).
The new optimizer covers the model's trainable parameters and takes the
learning rate of the user's optimizer (1e-3 without one).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from .._plan import StepPlan
from .registry import Technique, register


def _lr(plan: StepPlan) -> float:
    opt = plan.user_optimizer
    if opt is not None and opt.param_groups:
        lr = opt.param_groups[0].get("lr", 1e-3)
        return float(lr) if not isinstance(lr, torch.Tensor) else float(lr.item())
    return 1e-3


def _eight_bit() -> tuple[str, Any] | None:
    if torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None:
        import bitsandbytes as bnb

        return "bitsandbytes", bnb.optim.AdamW8bit
    if importlib.util.find_spec("torchao") is not None:
        try:
            from torchao.optim import AdamW8bit
        except ImportError:
            from torchao.prototype.low_bit_optim import AdamW8bit
        return "torchao", AdamW8bit
    return None


def build(value: str, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """A fresh optimizer of the named kind over ``params``."""
    if value == "SGD":
        return torch.optim.SGD(params, lr=lr)
    if value == "SGD momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if value == "Adam":
        return torch.optim.Adam(params, lr=lr)
    if value == "AdamW":
        return torch.optim.AdamW(params, lr=lr)
    if value == "AdamW foreach":
        return torch.optim.AdamW(params, lr=lr, foreach=True)
    if value == "AdamW fused":
        return torch.optim.AdamW(params, lr=lr, fused=True)
    if value == "Adafactor":
        return torch.optim.Adafactor(params, lr=lr)
    if value == "Lion":
        from lion_pytorch import Lion

        return Lion(params, lr=lr)
    if value == "AdamW 8-bit":
        found = _eight_bit()
        assert found is not None
        return found[1](params, lr=lr)
    raise ValueError(value)


@register
class OptimizerChoice(Technique):
    name = "optimizer"
    label = "optimizer"
    choices = ("yours", "SGD", "SGD momentum", "Adam", "AdamW", "AdamW foreach", "AdamW fused", "Adafactor", "Lion",
               "AdamW 8-bit")
    description = "optimizer state per parameter: SGD 0, momentum 1x, Adam(W) 2x, Lion 1x, Adafactor ~0, 8-bit AdamW ~0.5x"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why this optimizer cannot run here (torch too old for Adafactor, lion-pytorch or an 8-bit library not
        installed, PyTorch refusing fused/foreach on the device, 8-bit in an estimate), or ``None``."""
        if value == "Adafactor" and not hasattr(torch.optim, "Adafactor"):
            return f"torch.optim.Adafactor needs torch >= 2.5 (this is {torch.__version__})"
        if value == "Lion" and importlib.util.find_spec("lion_pytorch") is None:
            return "Lion comes from lion-pytorch: pip install lion-pytorch"
        if value == "AdamW 8-bit" and plan.modelled:
            return "estimates do not model 8-bit optimizers (their kernels are CUDA-only); measure on the GPU"
        if value == "AdamW 8-bit" and _eight_bit() is None:
            extra = "bitsandbytes (CUDA) or torchao"
            return f"8-bit AdamW needs {extra}: pip install bitsandbytes, or pip install torchao"
        if value in ("AdamW fused", "AdamW foreach"):
            probe = torch.zeros(1, device=plan.device, requires_grad=True)
            try:
                build(value, [torch.nn.Parameter(probe)], 1e-3)
            except (RuntimeError, ValueError) as e:
                return f"PyTorch refuses {value} on {plan.device}: {e}"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Replace the step's optimizer by a fresh one of kind ``value`` over the parameters that require grad,
        with your optimizer's first learning rate (1e-3 without one)."""
        params = [p for p in plan.model.parameters() if p.requires_grad]
        plan.optimizer = build(value, params, _lr(plan))
        if value == "AdamW 8-bit":
            plan.optimizer_state_bits = 8  # promised: checked against the state after the step (vramnb._no_effect)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"optimizer SGD"``."""
        return f"optimizer {value}"

    @classmethod
    def code(cls, value: Any, device_type: str = "cuda", model: Any = None, name: str = "model") -> str:
        """The line that builds this optimizer in your loop: ``optimizer = torch.optim.SGD(model.parameters(),
        lr=lr)``; ``"# your optimizer"`` for ``"yours"``."""
        lines = {"SGD": "torch.optim.SGD(model.parameters(), lr=lr)",
                 "SGD momentum": "torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)",
                 "Adam": "torch.optim.Adam(model.parameters(), lr=lr)",
                 "AdamW": "torch.optim.AdamW(model.parameters(), lr=lr)",
                 "AdamW foreach": "torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)",
                 "AdamW fused": "torch.optim.AdamW(model.parameters(), lr=lr, fused=True)",
                 "Adafactor": "torch.optim.Adafactor(model.parameters(), lr=lr)",
                 "Lion": "lion_pytorch.Lion(model.parameters(), lr=lr)",
                 "AdamW 8-bit": "bitsandbytes.optim.AdamW8bit(model.parameters(), lr=lr)  # or torchao.optim.AdamW8bit"}
        return f"optimizer = {lines[value]}" if value in lines else "# your optimizer"
