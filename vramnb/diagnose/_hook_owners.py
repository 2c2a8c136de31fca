"""Hooks an object owns on the notebook's modules: a grown object whose bound methods are
registered as hooks (a Grad-CAM helper's ``save_activation`` / ``save_gradient``) is filled by
every forward/backward of those modules, whoever runs them (a training loop that never calls
the helper). Read from the modules' hook dicts (``_forward_hooks``, ``_forward_pre_hooks``,
``_backward_hooks``, ``_backward_pre_hooks``) and ``_modules`` through ``__dict__``: no user
code runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["owned_hooks", "hook_advice"]

_KINDS = (("_forward_hooks", "forward hook"), ("_forward_pre_hooks", "forward pre-hook"),
          ("_backward_hooks", "backward hook"), ("_backward_pre_hooks", "backward pre-hook"))
_BUDGET = 20_000


def _path(parent: str, child: str) -> str:
    return f"{parent}[{child}]" if child.isdigit() else f"{parent}.{child}"


def owned_hooks(obj: Any, namespace: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(module path, kind, method name)`` of each hook on a module the notebook names (or a
    submodule) that is a bound method of ``obj``; each module once."""
    out: list[tuple[str, str, str]] = []
    seen: set[int] = set()
    todo = [(n, m) for n, m in list(namespace.items()) if isinstance(n, str) and not n.startswith("_")
            and issubclass(type(m), torch.nn.Module)]
    while todo and len(seen) < _BUDGET:
        path, m = todo.pop(0)
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = object.__getattribute__(m, "__dict__")
        for attr, kind in _KINDS:
            hooks = dict.get(d, attr)
            if not isinstance(hooks, dict):
                continue
            for fn in list(hooks.values()):
                if getattr(fn, "__self__", None) is obj:
                    out.append((path, kind, getattr(getattr(fn, "__func__", fn), "__name__", "?")))
        mods = dict.get(d, "_modules")
        if type(mods) is dict:
            todo += [(_path(path, k), c) for k, c in dict.items(mods) if issubclass(type(c), torch.nn.Module)]
    return out


def hook_advice(name: str, obj: Any, namespace: Mapping[str, Any]) -> str | None:
    """The fix for ``name`` (``obj``) that grows on every run where its methods are hooks on the
    notebook's modules: remove the hooks when done, empty the lists they fill; ``None`` where
    none of its methods is a hook."""
    if issubclass(type(obj), (torch.Tensor, torch.nn.Module, list, dict, tuple, set)):
        return None
    found = owned_hooks(obj, namespace)
    if not found:
        return None
    hooks = "; ".join(f"{k} {fn} on {p}" for p, k, fn in found)
    try:
        attrs = object.__getattribute__(obj, "__dict__")
        lists = [f"{name}.{a}" for a, v in dict.items(attrs) if type(v) in (list, dict) and v
                 and any(issubclass(type(t), torch.Tensor) for t in (v.values() if type(v) is dict else v))]
    except Exception:  # noqa: BLE001
        lists = []
    empty = f"; empty what they fill ({', '.join(f'{a}.clear()' for a in lists)})" if lists else ""
    handles = _handles(name, obj)
    remove = (", ".join(f"`{h}.remove()`" for h in handles) if handles
              else "`handle.remove()` on each handle register_*_hook returned")
    return (f"{name}'s methods are registered as hooks ({hooks}): every forward/backward of "
            f"{'those modules' if len({p for p, _, _ in found}) > 1 else 'that module'} calls them, whoever runs it; "
            f"remove the hooks when done ({remove}){empty}")


def _handles(name: str, obj: Any) -> list[str]:
    """``name.attr`` of each :class:`torch.utils.hooks.RemovableHandle` ``obj`` keeps whose hook is
    still registered (its dict still has the handle's id)."""
    from torch.utils.hooks import RemovableHandle

    try:
        attrs = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001
        return []
    out = []
    for a, h in list(dict.items(attrs)):
        if type(h) is RemovableHandle:
            refs = getattr(h, "hooks_dict_ref", None)
            d = refs() if callable(refs) else None
            if isinstance(d, dict) and getattr(h, "id", None) in d:
                out.append(f"{name}.{a}")
    return out
