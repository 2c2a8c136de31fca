"""What an estimate says about the values a step read: the notes (``read from your batch: ...``),
the user's line that read them, and the error for values it does not have
(see :mod:`vramnb.predict._batch_values`, which finds them)."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from .._units import format_bytes

__all__ = ["CONSTANTS", "META", "RANDOMLY", "Read", "line_of", "notes", "refusal", "shown", "user_line", "whose"]

CONSTANTS = 64 * 2**20
"""Bytes: a shadow of constants alone (a factory such as ``torch.arange``, a real CPU constant) above this
size is not kept (the same bound as for values from the batch). It was 64 KiB, so that large constant masks
nothing reads went unshadowed; but position ids grow with the batch: Hugging Face's packed-sequence check
(``masking_utils.find_packed_sequence_indices``, a ``diff`` of batch x sequence int64 position ids) then
stayed fake, ``is_tracing`` said yes, and the estimate built the causal mask that the real step drops
(with it SDPA's kernel: Mistral fp32 with checkpointing, GPU run 20, peak -36 %)."""
META = "meta"  # values derived from a meta batch: there are none
RANDOMLY = 2  # the origin of values drawn by the estimate's own generator (1: the batch, 0: constants)
_READS = {"_local_scalar_dense": "a tensor's value (.item(), bool(tensor), int(tensor), float(tensor), .tolist())",
          "equal": "torch.equal"}


@dataclass
class Read:
    """One value the step read: the operator, the user's line, what it gave."""

    op: str
    where: str
    source: str
    value: str
    batch: int  # from the batch's values (1), from constants of the step (0), from a random draw (_RANDOMLY)


def _skip_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__))]
    paths = sysconfig.get_paths()
    lib = paths.get("stdlib")
    if lib and not any(paths.get(k, "").startswith(lib) for k in ("purelib", "platlib")):
        dirs.append(lib)
    return tuple(os.path.join(d, "") for d in dirs)


_SKIP = _skip_dirs()
_LIBS = tuple(os.path.join(d, "") for d in {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")} if d)


def whose(where: str) -> str:
    """Whose code the line ``where`` (``file:line``, as :func:`user_line` gives it) is: ``"your code"``,
    or an installed package's (a file under site-packages: transformers, torch_geometric...)."""
    path = where.rsplit(":", 1)[0].removeprefix("the backward pass started by ")
    for lib in _LIBS + tuple(os.path.join(d, "") for d in sys.path if d.endswith(("site-packages", "dist-packages"))):
        if path.startswith(lib):
            top = path[len(lib):].split(os.sep)[0].removesuffix(".py")
            return f"the installed package {top}"
    return "your code"


def user_line() -> tuple[str, str]:
    """``("file:line", source text)`` of the innermost frame outside torch, vramnb and the standard library
    (in the backward pass: the line that started it, said so)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    backward = "the backward pass started by " if task is not None and task() != -1 else ""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith("<frozen"):
            return f"{backward}{name}:{f.f_lineno}", linecache.getline(name, f.f_lineno).strip()
        f = f.f_back
    return f"{backward}an unknown line", ""


def line_of(err: BaseException) -> tuple[str, str]:
    """:func:`user_line` for where ``err`` was raised (its traceback's innermost frame of the user's)."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    for name, line in reversed(frames):
        if not name.startswith(_SKIP) and not name.startswith("<frozen"):
            return f"{name}:{line}", linecache.getline(name, line).strip()
    return "an unknown line", ""



def shown(real: Any) -> str:
    """What a read gave, for the notes: a value, or the shapes of the tensors it made."""
    if isinstance(real, torch.Tensor):
        return f"shape {tuple(real.shape)}"
    if isinstance(real, (list, tuple)):
        return "shapes " + ", ".join(str(tuple(r.shape)) for r in real if isinstance(r, torch.Tensor))
    return repr(real)


def refusal(op: str, where: str, source: str, reason: str | None, limit: int) -> ValueError:
    """The error for a value the estimate does not have: ``reason`` :data:`META` (a meta batch), ``"large"``
    (through a tensor larger than it keeps, ``limit`` bytes from the batch) or ``None`` (weights, activations)."""
    name = f"aten.{op}"
    what = _READS.get(op, "its output's shape follows the input's values")
    line = f"`{name}` ({what}) at {where} of {whose(where)}" + (f" (`{source}`)" if source else "")
    if reason == META:
        return ValueError(f"the step reads a value of your batch: {line}; but the batch is on the meta device and "
                          "has no values. Pass a real batch (e.g. one batch from your DataLoader, on the CPU: "
                          "only its values are read, nothing is allocated on the device)")
    if reason is not None:
        return ValueError(f"the step reads a value computed through a tensor larger than the estimate keeps "
                          f"values for ({format_bytes(limit)} derived from your batch, "
                          f"{format_bytes(min(limit, CONSTANTS))} of constants alone): {line}. Measure the step with "
                          "vramnb.profile_step on the real device")
    return ValueError(f"the step needs a tensor's value that does not come from your batch: {line} reads a value "
                      "computed from the model's weights or activations, which an estimate does not compute (fake "
                      "tensors have shapes, no data). Measure the step with vramnb.profile_step on the real device, "
                      "or make the step not read it (no .item(), bool(tensor) or boolean indexing on activations)")


def notes(reads: list[Read], repeated: str = "") -> list[str]:
    """One line per place that read values: ``read from your batch: `op` at file:line = value``
    (``repeated``: how a resized batch was made from the user's)."""
    grouped: dict[tuple[str, str, int], list[Read]] = {}
    for r in reads:
        grouped.setdefault((r.op, r.where, r.batch), []).append(r)
    lines = []
    for (op, where, batch), rs in grouped.items():
        values = list(dict.fromkeys(r.value for r in rs))
        shown_ = ", ".join(values[:4]) + (", ..." if len(values) > 4 else "")
        src = f" (`{rs[0].source}`)" if rs[0].source else ""
        times = f" ({len(rs)} reads)" if len(rs) > 1 else ""
        origin = (f"read from your batch{repeated}" if batch == 1 else "read from constants of the step"
                  if not batch else "drawn at random by the estimate (your step draws its own values)")
        lines.append(f"{origin}: `{op}` at {where} of {whose(where)}{src} = {shown_}{times}")
    return lines
