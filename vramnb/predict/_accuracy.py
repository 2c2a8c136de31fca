"""How sure an estimate is: what the zoo benchmark measured, by kind of step.

A step's *kinds* are decided from what the step contains, never from a model's
name: :class:`StepOps` watches the torch functions the fake step calls (the
same Python-level calls the user's code and its libraries make) and
:func:`classify` turns them, with the model's modules, into kinds:

* ``rnn``: an ``nn.RNNBase`` module (LSTM, GRU, RNN) or a call of the RNN ops;
* ``conv3d``: a convolution over a 5-D input (``Conv3d``, ``ConvTranspose3d``);
* ``convolutional``: 1-D or 2-D convolutions;
* ``sdpa-causal``: attention through ``F.scaled_dot_product_attention``, every
  call with ``is_causal=True`` in a fused kernel (decoders);
  ``sdpa``: any other (an encoder's, a mask, the math path);
* ``matmul-attention``: attention written out: a softmax over the output of a
  product of two activations (``matmul``/``bmm``/``baddbmm``/``einsum``, no
  parameter among the operands), as T5 or ``nn.MultiheadAttention`` with
  ``need_weights=True`` do;
* ``moe``: a mixture of experts: a top-k (or argmax) over a dimension whose
  size is a number of experts (identical sibling modules, or the leading
  dimension of a 3-D parameter holding them fused), with the routing's
  index/scatter ops;
* ``other``: none of these (an MLP).

Each kind carries the step's precision, ``/16-bit`` (a product, convolution,
attention or RNN computed in float16/bfloat16: autocast or a 16-bit model) or
``/fp32``: CUDA takes other kernels in 16-bit (cuDNN attention and RNNs).
Kinds are features, not nested families: a step has all of its kinds and its
expected error is the worst of theirs (a broad family such as "transformer"
would pool every attention model's worst case onto each of them).

:data:`MEASURED` holds per kind the errors the benchmark measured (printed by
``benchmarks/zoo/accuracy_table.py`` from a results JSON), :data:`SOURCE` the
run they come from. :func:`expected_error` reads them for a step's kinds and
:func:`safe_margin` turns the worst under-estimate into the margin with which
:func:`vramnb.max_batch_size` keeps its answer inside the card.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ._allocator import LARGE_BUFFER

__all__ = ["META_SHORT", "MEASURED", "ROUNDING", "SOURCE", "ExpectedError", "StepOps", "classify", "expected_error",
           "safe_margin", "safety_basis"]

KINDS = ("rnn", "conv3d", "convolutional", "sdpa-causal", "sdpa", "matmul-attention", "moe", "other")
PRECISIONS = ("fp32", "16-bit")

#: the most the caching allocator reserves beyond an allocation it was not told of: a request under
#: 10 MiB may open a 20 MiB segment of its own (``kLargeBuffer``); larger ones round up to 2 MiB
ROUNDING = LARGE_BUFFER

# -- the operators that decide kinds ------------------------------------------------------
_PRODUCTS = ("bmm", "baddbmm")  # what matmul/einsum of activations of 3+ dimensions dispatch to (2-D: mm)
_COMPUTE = ("bmm", "baddbmm", "mm", "addmm", "convolution", "_cudnn_rnn")  # their output dtype is the precision
_ROUTING_REDUCE = ("topk", "argmax", "max")
_ROUTING_INDEX = ("index_add", "index_add_", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
                  "scatter_reduce_", "index_select", "gather", "nonzero", "bincount")
_RNN_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn", "lstm_cell", "gru_cell", "_thnn_fused_lstm_cell",
            "_thnn_fused_gru_cell")
_HALF = (torch.float16, torch.bfloat16)
#: operators whose meta kernel (``torch/_meta_registrations.py``), which the fake step runs, gives outputs of
#: other sizes than the CPU's real kernel: name -> what the estimate misses (said in a CPU estimate's notes)
META_SHORT = {
    "mkldnn_rnn_layer": ("nn.LSTM on the CPU runs oneDNN's kernel, whose meta kernel gives its workspace 0 bytes: "
                         "the real kernel keeps one for backward, many times the layer's output (16× for 256 units "
                         "over 65 steps of 8 sequences, torch 2.13), so activations are under-estimated; "
                         "vramnb.profile_step measures the real step"),
}
_NAMES = frozenset(_PRODUCTS + _COMPUTE + _ROUTING_REDUCE + _ROUTING_INDEX + _RNN_OPS + tuple(META_SHORT)
                   + ("_softmax", "convolution"))
_WATCHED: dict[Any, str | None] = {}  # operator overload -> its name where it decides kinds, else None
_UNSEEN = object()


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _key(t: torch.Tensor) -> tuple[int, int]:
    """A product's output and the softmax over it, matched through the views between
    them (``matmul`` of 4-D tensors runs a 3-D ``bmm``): elements and last dimension."""
    return (t.numel(), int(t.shape[-1]))


class StepOps(TorchDispatchMode):
    """Watches the ATen operators a step runs (after autocast, inside every library
    function) and keeps what decides its kinds: counts and shapes, no tensor.

    Attributes:
        sdpa: calls of a fused attention kernel (``_scaled_dot_product_*``; the math
            path runs as products and a softmax, counted by the CUDA model's backends).
        sdpa_causal: those of them with ``is_causal=True``.
        backends: the CUDA model's kernel choices -> calls while this watched the step.
        cudnn_causal: the CUDA model's cuDNN attention calls with ``is_causal=True`` (modelled in
            Python, so no ATen attention call to see).
        products: ``(elements, last dim)`` of ``bmm``/``baddbmm`` outputs of 3+ dimensions.
        softmax: ``(elements, last dim)`` of each softmax input of 3+ dimensions, in call order.
        conv_dims: input dimensions of the convolutions (4: 2-D, 5: 3-D).
        rnn: calls of the RNN operators.
        routed: sizes of the dimensions reduced by ``topk``/``argmax``/``max(dim)`` in the forward.
        indexing: calls of index/scatter operators in the forward (a mixture of experts' dispatch;
            the forward is where grad mode is on: backward and the optimizer run without it).
        half: a product, convolution, attention or RNN returned a float16/bfloat16 tensor.
    """

    def __init__(self, policy: Any = None) -> None:
        super().__init__()
        self._policy = policy  # the CUDA model (its choices are read when the watched step ends), or None
        self.backends: dict[str, int] = {}
        self.cudnn_causal = 0
        self.sdpa = 0
        self.sdpa_causal = 0
        self.products: set[tuple[int, int]] = set()
        self.softmax: list[tuple[int, int]] = []
        self.conv_dims: set[int] = set()
        self.rnn = 0
        self.meta_short: dict[str, int] = {}  # calls of the operators of META_SHORT
        self.routed: set[int] = set()
        self.indexing = 0
        self.half = False

    def __exit__(self, *exc: object) -> Any:
        if self._policy is not None:
            self.backends = dict(self._policy.backends)
            self.cudnn_causal = self._policy.cudnn_causal
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = _WATCHED.get(func, _UNSEEN)
        if name is _UNSEEN:
            n = func.overloadpacket.__name__
            name = _WATCHED[func] = n if n in _NAMES or n.startswith("_scaled_dot_product_") else None
        if isinstance(name, str):  # a name (not None), where it decides kinds
            with contextlib.suppress(Exception):  # watching never changes the step
                self._see(name, args, out)
                if self._is_sdpa(name):
                    self.sdpa_causal += bool(_argument(func, args, kwargs or {}, "is_causal"))
        return out

    @staticmethod
    def _is_sdpa(name: str) -> bool:
        return name.startswith("_scaled_dot_product_") and "backward" not in name and "math" not in name

    def _see(self, name: str, args: tuple, out: Any) -> None:
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if self._is_sdpa(name):
            self.sdpa += 1
            self._precision(out)
        elif name in _PRODUCTS:
            if isinstance(out, torch.Tensor) and out.dim() >= 3:
                self.products.add(_key(out))
        elif name == "_softmax" and x is not None and x.dim() >= 3:
            self.softmax.append(_key(x))
        elif name == "convolution" and x is not None:
            self.conv_dims.add(x.dim())
        elif not torch.is_grad_enabled():  # backward (topk's scatters its gradient) or the optimizer: no routing
            pass
        elif name in _ROUTING_REDUCE and x is not None and x.dim() and (len(args) > 1 or name == "topk"):
            dim = (args[2] if len(args) > 2 else -1) if name == "topk" else args[1]
            if isinstance(dim, int):
                self.routed.add(int(x.shape[dim]))
        elif name in _ROUTING_INDEX:
            self.indexing += 1
        if name in _RNN_OPS:
            self.rnn += 1
        if name in META_SHORT:
            self.meta_short[name] = self.meta_short.get(name, 0) + 1
        if name in _COMPUTE or name in _RNN_OPS:
            self._precision(out)

    def _precision(self, out: Any) -> None:
        if not self.half:
            t = _first_tensor(out)
            self.half = t is not None and t.dtype in _HALF


def _argument(func: Any, args: tuple, kwargs: Mapping, name: str) -> Any:
    """An operator's argument by its name in the schema (positional or keyword)."""
    if name in kwargs:
        return kwargs[name]
    names = [a.name for a in func._schema.arguments]
    i = names.index(name)
    return args[i] if i < len(args) else func._schema.arguments[i].default_value


def _expert_counts(model: nn.Module) -> set[int]:
    """How many experts a module could hold: the length of a list of identical
    sibling modules with parameters (same class, same parameter shapes), and the
    leading dimension of a 3-D parameter (experts' weights fused in one tensor)."""
    out: set[int] = set()
    for m in model.modules():
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and len(m) >= 2:
            kids = list(m.values()) if isinstance(m, nn.ModuleDict) else list(m)
            shapes = {(type(k), tuple(tuple(p.shape) for p in k.parameters())) for k in kids}
            if len(shapes) == 1 and any(True for _ in kids[0].parameters()):
                out.add(len(kids))
    for p in model.parameters():
        if p.dim() == 3 and p.shape[0] >= 2:
            out.add(int(p.shape[0]))
    return out


_ATTENTION_BACKENDS = ("flash", "efficient", "math", "cudnn")


def classify(model: nn.Module, ops: StepOps) -> tuple[str, ...]:
    """The kinds of a step (see the module's docstring), each with its precision, e.g.
    ``("sdpa/16-bit",)``; ``("other/fp32",)`` when no kind applies.

    Args:
        model: the step's model (its modules: RNNs, experts).
        ops: what :class:`StepOps` saw while the step ran, with the attention backends
            the CUDA model chose meanwhile: ``math`` runs as products and a softmax, which
            are then SDPA's, not attention written out.
    """
    backends = ops.backends
    kinds: list[str] = []
    if ops.rnn or any(isinstance(m, nn.RNNBase) for m in model.modules()):
        kinds.append("rnn")
    if 5 in ops.conv_dims:
        kinds.append("conv3d")
    if ops.conv_dims & {3, 4}:
        kinds.append("convolutional")
    attention = sum(n for b, n in backends.items() if b in _ATTENTION_BACKENDS)
    if ops.sdpa or attention:
        # causal attention only (decoders) takes other kernels than attention over every position;
        # the math path's flags are not seen: plain "sdpa", the kind that holds both. cuDNN's
        # attention is modelled in Python (no ATen call to see): the CUDA model counts its causal calls
        fused = ops.sdpa + backends.get("cudnn", 0)
        causal_calls = ops.sdpa_causal + ops.cudnn_causal
        causal = fused and causal_calls == fused and not backends.get("math")
        kinds.append("sdpa-causal" if causal else "sdpa")
    if sum(1 for k in ops.softmax if k in ops.products) > backends.get("math", 0):
        kinds.append("matmul-attention")
    if ops.indexing and ops.routed & _expert_counts(model):
        kinds.append("moe")
    precision = "16-bit" if ops.half else "fp32"
    return tuple(f"{k}/{precision}" for k in (kinds or ["other"]))


# zoo benchmark run15: 2026-12-01, NVIDIA H200, torch 2.11.0 (real steps); estimates re-run with torch 2.14.1, CUDA hidden;
# 265 steps (81 of the validation third)
# printed by benchmarks/zoo/accuracy_table.py; fractions: (estimate - real) / real
# validation third apart (steady peak allocated):
#   conv3d/16-bit: 5 steps, median 0.52%, worst +0.66%, under-estimates 2 of 5
#   conv3d/fp32: 4 steps, median 0.07%, worst -0.10%, under-estimates 2 of 4
#   convolutional/16-bit: 10 steps, median 0.35%, worst -5.44%, under-estimates 6 of 10
#   convolutional/fp32: 7 steps, median 0.04%, worst +0.17%, under-estimates 2 of 7
#   matmul-attention/16-bit: 6 steps, median 0.17%, worst +0.66%, under-estimates 0 of 6
#   matmul-attention/fp32: 5 steps, median 0.10%, worst +0.17%, under-estimates 0 of 5
#   rnn/16-bit: 12 steps, median 2.86%, worst -26.25%, under-estimates 12 of 12
#   rnn/fp32: 7 steps, median 1.58%, worst +4.56%, under-estimates 5 of 7
#   sdpa-causal/16-bit: 11 steps, median 0.53%, worst -1.37%, under-estimates 2 of 11
#   sdpa-causal/fp32: 4 steps, median 0.31%, worst -0.71%, under-estimates 2 of 4
#   sdpa/16-bit: 13 steps, median 0.46%, worst -5.44%, under-estimates 4 of 13
#   sdpa/fp32: 10 steps, median 0.06%, worst -0.64%, under-estimates 3 of 10
SOURCE: dict[str, str] = {
    "benchmark": "zoo benchmark",
    "run": "run15",
    "date": "2026-12-01",
    "gpu": "NVIDIA H200",
    "torch": "2.11.0 (real steps); estimates re-run with torch 2.14.1, CUDA hidden",
}
MEASURED: dict[str, dict[str, dict[str, float | int]]] = {
    "conv3d/16-bit": {
        "peak": {"cases": 15, "median_abs": 0.001508, "worst": 0.006595, "under": 6, "worst_under": -0.005462},
        "device": {"cases": 15, "median_abs": 0.027513, "worst": -0.220918, "under": 8, "worst_under": -0.220918},
    },
    "conv3d/fp32": {
        "peak": {"cases": 10, "median_abs": 0.000663, "worst": -0.00175, "under": 5, "worst_under": -0.00175},
        "device": {"cases": 10, "median_abs": 0.144781, "worst": -0.188123, "under": 9, "worst_under": -0.188123},
    },
    "convolutional/16-bit": {
        "peak": {"cases": 48, "median_abs": 0.002687, "worst": -0.054427, "under": 28, "worst_under": -0.054427},
        "device": {"cases": 48, "median_abs": 0.047339, "worst": 0.145383, "under": 34, "worst_under": -0.125891},
    },
    "convolutional/fp32": {
        "peak": {"cases": 38, "median_abs": 0.001854, "worst": -0.02568, "under": 24, "worst_under": -0.02568},
        "device": {"cases": 38, "median_abs": 0.021261, "worst": -0.216287, "under": 34, "worst_under": -0.216287},
    },
    "matmul-attention/16-bit": {
        "peak": {"cases": 13, "median_abs": 0.001442, "worst": 0.006595, "under": 1, "worst_under": -0.000949},
        "device": {"cases": 13, "median_abs": 0.004787, "worst": -0.061089, "under": 3, "worst_under": -0.061089},
    },
    "matmul-attention/fp32": {
        "peak": {"cases": 10, "median_abs": 0.000663, "worst": 0.001687, "under": 2, "worst_under": -0.000738},
        "device": {"cases": 10, "median_abs": 0.003969, "worst": -0.050842, "under": 5, "worst_under": -0.050842},
    },
    "other/16-bit": {
        "peak": {"cases": 8, "median_abs": 0.001345, "worst": 0.001805, "under": 0, "worst_under": 0.0},
        "device": {"cases": 8, "median_abs": 0.037466, "worst": -0.120673, "under": 6, "worst_under": -0.120673},
    },
    "other/fp32": {
        "peak": {"cases": 4, "median_abs": 0.00174, "worst": -0.012442, "under": 1, "worst_under": -0.012442},
        "device": {"cases": 4, "median_abs": 0.098635, "worst": -0.120712, "under": 3, "worst_under": -0.120712},
    },
    "rnn/16-bit": {
        "peak": {"cases": 22, "median_abs": 0.021783, "worst": -0.32753, "under": 18, "worst_under": -0.32753},
        "device": {"cases": 22, "median_abs": 0.037821, "worst": -0.129549, "under": 17, "worst_under": -0.129549},
    },
    "rnn/fp32": {
        "peak": {"cases": 13, "median_abs": 0.021858, "worst": 0.045592, "under": 8, "worst_under": -0.042408},
        "device": {"cases": 13, "median_abs": 0.069558, "worst": 0.180037, "under": 5, "worst_under": -0.079173},
    },
    "sdpa-causal/16-bit": {
        "peak": {"cases": 30, "median_abs": 0.004778, "worst": -0.013673, "under": 4, "worst_under": -0.013673},
        "device": {"cases": 30, "median_abs": 0.007653, "worst": -0.021066, "under": 7, "worst_under": -0.021066},
    },
    "sdpa-causal/fp32": {
        "peak": {"cases": 8, "median_abs": 0.003051, "worst": -0.007144, "under": 4, "worst_under": -0.007144},
        "device": {"cases": 8, "median_abs": 0.005438, "worst": -0.020627, "under": 1, "worst_under": -0.020627},
    },
    "sdpa/16-bit": {
        "peak": {"cases": 47, "median_abs": 0.004605, "worst": -0.054427, "under": 13, "worst_under": -0.054427},
        "device": {"cases": 47, "median_abs": 0.009167, "worst": 0.145383, "under": 21, "worst_under": -0.086875},
    },
    "sdpa/fp32": {
        "peak": {"cases": 40, "median_abs": 0.000895, "worst": -0.02568, "under": 17, "worst_under": -0.02568},
        "device": {"cases": 40, "median_abs": 0.005692, "worst": -0.216287, "under": 15, "worst_under": -0.216287},
    },
}


@dataclass(frozen=True)
class ExpectedError:
    """How far the estimate of a step of these kinds was from the real step in the
    zoo benchmark (:data:`MEASURED`), the worst of the step's kinds.

    Attributes:
        kinds: the step's kinds (:func:`classify`).
        measured: the kinds with benchmark figures.
        missing: the kinds without (no figures for this kind of step yet).
        median: the largest median absolute error of the measured kinds (fraction; ``None``: no figures).
        worst: the signed worst error of the deciding kind (fraction, negative: under-estimated).
        worst_under: the most negative error of the measured kinds, steady peak allocated
            (fraction <= 0; 0.0 when none was under-estimated; ``None``: no figures).
        worst_under_device: the same for device memory (``None`` where not measured).
        cases, under: the deciding kind's cases and how many of them were under-estimated.
        kind: the deciding kind (the worst under-estimate, then the largest median).
        source: the run (``benchmark``, ``gpu``, ``torch``, ``date``, ``run``).
    """

    kinds: tuple[str, ...]
    measured: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    median: float | None = None
    worst: float | None = None
    worst_under: float | None = None
    worst_under_device: float | None = None
    cases: int = 0
    under: int = 0
    kind: str | None = None
    source: Mapping[str, str] = field(default_factory=dict)

    def note(self) -> str:
        """One line for the estimate's report."""
        if self.kind is None:
            return (f"expected error: no benchmark figures for this kind of step yet ({', '.join(self.kinds)}); "
                    "the estimate's accuracy on it is unknown")
        src = ", ".join(x for x in (self.source.get("gpu", "").replace("NVIDIA ", ""),
                                    f"torch {_short(self.source.get('torch', ''))}" if self.source.get("torch") else "")
                        if x)
        bench = self.source.get("benchmark", "zoo benchmark")
        line = (f"expected error ({bench}{', ' + src if src else ''}, {self.cases} steps of this kind: {self.kind}): "
                f"median {_pct(self.median)}, worst {_pct(self.worst, signed=True)}; "
                f"under-estimates {self.under} of {self.cases}")
        if len(self.measured) > 1:
            line += f" (the worst of its kinds {', '.join(self.measured)})"
        if self.missing:
            line += f"; no benchmark figures for {', '.join(self.missing)} yet"
        return line


def _short(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "?"
    s = f"{abs(x) * 100:.1f} %"
    return ("−" if x < 0 else "+") + s if signed and x != 0 else s


def expected_error(kinds: Iterable[str], table: Mapping[str, Any] | None = None,
                   source: Mapping[str, str] | None = None) -> ExpectedError:
    """The expected error of a step of ``kinds`` from ``table`` (default :data:`MEASURED`)."""
    table = MEASURED if table is None else table
    source = SOURCE if source is None else source
    kinds = tuple(kinds)
    have = [k for k in kinds if k in table and table[k].get("peak", {}).get("cases")]
    missing = tuple(k for k in kinds if k not in have)
    if not have:
        return ExpectedError(kinds, missing=missing, source=dict(source))
    peak = {k: table[k]["peak"] for k in have}
    deciding = min(have, key=lambda k: (peak[k]["worst_under"], -peak[k]["median_abs"]))
    devices = [table[k]["device"]["worst_under"] for k in have if table[k].get("device", {}).get("cases")]
    p = peak[deciding]
    return ExpectedError(kinds, tuple(have), missing, median=max(peak[k]["median_abs"] for k in have),
                         worst=p["worst"], worst_under=min(peak[k]["worst_under"] for k in have),
                         worst_under_device=min(devices) if devices else None, cases=int(p["cases"]),
                         under=int(p["under"]), kind=deciding, source=dict(source))


def safety_basis(expected: ExpectedError | None, table: Mapping[str, Any] | None = None
                 ) -> tuple[float | None, float | None, str]:
    """``(worst under-estimate of the peak, of device memory, why)`` that the safe mode of
    :func:`vramnb.max_batch_size` holds a step of ``expected``'s kinds to (fractions <= 0;
    ``None``: the table has no figures at all). A kind without figures is held to the worst
    under-estimate of every measured kind: nothing says it does better."""
    table = MEASURED if table is None else table
    if expected is None:
        return None, None, "no CUDA estimate: no benchmark figures"
    everything = [k for k in table if table[k].get("peak", {}).get("cases")]
    basis = expected
    why = f"the worst of steps of its kinds ({', '.join(expected.measured)})" if expected.measured else ""
    if expected.missing and everything:
        basis = expected_error(everything, table)
        why = (f"{why}; " if why else "") + (f"{', '.join(expected.missing)} without benchmark figures: held to the "
                                             f"worst of every measured kind ({basis.kind})")
    if basis.worst_under is None:
        return None, None, "no benchmark figures yet: nothing added"
    return basis.worst_under, basis.worst_under_device, f"{why} in the {basis.source.get('benchmark', 'zoo benchmark')}"


def safe_margin(margin: float, card: int, worst_under: float | None, worst_under_device: float | None = None,
                rounding: int = ROUNDING) -> float:
    """The margin that keeps the real step inside ``card`` bytes less ``margin`` when the
    estimate errs as badly as ``worst_under`` (the steady peak's worst under-estimate,
    ``estimate = real * (1 + u)``, ``u <= 0``) and ``worst_under_device`` (device memory's).

    The estimate's device memory ``d`` fits a margin ``m`` when ``d <= card * (1 - m)``. The
    real peak is then up to ``d / (1 + u)``, plus at most ``rounding`` bytes the allocator
    reserves for what it was not told of; it fits ``card * (1 - margin)`` when
    ``d <= (card * (1 - margin) - rounding) * (1 + u)``, a margin ``(card - that) / card``. Device memory (CUDA context
    included) holds the rounding already: ``d <= card * (1 - margin) * (1 + u_device)``.
    The larger of the two margins; ``margin`` itself where nothing was measured.

    The benchmark measures errors as fractions of whole steps at batches where
    activations dominate; a step whose batch-dependent part is a larger share of the
    card than there errs by a larger fraction (parameters and optimizer state are exact).
    """
    if worst_under is None:
        return margin
    room = card * (1 - margin)
    need = [(room - rounding) * (1 + min(worst_under, 0.0))]
    if worst_under_device is not None:
        need.append(room * (1 + min(worst_under_device, 0.0)))
    return max(margin, (card - min(need)) / card)
