"""The panel's runs as a table: the flat records (``Panel.results``), their CSV
and DataFrame exports, and the HTML table under the panel's controls.

A mixin of :class:`vramnb._panel.Panel`, which provides ``runs`` (the records
of its runs), ``target`` (the card control), ``table`` (the HTML widget),
``device`` and ``_method()``.
"""

from __future__ import annotations

import csv
import html
import io
from typing import Any

from .predict._cuda_model import TYPICAL_STEP_OUTSIDE
from .predict._gpus import gpu_memory
from ._render import ERROR_COLOR, SUCCESS_COLOR, dataframe
from ._units import format_bytes, format_delta, format_seconds

__all__ = ["RunsTable"]

_CONTEXT_ESTIMATE = TYPICAL_STEP_OUTSIDE  # CUDA context + libraries when not measured (bytes; measured on an H200)


class RunsTable:
    """The runs table of a panel (see the module docstring)."""

    runs: list[dict[str, Any]]
    target: Any
    table: Any
    device: Any

    def _method(self) -> str:
        raise NotImplementedError

    def target_bytes(self) -> int | None:
        """Bytes of the card in the target control, ``None`` if it names none."""
        try:
            return gpu_memory(self.target.value)
        except ValueError:
            return None

    def _fits(self, r: dict[str, Any]) -> tuple[str, int | None]:
        target = self.target_bytes()
        if target is None or r.get("peak") is None or r.get("error"):
            return "", None
        need = r["peak"] + (r.get("non_pytorch") or _CONTEXT_ESTIMATE)
        margin = target - need
        return ("fits" if margin >= 0 else "does not fit"), margin

    @property
    def results(self) -> list[dict[str, Any]]:
        """The runs as flat records, newest first (bytes, seconds): recipe,
        peak, change against the first run, step time, fits/margin, error, and
        ``warnings`` (techniques configured but without effect in the step), and ``reason``: why its peak
        differs from the first run's, one line from the measured per-source deltas ("" for the first)."""
        first = next((r.get("peak") for r in self.runs if r.get("peak") is not None and not r.get("error")), None)
        out = []
        for r in reversed(self.runs):
            fits, margin = self._fits(r)
            out.append({
                "recipe": r["description"],
                "peak_allocated": r.get("peak"),
                "delta_vs_first": (r["peak"] - first) if (first is not None and r.get("peak") is not None) else None,
                "step_time": r.get("step_time"),
                "fits": fits,
                "margin": margin,
                "error": r.get("error"),
                "warnings": list(r.get("warnings") or []),
                "reason": r.get("reason", ""),
                "predicted_peak_allocated": r.get("predicted_peak"),
                "predicted_device_memory": r.get("predicted_device_memory"),
                "predicted_fits": r.get("predicted_fits"),
                "estimate_error": r.get("estimate_error"),
                "predicted_on": r.get("predicted_on"),
                **{f"setting:{k}": v for k, v in r["recipe"].changed().items()},
            })
        return out

    def to_dataframe(self) -> Any:
        """:attr:`results` as a ``pandas.DataFrame``.

        Raises:
            MissingDependencyError: pandas is not installed (the message says ``pip install "vramnb[pandas]"``).
        """
        return dataframe(self.results, "Panel.to_dataframe")

    def to_csv(self, path: str | None = None) -> str:
        """Write :attr:`results` as CSV to ``path`` (and return the text)."""
        rows = self.results
        keys = list(dict.fromkeys(k for r in rows for k in r)) or ["recipe"]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as f:
                f.write(text)
        return text

    @staticmethod
    def _predicted_text(rec: dict[str, Any]) -> str:
        if rec.get("predicted_peak_allocated") is None:
            return ""
        verdicts: dict[bool | None, str] = {True: "fits", False: "does not fit"}
        verdict = verdicts.get(rec.get("predicted_fits"), "")
        text = (f"{format_bytes(rec['predicted_peak_allocated'])} · {format_bytes(rec['predicted_device_memory'] or 0)} "
                f"on {rec.get('predicted_on') or 'the card'}")
        return f"{text} · {verdict}" if verdict else text

    def _rows(self) -> list[list[str]]:
        rows = []
        for rec in self.results:
            fits, margin = rec["fits"], rec["margin"]
            if fits == "fits":
                fit = f"fits, {format_bytes(margin)} to spare"
            elif fits:
                fit = f"does not fit, {format_bytes(-margin)} over"
            else:
                fit = ""
            rows.append([
                rec["recipe"],
                "—" if rec["peak_allocated"] is None else format_bytes(rec["peak_allocated"]),
                "" if rec["delta_vs_first"] is None else format_delta(rec["delta_vs_first"]),
                "" if rec["step_time"] is None else format_seconds(rec["step_time"]),
                fit,
                self._predicted_text(rec),
                rec["error"] or "",
            ])
        return rows

    def _refresh_table(self) -> None:
        """Redraw the runs table (newest first; a failed run's error on a line of
        its own under it) and the note under the table."""
        head = ["recipe", "peak", "Δ vs first run", "step time", f"on {self.target.value}"]
        if any(r.get("predicted_peak") is not None for r in self.runs):
            head.append("predicted: peak · device memory")
        numeric = {1, 2, 3}

        def cell(tag: str, i: int, text: str, color: str = "inherit") -> str:
            align = "right" if i in numeric else "left"
            wrap = "white-space:normal;min-width:160px" if i == 0 else "white-space:nowrap"
            return (f"<{tag} style='text-align:{align};padding:3px 10px;{wrap};color:{color}'>"
                    f"{html.escape(text)}</{tag}>")

        thead = "".join(cell("th", i, h) for i, h in enumerate(head))
        body = []
        for rec, row in zip(self.results, self._rows()):
            verdict = SUCCESS_COLOR if row[4].startswith("fits") else ERROR_COLOR
            tds = "".join(cell("td", i, row[i], verdict if i == 4 else "inherit") for i in range(len(head)))
            body.append(f"<tr class='vramnb-run' style='border-top:1px solid rgba(128,128,128,0.3)'>{tds}</tr>")
            if rec["estimate_error"]:
                body.append(f"<tr class='vramnb-run-error'><td colspan='{len(head)}' style='padding:0 10px 4px 22px;"
                            f"opacity:0.8;white-space:normal'>{html.escape('no prediction: ' + rec['estimate_error'])}</td></tr>")
            if rec["reason"]:
                body.append(f"<tr class='vramnb-run-reason'><td colspan='{len(head)}' style='padding:0 10px 4px 22px;"
                            f"opacity:0.8;white-space:normal'>{html.escape('why: ' + rec['reason'])}</td></tr>")
            for warning in rec["warnings"]:
                body.append(f"<tr class='vramnb-run-warning'><td colspan='{len(head)}' style='padding:0 10px 4px 22px;"
                            f"color:{ERROR_COLOR};white-space:normal'>{html.escape('⚠ ' + warning)}</td></tr>")
            if rec["error"]:
                what = "not run" if rec["peak_allocated"] is None else "failed (peak: at the failure)"
                text = html.escape(f"{what}: {rec['error']}")
                body.append(f"<tr class='vramnb-run-error'><td colspan='{len(head)}' style='padding:0 10px 4px 22px;"
                            f"color:{ERROR_COLOR};white-space:normal'>{text}</td></tr>")
        if not body:
            body.append(f"<tr><td colspan='{len(head)}' style='padding:3px 10px;opacity:0.7'>"
                        "no runs yet: press Run step</td></tr>")
        target = self.target_bytes()
        context = ("measured non-PyTorch memory" if self.device.type == "cuda"
                   else f"about {format_bytes(_CONTEXT_ESTIMATE)} of CUDA context")
        note = (f"fits: steady-state peak + {context} within {format_bytes(target)}" if target
                else "type a card name or a size such as 24GiB")
        self.table.value = (
            "<table class='vramnb-runs' style='border-collapse:collapse;font-size:12px;"
            "line-height:1.4;font-variant-numeric:tabular-nums;margin:4px 0'>"
            f"<thead><tr style='border-bottom:1px solid rgba(128,128,128,0.6)'>{thead}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>"
            f"<div style='font-size:11px;line-height:1.4;opacity:0.75'>{html.escape(note)} · "
            f"measured by the {self._method()}</div>")
