"""What an estimate answers a library that asks whether it is being traced.

Hugging Face transformers asks ``is_tracing(tensor)`` before it reads a tensor's values
(``masking_utils``: an all-ones padding mask is dropped, so that SDPA runs without a mask, causal
and with grouped-query heads as they are), and answers yes for every ``FakeTensor``
(``transformers.utils.import_utils.is_fake_tensor``). An estimate's fake batch is not a trace:
its values are the user's (:class:`vramnb.predict._batch_values.BatchValues`). While the fake step
runs, a fake tensor whose values the estimate holds is answered "not fake", so the library takes
the branch the real step takes (measured on an H200: Llama fp32 -5.2 % and BERT bf16 +1.5 % came
from the mask kept in the estimate and dropped on the GPU). Tensors whose values are unknown
(weights, activations) are still fake to it. Nothing is imported: a library that is not loaded is
not touched, and the module's own function is put back on exit.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["untraced_where_known"]

_TRANSFORMERS = "transformers.utils.import_utils"


@contextlib.contextmanager
def untraced_where_known(known: Any) -> Iterator[None]:
    """While active, ``transformers``' ``is_fake_tensor(t)`` is false for a ``t`` with
    ``known(t)`` (the estimate can read its values). A no-op without transformers loaded."""
    mod: Any = sys.modules.get(_TRANSFORMERS)  # a module of transformers, patched by name below
    original = getattr(mod, "is_fake_tensor", None) if mod is not None else None
    if original is None:
        yield
        return

    def is_fake_tensor(tensor: Any) -> bool:
        return bool(original(tensor)) and not known(tensor)

    mod.is_fake_tensor = is_fake_tensor
    try:
        yield
    finally:
        mod.is_fake_tensor = original
