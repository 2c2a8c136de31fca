"""The savings of each fix for a step that ran out of memory in :func:`vramnb.profile_step`.

The step is known there (model, batch, loss, optimizer, recipe), so each candidate
technique is estimated on it (:mod:`vramnb.diagnose._savings`) once the model is
restored. Memory the notebook held before the step outside the model, optimizer and
batch (:func:`vramnb.diagnose._postmortem.held_outside`) stays held whatever the step does.
"""

from __future__ import annotations

from typing import Any

import torch

from ._postmortem import OOMState
from ._savings import step_fixes
from ._verdict import _cpu_room

__all__ = ["step_savings"]


#: seconds the savings' estimates may take in all (the next estimate does not start after it)
TIME_LIMIT = 60.0
#: on CPU, the share of the room kept for the C allocator's own overhead and fragmentation
#: (an address-space or data limit counts them; measured: a step estimated to fit with 10 %
#: to spare could still fail under RLIMIT_DATA)
CPU_MARGIN = 0.10


def step_savings(model: torch.nn.Module, batch: Any, loss_fn: Any, optimizer: Any, recipe: Any, state: OOMState,
                 other: int, device: torch.device, progress: bool = True) -> Any:
    """Fixes for the failed step with their estimated savings (see :func:`_savings.step_fixes`);
    the step is estimated for the device it ran on (``device="cuda"`` models the GPU present),
    each fix's code is the user's step with it (:func:`vramnb.techniques.code.step_code`)."""
    import time

    from ..predict._batch_search import _bar
    from ..predict._estimate import estimate
    from ..techniques import Recipe
    from ..techniques.batching import batch_len
    from ..techniques.code import step_code

    settings = recipe.changed() if recipe is not None else {}
    try:
        n: int | None = batch_len(batch)
    except Exception:  # noqa: BLE001 - a batch without a batch dimension: no batch-size fix
        n = None
    kind = "cuda" if device.type == "cuda" else "cpu"

    def run(s: dict[str, Any], bs: int | None) -> Any:
        if bar is not None:
            bar.update(1)
        return estimate(model, batch, loss_fn, optimizer, recipe=Recipe(**s) if s else None, batch_size=bs,
                        device=kind, steps=1, warm_optimizer=optimizer is not None)

    def code(s: dict[str, Any]) -> str:
        return step_code(Recipe(**s), Recipe(**settings), model, batch, loss_fn, kind)

    if kind == "cuda":
        limit = state.cap if state.cap is not None else state.total
        room = None if limit is None else limit - (state.non_pytorch or 0) - (state.other_processes or 0)
    else:
        r = _cpu_room(state)
        room = None if r is None else int((r + state.allocated) * (1 - CPU_MARGIN))
    bar = _bar(progress, "post-mortem: each fix's saving (estimates)")
    try:
        return step_fixes(run, settings, n, room, other, kind, code=code, deadline=time.perf_counter() + TIME_LIMIT)
    finally:
        if bar is not None:
            bar.close()
