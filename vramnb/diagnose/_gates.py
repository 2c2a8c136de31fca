"""The evidence each step technique needs before the post-mortem offers it (pure: names and shapes).

* **a smaller batch** only where the failure came inside a module's forward and the failing
  allocation (the failing operator's result, else the failing layer's input) has the batch size,
  dim 0 of the tensor the model was given, among its dimensions: it then shrinks with the batch.
  A sort of scores, a NumPy copy before the forward, a loss on whole tensors: not offered;
* **bf16 autocast around the forward** only where the failure came inside a module's forward and
  PyTorch runs the failing operator in bfloat16 under ``torch.autocast`` on that device (replayed
  on fake tensors: :func:`vramnb.diagnose._failing_op.read_op`); an ``nn.Embedding`` of a float32
  table, a sort, a copy: not offered; not known (no operator recorded): not offered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._postmortem import FailingCode

__all__ = ["smaller_batch", "autocast_sentence", "batch_dims"]


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in s) + ("," if len(s) == 1 else "") + ")"


def batch_dims(shape: tuple[int, ...], given: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(dim of the input, its size, dim of shape)`` for each dimension (over 1) of the input
    ``given`` whose size is also one of ``shape``'s, in order; each of ``shape``'s dims used once."""
    out, used = [], set()
    for i, n in enumerate(given):
        if n <= 1:
            continue
        for j, m in enumerate(shape):
            if m == n and j not in used:
                used.add(j)
                out.append((i, n, j))
                break
    return out


def smaller_batch(ctx: FailingCode) -> str:
    """The "a smaller batch" sentence with its evidence, or ``""`` where there is none."""
    if ctx.forward is None:
        return ""
    model, label, given, inner = ctx.forward
    shape, what = ctx.request_shape, "the failing allocation"
    if shape is None:
        shape, what = inner, "the failing layer's input"
    dims = batch_dims(tuple(shape), tuple(given))
    if not dims or dims[0][0] != 0:
        return ""
    _, b, j = dims[0]
    text = (f"a smaller batch per evaluation step: {what} {_shape(tuple(shape))} has the batch size {b} of "
            f"{model}'s input{'' if label == 'its input' else ' ' + label} {_shape(tuple(given))} (its dim 0) as "
            f"its dim {j}, so it shrinks in proportion")
    more = [f"dim {i} ({n}) as its dim {k}" for i, n, k in dims[1:]]
    if more:
        text += f"; it also has that input's {', '.join(more)}: a shorter one shrinks it too"
    return text


def autocast_sentence(ctx: FailingCode) -> str:
    """The "bf16 autocast around the forward" sentence with its evidence, or ``""`` where there is none."""
    if ctx.forward is None or ctx.lowered is not True or not ctx.op_name:
        return ""
    shape = f" {_shape(tuple(ctx.request_shape))}" if ctx.request_shape is not None else ""
    return (f"bf16 autocast around the forward: the failing `{ctx.op_name}` (its result{shape} is the request) runs "
            f"inside {ctx.forward[0]}'s forward, and autocast {ctx.lowered_how}: that result in half the bytes")
