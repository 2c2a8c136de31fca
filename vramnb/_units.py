"""Sizes and times: parse ``"24GiB"`` into bytes, format bytes for display.

Bytes are plain ``int`` everywhere inside vramnb; only display converts them,
always in binary units (1 KiB = 1024 B), as ``torch.cuda.memory_summary`` does.
Every number vramnb shows goes through :func:`format_bytes`, so one nbval
sanitize pattern (``notebooks/nbval-sanitize.cfg``) covers text, HTML and plots.
This module imports nothing but the standard library.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

__all__ = ["format_bytes", "format_delta", "format_seconds", "parse_size", "UNITS"]

#: Binary units and their sizes in bytes, smallest first.
UNITS: tuple[tuple[str, int], ...] = (
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
)

# Decimal units accepted on input only ("24GB" is what a card's box says).
_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_BINARY = {name.upper(): size for name, size in UNITS}
_ALIASES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "": 1}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def _real(n: Any, fn: str, what: str) -> None:
    """Refuse what is not a finite real number with an error that names it: a ``nan`` or
    infinite count reaching a report is a bug upstream, never a size to print."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise TypeError(f"{fn}: expected {what} (a real number), got {n!r} of type {type(n).__name__}")
    if not math.isfinite(n):
        raise ValueError(f"{fn}: expected {what}, got {n!r} (not a finite number)")


def format_bytes(n: int | float, *, precision: int = 1) -> str:
    """Format a byte count with binary units.

    Args:
        n: a number of bytes (may be negative).
        precision: digits after the decimal point for units above bytes.

    Returns:
        ``"512 B"``, ``"1.5 KiB"``, ``"256.0 MiB"``, ``"1.0 GiB"``.

    Raises:
        TypeError: ``n`` is not a real number (a string, ``None``, a ``bool``).
        ValueError: ``n`` is ``nan`` or infinite.

    >>> format_bytes(0)
    '0 B'
    >>> format_bytes(256 * 2**20)
    '256.0 MiB'
    >>> format_bytes(-1536)
    '-1.5 KiB'
    >>> format_bytes(2**30, precision=2)
    '1.00 GiB'

    A value that rounds to 1024 of a unit is shown in the next unit:

    >>> format_bytes(2**20 - 1)
    '1.0 MiB'
    """
    _real(n, "format_bytes", "a number of bytes")
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a < 1024:
        return f"{sign}{int(a)} B"
    for name, size in UNITS[1:]:
        shown = f"{a / size:.{precision}f}"
        if float(shown) < 1024 or name == UNITS[-1][0]:
            return f"{sign}{shown} {name}"
    raise AssertionError("unreachable")  # pragma: no cover


def format_delta(n: int | float, *, precision: int = 1) -> str:
    """Format a signed change in bytes: ``+256.0 MiB``, ``-1.0 GiB``, ``±0 B``.

    >>> format_delta(256 * 2**20)
    '+256.0 MiB'
    >>> format_delta(0)
    '±0 B'

    Raises the errors of :func:`format_bytes`.
    """
    _real(n, "format_delta", "a number of bytes")
    if n == 0:
        return "±0 B"
    return ("+" if n > 0 else "") + format_bytes(n, precision=precision)


def format_seconds(s: float) -> str:
    """Format a duration in seconds with three significant digits:
    ``"850 µs"``, ``"12.3 ms"``, ``"644 ms"``, ``"4.20 s"``, ``"11.7 s"``.

    >>> format_seconds(0.0123)
    '12.3 ms'
    >>> format_seconds(0.6442)
    '644 ms'

    Raises:
        TypeError: ``s`` is not a real number.
        ValueError: ``s`` is ``nan`` or infinite.
    """
    _real(s, "format_seconds", "a duration in seconds")
    if s < 0:
        return "-" + format_seconds(-s)
    for scale, unit in ((1e-3, "µs"), (1, "ms"), (float("inf"), "s")):
        if s < scale or unit == "s":
            v = s / scale * 1e3 if unit != "s" else s
            break
    digits = 2 if v < 10 else 1 if v < 100 else 0
    return f"{v:.{digits}f} {unit}"


def parse_size(text: str | int) -> int:
    """Parse a memory size into bytes.

    Accepts binary units (``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``; also ``K``,
    ``M``, ``G``, ``T`` as binary), decimal units as printed on a card's box
    (``KB``, ``MB``, ``GB``, ``TB``), case-insensitive, with or without a space;
    a bare number is bytes. An ``int`` is returned unchanged.

    Raises:
        ValueError: the text is not a number followed by one of those units, or
            the size is zero or negative.

    >>> parse_size("24GiB")
    25769803776
    >>> parse_size("80 GB")
    80000000000
    >>> parse_size("1.5M")
    1572864
    """
    if isinstance(text, bool):
        raise ValueError(f"invalid size {text!r}: expected a number of bytes or a string like '24GiB'")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"invalid size {text}: a memory size must be positive")
        return text
    m = _SIZE_RE.match(str(text))
    valid = "B, KiB, MiB, GiB, TiB (binary), KB, MB, GB, TB (decimal), or K, M, G, T"
    if not m:
        raise ValueError(f"invalid size {text!r}: expected a number and a unit, e.g. '24GiB'; units: {valid}")
    number, unit = float(m.group(1)), m.group(2).upper()
    if not number < 2**70:
        raise ValueError(f"invalid size {text!r}: too large")
    if unit in _BINARY:
        scale = _BINARY[unit]
    elif unit in _DECIMAL:
        scale = _DECIMAL[unit]
    elif unit in _ALIASES:
        scale = _ALIASES[unit]
    else:
        raise ValueError(f"invalid size {text!r}: unknown unit {m.group(2)!r}; valid units: {valid}")
    size = int(round(number * scale))
    if size <= 0:
        raise ValueError(f"invalid size {text!r}: a memory size must be positive")
    return size
