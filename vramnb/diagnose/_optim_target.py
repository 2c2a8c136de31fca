"""Which parameters an optimizer-swap fix's code must take: exactly those the user's optimizer
steps. ``Adafactor(model.parameters())`` is that only where the optimizer steps every parameter
of ``model`` and nothing else, in one group; otherwise the fix takes the optimizer's own
``param_groups`` (each group's parameters and learning rate). Read from ``param_groups`` and the
modules' ``_parameters``/``_modules`` dicts: no user code runs."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["steps_exactly", "swap_arguments"]

_BUDGET = 100_000


def _module_params(module: Any) -> set[int] | None:
    out: set[int] = set()
    todo, seen = [module], set[int]()
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if len(seen) > _BUDGET:
            return None
        d = object.__getattribute__(m, "__dict__")
        ps, ms = dict.get(d, "_parameters"), dict.get(d, "_modules")
        if type(ps) is dict:
            out |= {id(p) for p in dict.values(ps) if p is not None}
        if type(ms) is dict:
            todo += [c for c in dict.values(ms) if issubclass(type(c), torch.nn.Module)]
    return out


def steps_exactly(opt: Any, module: Any) -> bool:
    """``opt`` has one parameter group and steps every parameter of ``module`` and no other."""
    try:
        groups = object.__getattribute__(opt, "__dict__").get("param_groups") or []
        if len(groups) != 1 or type(groups[0]) is not dict:
            return False
        ids = {id(p) for p in (groups[0].get("params") or [])}
        mine = _module_params(module)
    except Exception:  # noqa: BLE001
        return False
    return bool(ids) and mine == ids


def swap_arguments(opt: str, model: str | None, exact: bool) -> str:
    """The arguments of the swapped optimizer's constructor, as code: ``model.parameters(),
    lr=…`` where ``exact`` (:func:`steps_exactly`), else the optimizer's own groups."""
    if model and exact:
        return f"{model}.parameters(), lr={opt}.param_groups[0]['lr']"
    return f'[{{"params": g["params"], "lr": g["lr"]}} for g in {opt}.param_groups]'
