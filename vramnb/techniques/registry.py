"""The technique registry and :class:`Recipe`, the settings for one profiled step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from .._plan import StepPlan

__all__ = ["Technique", "REGISTRY", "register", "Recipe", "Unavailable"]


class Unavailable(ValueError):
    """A technique setting this machine cannot run (hardware or a missing
    library); the message says why and what to install."""


class Technique:
    """One memory-saving technique.

    Subclasses set ``name`` (the recipe keyword), ``label`` (shown in the panel),
    ``choices`` (the valid values, the first being "off"/the baseline),
    ``description`` (with the source of the claim), and implement
    :meth:`apply`. :meth:`unavailable` says why a value cannot run here.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    choices: ClassVar[tuple[Any, ...]]
    description: ClassVar[str] = ""

    @classmethod
    def default(cls) -> Any:
        """The baseline value (the first of ``choices``): the step as the user wrote it."""
        return cls.choices[0]

    @classmethod
    def validate(cls, value: Any) -> Any:
        """``value`` if it is a valid setting (one of ``choices``).

        Raises:
            ValueError: another value; the message lists the valid ones.
        """
        if value not in cls.choices:
            valid = ", ".join(repr(c) for c in cls.choices)
            raise ValueError(f"{cls.name}={value!r} is not a valid setting; valid: {valid}")
        return value

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why ``value`` cannot run on this plan's device and installation, or ``None``."""
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Change ``plan`` for ``value`` (the default value changes nothing)."""
        raise NotImplementedError

    @classmethod
    def describe(cls, value: Any) -> str:
        """How ``value`` is named in tables and the panel's runs (``"optimizer SGD"``)."""
        return f"{cls.label}: {value}"

    @classmethod
    def code(cls, value: Any, device_type: str = "cuda", model: Any = None, name: str = "model") -> str:
        """The change to make in the user's own training loop for ``value``, as code
        (one or a few lines; ``device_type`` for the autocast lines; ``model``, named ``name``
        in the notebook, where the line depends on it). The default names the recipe setting
        that profile_step and estimate take."""
        return f"vramnb.Recipe({cls.name}={value!r})  # the setting profile_step/estimate apply"


REGISTRY: dict[str, type[Technique]] = {}


def register(cls: type[Technique]) -> type[Technique]:
    """Class decorator: add a technique to the registry (order of registration
    is the order of application and of display)."""
    if cls.name in REGISTRY:
        raise ValueError(f"technique {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


class Recipe:
    """The technique settings for one profiled step.

    ``Recipe(precision="bf16", checkpointing="every block", optimizer="SGD",
    micro_batches=4)``: any technique not named keeps its default (the
    baseline). ``vramnb.techniques.REGISTRY`` lists the techniques and their
    valid values; ``Recipe.options()`` returns them.

    Raises:
        ValueError: an unknown technique name, or a value not among its choices
            (the message lists the valid ones).
    """

    def __init__(self, **settings: Any) -> None:
        unknown = [k for k in settings if k not in REGISTRY]
        if unknown:
            raise ValueError(f"unknown technique {unknown[0]!r}; valid: {', '.join(REGISTRY)}")
        self.settings = {k: REGISTRY[k].validate(v) for k, v in settings.items()}

    @staticmethod
    def options() -> dict[str, tuple[Any, ...]]:
        """Technique name → its valid values (the first is the baseline)."""
        return {name: t.choices for name, t in REGISTRY.items()}

    def __getitem__(self, name: str) -> Any:
        if name not in REGISTRY:
            raise KeyError(name)
        return self.settings.get(name, REGISTRY[name].default())

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name in REGISTRY:
            yield name, self[name]

    def changed(self) -> dict[str, Any]:
        """The settings that differ from the baseline."""
        return {k: v for k, v in self if v != REGISTRY[k].default()}

    def extends(self, other: Recipe) -> bool:
        """Whether this recipe has every setting ``other`` changes, with the same value, and at least one more:
        ``Recipe(precision="bf16", freeze="base")`` extends ``Recipe(precision="bf16")``; no recipe extends itself."""
        mine, theirs = self.changed(), other.changed()
        return mine != theirs and all(k in mine and mine[k] == v for k, v in theirs.items())

    def describe(self) -> str:
        """The recipe in words: ``"bf16 · checkpointing every block"`` (``"baseline"``)."""
        parts = [REGISTRY[k].describe(v) for k, v in self.changed().items()]
        return " · ".join(parts) or "baseline"

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.changed().items())
        return f"Recipe({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and self.changed() == other.changed()

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.changed().items())))

    def apply(self, plan: StepPlan) -> None:
        """Apply every setting to ``plan``, in registry order.

        Raises:
            Unavailable: a setting this machine cannot run (why, and what to install).
        """
        for name, value in self:
            tech = REGISTRY[name]
            if value == tech.default():
                continue
            why = tech.unavailable(value, plan)
            if why:
                raise Unavailable(f"{tech.label} {value!r} is not available here: {why}")
            said = len(plan.notes)
            tech.apply(plan, value)
            what = tech.describe(value)
            if not any(n.startswith(what) for n in plan.notes[said:]):  # not where apply said it, with how
                plan.notes.append(what)
