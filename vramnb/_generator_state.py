"""A random generator object's state, read and set: ``torch.Generator``, ``numpy.random.Generator``,
``numpy.random.RandomState`` and ``random.Random`` (and subclasses).

Shared by :mod:`vramnb._rng_state` (the process-wide generators and those the model reaches) and
:mod:`vramnb._code_state` (those the user's code reaches by name, at any depth: a helper object's,
a config's, a hook's closure object's). A NumPy ``Generator``'s state is its bit generator's and its
``SeedSequence``'s (``Generator.spawn()`` advances the count of children it spawned, which NumPy makes a
read-only attribute): the sequence's pickled state (its ``__reduce__``) is put back into the same object
by its Cython ``__setstate_cython__`` (the object is kept: a user holding it sees it put back). A seed
sequence without that method (another NumPy, a user's ``ISeedSequence``) is left as it is: :func:`spawned`
reads the count so that a change can be named.
"""

from __future__ import annotations

import copy
import random
import sys
from typing import Any

import torch

__all__ = ["generator_kind", "get_state", "set_state", "spawned", "state_bytes", "state_tensor"]


def generator_kind(obj: Any) -> str | None:
    """``"torch"``, ``"random"``, ``"numpy"`` (a ``Generator``), ``"legacy"`` (a ``RandomState``), ``"seedseq"``
    (a NumPy ``SeedSequence`` that can be set back in place) or ``None``."""
    if isinstance(obj, torch.Generator):
        return "torch"
    if isinstance(obj, random.Random):
        return "random"
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.random.Generator):
            return "numpy"
        if isinstance(obj, np.random.RandomState):
            return "legacy"
        if isinstance(obj, np.random.SeedSequence) and callable(getattr(obj, "__setstate_cython__", None)):
            return "seedseq"  # held directly (self.ss.spawn(1) in a forward): its child counter
    return None


def state_bytes(t: torch.Tensor) -> bytes:
    """A torch RNG state (a CPU uint8 tensor) as bytes: kept as a tensor it would be counted,
    by the CPU storage tracker, as memory of the step vramnb profiles."""
    return bytes(t.tolist())


def state_tensor(b: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)


def get_state(obj: Any, kind: str) -> Any:
    """The state of generator ``obj`` of kind ``kind`` (:func:`generator_kind`), as plain data."""
    if kind == "torch":
        return state_bytes(obj.get_state())
    if kind == "random":
        return obj.getstate()
    if kind == "numpy":
        return copy.deepcopy(obj.bit_generator.state), _sequence_state(obj)
    if kind == "seedseq":
        return copy.deepcopy(obj.__reduce__()[2])
    return obj.get_state()


def _sequence_state(obj: Any) -> Any:
    """A NumPy ``Generator``'s ``SeedSequence`` state as its pickle has it, or ``None`` where it cannot be set back
    in place (see the module docstring)."""
    seq = getattr(obj.bit_generator, "seed_seq", None)
    if seq is None or not callable(getattr(seq, "__setstate_cython__", None)):
        return None
    try:
        reduced = seq.__reduce__()
    except Exception:  # noqa: BLE001 - a sequence that cannot be pickled: not recorded
        return None
    if not (isinstance(reduced, tuple) and len(reduced) >= 3 and isinstance(reduced[2], tuple)):
        return None
    return copy.deepcopy(reduced[2])


def set_state(obj: Any, kind: str, state: Any) -> None:
    """Set generator ``obj`` back to ``state`` (from :func:`get_state`)."""
    if kind == "torch":
        obj.set_state(state_tensor(state))
    elif kind == "random":
        obj.setstate(state)
    elif kind == "numpy":
        obj.bit_generator.state = state[0]
        if state[1] is not None and not same_state(_sequence_state(obj), state[1]):
            obj.bit_generator.seed_seq.__setstate_cython__(copy.deepcopy(state[1]))
    elif kind == "seedseq":
        if not same_state(obj.__reduce__()[2], state):
            obj.__setstate_cython__(copy.deepcopy(state))
    else:
        obj.set_state(state)


def same_state(a: Any, b: Any) -> bool:
    """Whether two states from :func:`get_state` are equal (a legacy state holds a NumPy array)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):
        return bool(a.shape == b.shape and (a == b).all())
    return bool(a == b)


def spawned(obj: Any, kind: str) -> int | None:
    """How many children a NumPy ``Generator``'s ``SeedSequence`` has spawned (``None`` for other kinds)."""
    if kind != "numpy":
        return None
    seq = getattr(obj.bit_generator, "seed_seq", None)
    n = getattr(seq, "n_children_spawned", None)
    return n if isinstance(n, int) else None
