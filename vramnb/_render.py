"""Text and HTML from one render: the small table every vramnb report shows.

Pure standard library. A report builds a :class:`Table`; :class:`Rendered`
turns it into ``text/plain`` and ``text/html`` for Jupyter, a terminal and nbval.
HTML uses inline styles only (no CSS classes to load) and escapes every string.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._extras import optional

__all__ = ["Table", "Rendered", "dataframe", "ERROR_COLOR", "SUCCESS_COLOR"]


def dataframe(records: list[dict[str, Any]], what: str) -> Any:
    """``pandas.DataFrame`` of ``records``.

    Raises:
        MissingDependencyError: pandas is not installed (the message names ``what``
            and the extra to install; the records themselves need no pandas).
    """
    with optional("pandas", f"{what} (the records themselves need no pandas)"):
        import pandas as pd
    return pd.DataFrame.from_records(records)

# warnings and failures in the front-end theme's own colours where it has one (JupyterLab 4 and Notebook 7
# define --jp-error-color1: #d32f2f in the light theme, 4.98:1 on white; #f44336 in the dark one, 5.13:1 on
# its #111111), else fixed ones: the fixed #c62828 alone was 3.36:1 on that dark background (WCAG 2.1)
ERROR_COLOR = "var(--jp-error-color1, #c62828)"
SUCCESS_COLOR = "var(--jp-success-color1, #2e7d32)"


@dataclass
class Table:
    """A titled table with optional notes (warnings are notes with ``warn=True``)."""

    title: str
    headers: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    notes: list[tuple[str, bool]] = field(default_factory=list)
    align: str = ""  # one "l"/"r" per column; default: first left, the rest right
    sections: list[Table] = field(default_factory=list)  # further tables shown below this one

    def _left(self, i: int) -> bool:
        return self.align[i] == "l" if i < len(self.align) else i == 0

    def note(self, text: str, *, warn: bool = False) -> None:
        self.notes.append((text, warn))

    def to_text(self) -> str:
        cols = [list(self.headers)] + [list(r) for r in self.rows]
        widths = [max(len(str(r[i])) for r in cols) for i in range(len(self.headers))]
        lines = [self.title]
        for j, r in enumerate(cols):
            if j == 0 and not any(self.headers):
                continue
            cells = [str(c).ljust(w) if self._left(i) else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  " + "  ".join(cells).rstrip())
        for text, warn in self.notes:
            lines.append(("  ⚠ " if warn else "  ") + text)
        return "\n".join(lines + [sec.to_text() for sec in self.sections])

    def to_html(self) -> str:
        e = html.escape
        td = "padding:1px 8px;text-align:right;font-variant-numeric:tabular-nums"
        td0 = "padding:1px 8px;text-align:left"
        out = [
            '<div style="font-family:var(--jp-code-font-family,monospace);font-size:12px;margin:2px 0">',
            f'<div style="font-weight:600">{e(self.title)}</div>',
            '<table style="border-collapse:collapse;margin:2px 0">',
        ]
        if any(self.headers):
            out.append(
                "<tr>"
                + "".join(
                    f'<th style="{td0 if self._left(i) else td};border-bottom:1px solid currentColor">{e(h)}</th>'
                    for i, h in enumerate(self.headers)
                )
                + "</tr>"
            )
        for r in self.rows:
            out.append("<tr>" + "".join(f'<td style="{td0 if self._left(i) else td}">{e(str(c))}</td>'
                                        for i, c in enumerate(r)) + "</tr>")
        out.append("</table>")
        for text, warn in self.notes:
            style = f"color:{ERROR_COLOR}" if warn else "opacity:0.8"
            if text.startswith("    ") and not warn:  # a line of code under a fix: kept as typed
                style = "white-space:pre;padding-left:2ch"
            out.append(f'<div style="{style}">{"⚠ " if warn else ""}{e(text)}</div>')
        out.extend(sec.to_html() for sec in self.sections)
        out.append("</div>")
        return "".join(out)


class Rendered:
    """Mixin: a report that renders through :meth:`_table` as text and HTML."""

    def _table(self) -> Table:  # pragma: no cover - overridden
        raise NotImplementedError

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, str]:
        table = self._table()
        data = {"text/plain": table.to_text(), "text/html": table.to_html()}
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data

    def _repr_html_(self) -> str:
        # for the front-ends and tools that look for _repr_html_ rather than the mimebundle
        return self._table().to_html()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self._table().to_text())
