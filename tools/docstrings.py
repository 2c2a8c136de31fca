"""Count vramnb's public functions and those without a docstring.

Public: the names ``vramnb.__all__`` exports and the functions of ``vramnb/__init__.py``
(``load_ipython_extension``), plus, in every module whose dotted name has no part
starting with ``_`` (``vramnb.techniques.precision``, ``vramnb.predict``), its
``__all__`` or else the names it defines that do not start with ``_``. Of a public
class, every method, property, ``staticmethod`` and ``classmethod`` defined in its
own body whose name does not start with ``_`` counts (inherited ones count once, on
the class that defines them). Each function is counted once, however many names
reach it.

    python tools/docstrings.py          # the totals
    python tools/docstrings.py --list   # and each function without a docstring

``tests/test_package.py`` asserts that none is missing.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import sys
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # this checkout's vramnb, not another


def public_modules() -> list[Any]:
    """vramnb and each of its modules whose dotted name has no ``_``-prefixed part."""
    import vramnb

    mods = [vramnb]
    for info in pkgutil.walk_packages(vramnb.__path__, "vramnb."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            mods.append(importlib.import_module(info.name))
    return mods


def _public_names(mod: Any) -> list[str]:
    names = list(getattr(mod, "__all__", []))
    for name, obj in vars(mod).items():
        if not name.startswith("_") and getattr(obj, "__module__", None) == mod.__name__ and name not in names:
            names.append(name)
    return names


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            yield name, attr.__func__
        elif isinstance(attr, property) and attr.fget is not None:
            yield name, attr.fget
        elif inspect.isfunction(attr):
            yield name, attr


def public_functions() -> dict[str, Any]:
    """``{qualified name: function}`` for every public function, each once."""
    found: dict[str, Any] = {}
    seen: set[int] = set()

    def add(label: str, fn: Any) -> None:
        if id(fn) not in seen and (getattr(fn, "__module__", "") or "").startswith("vramnb"):
            seen.add(id(fn))
            found[label] = fn

    for mod in public_modules():
        for name in _public_names(mod):
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                add(f"{obj.__module__}.{obj.__qualname__}", obj)
            elif inspect.isclass(obj) and obj.__module__.startswith("vramnb"):
                for klass in obj.__mro__:
                    if klass.__module__.startswith("vramnb"):
                        for member, fn in _members(klass):
                            add(f"{klass.__module__}.{klass.__qualname__}.{member}", fn)
    return found


def missing() -> list[str]:
    """The public functions without a docstring, by qualified name."""
    return sorted(label for label, fn in public_functions().items() if not (fn.__doc__ or "").strip())


def main(argv: list[str]) -> int:
    total, lacking = len(public_functions()), missing()
    print(f"{total} public functions, {len(lacking)} without a docstring")
    if "--list" in argv:
        print("\n".join(lacking))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
