"""Options of ``%%vram`` and ``%vram``: split as a shell would, checked per command.

IPython glue for :mod:`vramnb._magics`. Bad input is an IPython ``UsageError``
naming the problem and the valid choices.
"""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

import torch
from IPython.core.error import UsageError

from ._probe import resolve_device
from ._units import parse_size

COMMANDS = ("free", "on", "off", "history", "panel", "estimate", "fit")
# which options the cell magic and each line command accept
OPTIONS: dict[str | None, set[str]] = {
    "cell": {"device", "quiet", "out", "budget", "no_reset", "breakdown", "live"},
    None: {"device", "quiet", "out"},
    "free": {"device", "quiet", "out"},
    "history": {"out", "quiet"},
    "on": {"device", "quiet", "budget", "no_reset", "live"},
    "off": set(),
    "panel": {"out"},
    "estimate": {"out", "quiet", "target", "recipe", "max_batch", "margin", "batch_size"},
    "fit": {"out", "quiet", "target", "recipe", "margin", "batch_size"},
}
FLAGS = {"device": "-d/--device", "quiet": "-q/--quiet", "out": "-o/--out", "budget": "--budget", "no_reset": "--no-reset",
          "breakdown": "--breakdown", "target": "--target", "recipe": "--recipe", "max_batch": "--max-batch",
          "margin": "--margin", "batch_size": "--batch-size", "live": "--live"}


def unquote(text: str | None) -> str | None:
    """A value quoted inside a setting (``--recipe "checkpointing='every block'"``)."""
    if text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def positional(fn: Any) -> int | None:
    """How many positional parameters ``fn`` requires (None: cannot tell)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def recipe(texts: list[str] | str | None) -> dict[str, Any] | None:
    """``"precision=bf16, checkpointing=every block"`` (repeatable) -> settings (numbers as ints)."""
    if not texts:
        return None
    text = ",".join(unquote(t) or "" for t in ([texts] if isinstance(texts, str) else texts))
    out: dict[str, Any] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, val = part.partition("=")
        if not eq:
            raise UsageError(f"--recipe: {part.strip()!r} is not name=value, "
                             "e.g. --recipe 'precision=bf16,checkpointing=every block'")
        val = unquote(val.strip()) or ""
        out[key.strip()] = int(val) if val.isdigit() else val
    return out


# options that take a value; a value starting with "-" is joined to its option
_VALUED = {"-d": "--device", "--device": "--device", "-o": "--out", "--out": "--out", "--budget": "--budget",
           "--target": "--target", "--recipe": "--recipe", "--batch-size": "--batch-size", "--margin": "--margin"}
_FLAG_WORDS = {"-q", "--quiet", "--no-reset", "--breakdown", "--max-batch", "-h", "--help"}
_UNIT_WORD = re.compile(r"(?i)(bytes?|[KMGT]i?B?|B)")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_UNITS = "B (or bytes), KiB, MiB, GiB, TiB, or decimal KB, MB, GB, TB"


def join_values(argv: list[str]) -> list[str]:
    """``--budget 24 GiB`` -> ``--budget=24 GiB``; ``--budget -1GiB`` ->
    ``--budget=-1GiB`` (argparse would read ``-1GiB`` as an option)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        opt, eq, val = tok.partition("=")
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if opt in _VALUED and not eq and nxt is not None and not (nxt in _VALUED or nxt in _FLAG_WORDS or nxt.startswith("--")):
            tok, val, eq = f"{_VALUED[opt]}={argv[i + 1]}", argv[i + 1], "="
            i += 1
        if opt == "--budget" and eq and _NUMBER.fullmatch(val) and i + 1 < len(argv) and _UNIT_WORD.fullmatch(argv[i + 1]):
            tok = f"{tok} {argv[i + 1]}"
            i += 1
        out.append(tok)
        i += 1
    return out


def check_options(args: Any, which: str | None) -> None:
    """Refuse options that ``which`` (a line command, None for ``%vram``, or
    ``"cell"`` for ``%%vram``) does not use, naming those it takes."""
    given = {k for k in FLAGS if getattr(args, k) not in (None, False)}
    wrong = given - OPTIONS[which]
    if wrong:
        what = "%%vram" if which == "cell" else f"%vram {which}" if which else "%vram"
        ok = ", ".join(FLAGS[k] for k in sorted(OPTIONS[which])) or "no options"
        raise UsageError(f"{what} does not take {', '.join(FLAGS[k] for k in sorted(wrong))}; it takes {ok}")


def device(spec: str | None) -> torch.device:
    try:
        return resolve_device(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None


def budget(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip()
    number = re.fullmatch(r"(.*?)\s*(?i:bytes?)", t)
    if number and _NUMBER.fullmatch(number.group(1)):
        t = number.group(1) + "B"
    elif t.startswith("-"):
        raise UsageError(f"--budget {text}: a memory size must be positive, e.g. --budget 24GiB")
    elif _NUMBER.fullmatch(t):
        raise UsageError(f"--budget {text}: give a unit, e.g. --budget 24GiB (--budget {t}B for bytes); units: {_UNITS}")
    try:
        return parse_size(t)
    except ValueError as e:
        raise UsageError(f"--budget: {e}") from None


def parse(parser: Any, line: str, cell: str | None, defaults: list[Any]) -> Any:
    """``line`` parsed by the magic's ``MagicArgumentParser``, split as a shell
    would (quotes removed), a size written with a space (``--budget 24 GiB``)
    or starting with ``-`` kept whole. ``defaults``: a one-item cache of the
    parse of an empty line (the common ``%%vram``; argparse costs ~70 µs)."""
    if not line.strip():
        if not defaults:
            defaults.append(parser.parse_args([]))
        return copy.copy(defaults[0])
    try:
        argv = join_values(shlex.split(line))
    except ValueError as e:  # shlex: unbalanced quotes
        raise UsageError(f"%vram: {e} in {line!r}") from None
    try:
        return parser.parse_args(argv)
    except UsageError as e:
        if "unrecognized arguments" not in str(e):
            raise
        if cell is not None:
            ok = ", ".join(FLAGS[k] for k in sorted(OPTIONS["cell"]))
            raise UsageError(f"{e}; %%vram takes {ok}, -h/--help (statements go in the cell body)") from None
        raise UsageError(f"{e}; see %vram -h") from None
