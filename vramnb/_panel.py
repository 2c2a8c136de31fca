"""The widget panel: toggle techniques on a live model, run a step, see the breakdown.

``vramnb.panel(model, batch, loss_fn, optimizer)`` (or ``%vram panel model batch``)
shows one control per technique (generated from the technique registry, so a new
technique appears here without touching this file), a target card for "what
fits on ...", a *Run step* button, the breakdown of the last run, a comparison
chart of all runs, and a table of runs, newest first. Every run profiles one
step with :func:`vramnb.profile_step` and restores the model exactly.

The panel holds the model weakly, and the batch, loss function and optimizer
only as long as the model lives: ipywidgets keeps every displayed widget (and
so its callbacks and the panel) alive for the session, which must not keep
your model alive after you delete it. See :class:`Panel`.

ipywidgets and matplotlib are imported here only.
"""

from __future__ import annotations

import html
import time
import weakref
from typing import Any

import torch

from ._extras import optional, require
from .predict._gpus import GPUS, gpu_memory
from ._panel_table import RunsTable
from ._reasons import reason
from ._render import ERROR_COLOR
from ._step import check_inputs, check_options, profile_step
from ._units import format_bytes
from ._widgets import bundle, tooltip
from .techniques import REGISTRY, Recipe, Unavailable
from ._global_state import kept_as_found

__all__ = ["Panel", "panel"]

# the text/plain line under the runs: what a front-end without a widget manager does not show, and how to get it
_NO_WIDGETS = ("(its controls are ipywidgets, which show in JupyterLab, Notebook 7 or another front-end with a widget "
               "manager and a live kernel; without one, the panel's .run() runs a step and print(panel) lists the runs)")


def _label(value: Any) -> str:
    return "as given" if value is None else str(value)


class Panel(RunsTable):
    """A panel over one live model. See :func:`panel`.

    What it keeps of yours: the model through a weak reference; the batch,
    the loss function and the optimizer for as long as the model lives (a
    batch or an optimizer is often made in the call, ``panel(model,
    torch.randn(16, 32))``, with no other owner, so they cannot be weak).
    ``del model`` (with the optimizer and batch, if variables hold them)
    frees them all even though the widget stays on the page (ipywidgets
    keeps it, and the panel, alive for the session); a run afterwards says
    that the model is gone. A loss function that captures the model itself
    (a closure over it) keeps it alive until :meth:`close`. :meth:`close`
    releases everything and closes the widgets.

    Attributes:
        runs: the runs so far, oldest first: dicts with the recipe, its report
            (or the error), the peak and the step time.
        widget: the ipywidgets container (display it, or let :func:`panel` do it).
    """

    def __init__(self, model: torch.nn.Module, batch: Any, loss_fn: Any = None, optimizer: Any = None, *,
                 target: str | int = "RTX 4090 (24 GB)", steps: int = 2, predict: bool = False) -> None:
        self.device = check_inputs(model, batch, optimizer)  # bad input: a ValueError, before any widget exists
        gpu_memory(target)
        check_options(steps, None, True)
        # both now, at the first call, rather than matplotlib at the first Run step
        feature = "vramnb.panel (vramnb.profile_step and vramnb.compare give the same measurements without it)"
        with optional("ipywidgets", feature):
            import ipywidgets as w
        require("matplotlib", feature, extra="widgets")

        self._model = weakref.ref(model)
        # batch, loss_fn, optimizer: kept while the model lives (WeakKeyDictionary: they go with it)
        self._inputs: weakref.WeakKeyDictionary[torch.nn.Module, tuple[Any, Any, Any]] = weakref.WeakKeyDictionary(
            {model: (batch, loss_fn, optimizer)})
        self._model_name, self.steps = type(model).__name__, steps
        self._shown_in: tuple[int, int] | None = None  # (shell, cell) where panel() displayed it
        self.runs: list[dict[str, Any]] = []
        self._busy = False
        self.controls: dict[str, Any] = {}
        # each control: its label above its menu, in a grid that fills the notebook's width
        cells = []
        for name, tech in REGISTRY.items():
            if len(tech.choices) < 2:
                continue  # nothing to choose (e.g. "blocks": give it in a Recipe)
            ctl = w.Dropdown(options=[(_label(c), c) for c in tech.choices], index=tech.choices.index(tech.default()),
                             **tooltip(w.Dropdown, tech.description), layout=w.Layout(width="auto"))
            if None in tech.choices:  # ipywidgets shows value None as an empty menu: show "as given"
                ctl.observe(lambda c, ctl=ctl, i=tech.choices.index(None): setattr(ctl, "index", i) if c["new"] is None else None,
                            names="index")
            self.controls[name] = ctl
            cells.append(self._labelled(w, name, tech.label, tech.description, ctl))
        self.target = w.Combobox(options=list(GPUS), value=str(target), placeholder="a card, or a size like 24GiB",
                                 ensure_option=False, layout=w.Layout(width="auto"))
        cells.append(self._labelled(w, "target", "what fits on", "a GPU from the list, or a size such as 24GiB",
                                    self.target))
        self.predict = w.Checkbox(value=bool(predict), description="predict it on the card too", indent=False,
                                  **tooltip(w.Checkbox, "also estimate the step on the card above (vramnb.estimate: fake "
                                            "tensors, CUDA's kernels and allocator modelled), shown beside the measurement"),
                                  layout=w.Layout(width="auto"))
        self.predict.add_class("vramnb-predict")
        self.button = w.Button(description="Run step", button_style="primary", icon="play",
                               tooltip="profile one training step under these settings (the model is restored after)")
        self.fit_button = w.Button(description="Make it fit", icon="magic",
                                   tooltip="search the techniques on estimates for the fastest plan that fits the card "
                                           "in 'what fits on' (vramnb.fit: fake tensors, your model untouched)")
        self.fit_button.add_class("vramnb-fit-button")
        self.fit_box = w.VBox([], layout=w.Layout(margin="0 0 6px 0"))
        self.fit_box.add_class("vramnb-fit")
        self.fit_result: Any = None
        self.status = w.HTML(value=self._status_text(f"ready · measured by the {self._method()}"),
                             layout=w.Layout(flex="1 1 auto", margin="0 0 0 12px"))
        self.status.add_class("vramnb-status")
        # the two charts side by side where the notebook is wide enough, else one above the other
        self.breakdown_out = w.Output(layout=w.Layout(margin="0 16px 0 0"))
        self.compare_out = w.Output()
        for out in (self.breakdown_out, self.compare_out):
            out.add_class("vramnb-chart")
        self.table = w.HTML(layout=w.Layout(overflow="auto"))  # a narrow notebook scrolls the table sideways
        self.button.on_click(lambda _b: self.run())
        self.fit_button.on_click(lambda _b: self.make_it_fit())
        self.target.observe(lambda _c: self._refresh_table(), names="value")
        grid = w.GridBox(cells,
                         layout=w.Layout(grid_template_columns="repeat(auto-fill, minmax(180px, 1fr))",
                                         # align_items: menus in line when a label wraps
                                         grid_gap="0 12px", align_items="flex-end", width="100%"))
        actions = w.HBox([self.button, self.fit_button, self.predict, self.status],
                         layout=w.Layout(align_items="center", margin="6px 0"))
        plots = w.HBox([self.breakdown_out, self.compare_out], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))
        title = w.HTML(f"<b>vramnb panel</b> · {html.escape(self._model_name)} on {self.device}")
        self.widget = w.VBox([title, grid, actions, self.fit_box, self.table, plots])
        self.widget.add_class("vramnb-panel")
        self._refresh_table()

    @staticmethod
    def _labelled(w: Any, name: str, label: str, tooltip: str, control: Any) -> Any:
        """A control with its label above it (long labels wrap instead of being cut)."""
        head = w.HTML(f"<div title='{html.escape(tooltip, quote=True)}' style='font-size:12px;line-height:1.3;"
                      f"opacity:0.85;padding-top:4px'>{html.escape(label)}</div>", layout=w.Layout(height="auto"))
        box = w.VBox([head, control], layout=w.Layout(min_width="0"))
        box.add_class("vramnb-control")
        box.add_class(f"vramnb-control-{name}")
        return box

    # -- the user's objects (weak, see the class docstring) -----------------------
    @property
    def model(self) -> torch.nn.Module | None:
        """The model, or ``None`` once it has been deleted (or :meth:`close` was called)."""
        m = self._model()
        return m if m is not None and m in self._inputs else None

    def _held(self, i: int) -> Any:
        m = self.model
        return None if m is None else self._inputs[m][i]

    def _hold(self, i: int, value: Any) -> None:
        """Replace the batch (0), loss function (1) or optimizer (2) for the next runs,
        checked as the constructor checks them (ValueError; nothing replaced on error)."""
        m = self.model
        if m is None:
            raise ValueError("the panel's model is gone (deleted, or the panel closed): make a new panel with vramnb.panel(...)")
        held = list(self._inputs[m])
        held[i] = value
        check_inputs(m, held[0], held[2])
        if held[1] is not None and not callable(held[1]):
            raise ValueError(f"loss_fn must be a function (model, batch) -> scalar loss, or None, not {type(held[1]).__name__}")
        self._inputs[m] = (held[0], held[1], held[2])

    @property
    def batch(self) -> Any:
        """The batch (``None`` once the model is gone); assign to change it for the next runs."""
        return self._held(0)

    @batch.setter
    def batch(self, value: Any) -> None:
        self._hold(0, value)

    @property
    def loss_fn(self) -> Any:
        """The loss function (``None`` once the model is gone, or if none was given); assign to
        change it for the next runs (``None``: the model's output or its ``.loss``)."""
        return self._held(1)

    @loss_fn.setter
    def loss_fn(self, value: Any) -> None:
        self._hold(1, value)

    @property
    def optimizer(self) -> Any:
        """The optimizer (``None`` once the model is gone, or if none was given); assign to
        change it for the next runs."""
        return self._held(2)

    @optimizer.setter
    def optimizer(self, value: Any) -> None:
        self._hold(2, value)

    def close(self) -> None:
        """Close the widgets and let go of the model, batch, loss function and optimizer."""
        self._inputs.clear()
        self._model = lambda: None  # type: ignore[assignment]
        stack = [self.widget]
        while stack:
            wid = stack.pop()
            stack.extend(getattr(wid, "children", ()))
            wid.close()

    # -- state ---------------------------------------------------------------
    def _method(self) -> str:
        return "CUDA caching allocator" if self.device.type == "cuda" else "CPU storage tracker"

    @staticmethod
    def _status_text(text: str, error: bool = False) -> str:
        color = ERROR_COLOR if error else "inherit"
        return f'<div style="color:{color};line-height:1.4">{html.escape(text)}</div>'

    def recipe(self) -> Recipe:
        """The recipe the controls describe now."""
        tech = REGISTRY
        return Recipe(**{n: c.value for n, c in self.controls.items() if c.value != tech[n].default()})

    # -- running ------------------------------------------------------------
    @kept_as_found
    def run(self) -> dict[str, Any] | None:
        """Profile one step under the current settings (what *Run step* does).
        A press while a run is going on is ignored, not queued."""
        if self._busy:
            return None
        model = self.model
        if model is None:
            return self._gone()
        batch, loss_fn, optimizer = self._inputs[model]
        recipe = self.recipe()
        record: dict[str, Any] = {"recipe": recipe, "description": recipe.describe(), "report": None, "error": None}
        t0 = time.perf_counter()
        try:  # from the busy flag on: whatever happens (an interrupt too), the finally makes the panel ready again
            self._busy = True
            self.button.disabled = True
            self.button.description, self.button.icon = "Running…", "spinner spin"
            self.status.value = self._status_text(f"running: {recipe.describe()} …")
            report = profile_step(model, batch, loss_fn, optimizer, recipe=recipe, steps=self.steps)
            record["report"] = report
            record["peak"] = report.steady.peak.allocated
            record["non_pytorch"] = report.steady.marks[-1][1].non_pytorch
            record["step_time"] = report.steady.step_time
            record["warnings"] = list(report.warnings)
            first = next((r for r in self.runs if r.get("report") is not None and not r.get("error")), None)
            if first is not None and first["recipe"] != recipe:
                record["reason"] = reason(recipe, first["report"].steady, report.steady, first["recipe"],
                                          against="the first run's")
            if self.predict.value:
                self._predict(record, recipe, model, batch, loss_fn, optimizer)
            self.status.value = self._status_text(f"done: {recipe.describe()} · peak {format_bytes(record['peak'])}")
        except KeyboardInterrupt:
            record["error"] = "interrupted (the model is restored before the interrupt goes on)"
            self.status.value = self._status_text(f"interrupted: {recipe.describe()} (model restored)", error=True)
            raise
        except Unavailable as e:
            record["error"] = str(e)
            self.status.value = self._status_text(str(e), error=True)
        except Exception as e:  # noqa: BLE001 - shown in the panel, which stays usable
            record["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            record["report"] = getattr(e, "vramnb_report", None)
            if record["report"] is not None:
                record["peak"] = record["report"].peak.allocated
                record["warnings"] = list(record["report"].warnings)
            self.status.value = self._status_text(f"the step failed: {record['error']} (model restored)", error=True)
        finally:
            self._busy = False
            self.button.description, self.button.icon = "Run step", "play"
            self.button.disabled = False
            record["wall_time"] = time.perf_counter() - t0
            self.runs.append(record)
            self._refresh_table()
        del model, batch, loss_fn, optimizer  # nothing of the user's stays in this frame
        self._draw(record)
        return record

    def make_it_fit(self, top: int = 4) -> Any:
        """Search for the fastest plan that fits the card in *what fits on* (what *Make it fit*
        does): :func:`vramnb.fit` (its default techniques) with the controls as the current recipe, on estimates. The
        ``top`` fastest plans that fit are listed, each with an *Apply* button that sets the
        controls to it (then *Run step* measures it); where nothing fits, by how much the closest
        plan misses and what would fit. Returns the :class:`vramnb.FitResult` (also
        ``self.fit_result``), or ``None`` when busy, the model is gone or the search failed
        (the status says why)."""
        from .planner._fit import fit

        if self._busy:
            return None
        model = self.model
        if model is None:
            self._gone()
            return None
        if self.target_bytes() is None:
            self.status.value = self._status_text(
                f"{self.target.value!r} is not a card or a size: type a name from the list or e.g. 24GiB", error=True)
            return None
        batch, loss_fn, optimizer = self._inputs[model]
        target, current = self.target.value, self.recipe()
        try:
            self._busy = True
            self.button.disabled = self.fit_button.disabled = True
            self.fit_button.description, self.fit_button.icon = "Searching…", "spinner spin"
            self.status.value = self._status_text(f"searching plans that fit {target} (estimates) …")
            result = fit(model, batch, loss_fn, optimizer, target=target, recipe=current, progress=False)
        except KeyboardInterrupt:
            self.status.value = self._status_text("search interrupted (nothing of yours was changed)", error=True)
            raise
        except Exception as e:  # noqa: BLE001 - shown in the panel, which stays usable
            first = str(e).splitlines()[0] if str(e) else ""
            self.status.value = self._status_text(f"the search failed: {type(e).__name__}: {first}", error=True)
            return None
        finally:
            self._busy = False
            self.button.disabled = self.fit_button.disabled = False
            self.fit_button.description, self.fit_button.icon = "Make it fit", "magic"
        del model, batch, loss_fn, optimizer
        self._show_fit(result, top)
        return result

    def _show_fit(self, result: Any, top: int = 4) -> None:
        """List ``result``'s fastest plans that fit, with Apply buttons (or why nothing fits)."""
        import ipywidgets as w

        self.fit_result = result
        target = result.target
        rows: list[Any] = []
        fits = [p for p in result.plans if p.fits][:top]
        head = (f"<b>plans that fit {html.escape(str(result.target))}</b>, fastest first (estimated; Apply sets the "
                "controls)" if fits else f"<b>{html.escape(str(result.target))}</b>: estimated")
        for p in fits:
            ratio = f"{p.ratio:.2f}× the current step time" if p.ratio is not None else ""
            text = (f"<span style='line-height:1.6'>{html.escape(p.recipe.describe())} · device memory "
                    f"{format_bytes(p.device_memory)} · {ratio}</span>")
            apply = w.Button(description="Apply", layout=w.Layout(width="auto"),
                             tooltip=f"set the controls to: {p.recipe.describe()}")
            apply.on_click(lambda _b, r=p.recipe: self.apply(r))
            row = w.HBox([apply, w.HTML(text, layout=w.Layout(margin="0 0 0 8px"))],
                         layout=w.Layout(align_items="center"))
            row.add_class("vramnb-fit-plan")
            rows.append(row)
        if not fits:
            lines = [f"nothing fits {html.escape(str(result.target))}"
                     + (f": the closest plan misses by {format_bytes(result.misses)}" if result.misses else "")]
            lines += [html.escape(s) for s in result.suggestions]
            rows.append(w.HTML("<br>".join(lines)))
        self.fit_box.children = [w.HTML(head), *rows]
        best = result.best
        self.status.value = self._status_text(
            f"fastest that fits: {best.recipe.describe()}" if best is not None else f"nothing fits {target}",
            error=best is None)

    def apply(self, recipe: Any) -> None:
        """Set the controls to ``recipe`` (a :class:`vramnb.Recipe` or a dict); a value not in a
        menu (checkpointing of chosen blocks) is added to it."""
        from .predict._estimate_inputs import as_recipe

        r = as_recipe(recipe) or Recipe()
        for name, ctl in self.controls.items():
            value = r[name]
            if value not in [v for _, v in ctl.options]:
                ctl.options = [*ctl.options, (REGISTRY[name].describe(value).removeprefix("checkpointing "), value)]
            ctl.value = value
        self.status.value = self._status_text(f"set to: {r.describe()} · press Run step to measure it")

    def _gone(self) -> dict[str, Any]:
        """A run asked for after the model was deleted: said in the panel, nothing run."""
        text = ("the model is gone: it was deleted (or the panel closed), and the panel holds it only weakly so "
                "that it does not keep your model, optimizer and batch alive; open a new panel on a live model")
        recipe = self.recipe()
        record: dict[str, Any] = {"recipe": recipe, "description": recipe.describe(), "report": None, "error": text,
                                  "wall_time": 0.0}
        self.runs.append(record)
        self.status.value = self._status_text(text, error=True)
        self._refresh_table()
        return record

    def _predict(self, record: dict[str, Any], recipe: Recipe, model: Any, batch: Any, loss_fn: Any,
                 optimizer: Any) -> None:
        """The same step estimated on the target card, beside the measurement."""
        from .predict._estimate import estimate

        if self.target_bytes() is None:
            record["estimate_error"] = f"{self.target.value!r} is not a card or a size: type a name from the list or e.g. 24GiB"
            return
        target = self.target.value
        record["predicted_on"] = target
        try:
            est = estimate(model, batch, loss_fn, optimizer, recipe=recipe, target=target, steps=self.steps)
        except Exception as e:  # noqa: BLE001 - the measurement stands; say why there is no prediction
            record["estimate_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return
        record["estimate"] = est
        record["predicted_peak"] = est.steady.peak.allocated
        record["predicted_device_memory"] = est.device_memory
        record["predicted_fits"] = est.fits

    def _draw(self, record: dict[str, Any]) -> None:
        from IPython import get_ipython
        from IPython.display import display

        if getattr(get_ipython(), "kernel", None) is None:
            return  # no notebook front end to show the charts in (a script, a test): keep stdout clean

        report = record.get("report")
        with self.breakdown_out:
            self.breakdown_out.clear_output(wait=True)
            if report is not None and report.steps and report.steps[-1].timeline:
                display(report.plot())
        done = [r for r in self.runs if r.get("report") is not None and r.get("error") is None]
        with self.compare_out:
            self.compare_out.clear_output(wait=True)
            if len(done) >= 2:
                from ._plot import plot_compare

                display(plot_compare([r["report"] for r in done], [r["description"] for r in done]))

    def __repr__(self) -> str:
        gone = "" if self.model is not None else " · the model is gone"
        lines = [f"vramnb panel · {self._model_name} on {self.device} · {len(self.runs)} run(s){gone}"]
        for rec, row in zip(self.results, self._rows()):
            lines.append("  " + " · ".join(c for c in row if c))
            lines.extend(f"    ⚠ {w}" for w in rec["warnings"])
            if rec["reason"]:
                lines.append(f"    why: {rec['reason']}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        """The widget view (ipywidgets 7.7 or 8) and, for a front-end that cannot render widgets
        (a terminal, nbconvert's output, a viewer without a widget manager), the runs as text
        with a line saying what is missing and where it shows."""
        data = bundle(self.widget)
        data["text/plain"] = f"{self!r}\n{_NO_WIDGETS}"
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data

    def _ipython_display_(self) -> None:
        """Show the panel (another view of the same widgets), except as the result of the
        cell in which :func:`panel` has just shown it: ``vramnb.panel(...)`` as a cell's
        last line shows it once."""
        from IPython.display import display

        if self._shown_in is not None and self._shown_in == _cell():
            return
        display(self._repr_mimebundle_(), raw=True)


@kept_as_found
def panel(model: torch.nn.Module, batch: Any, loss_fn: Any = None, optimizer: Any = None, *,
          target: str | int = "RTX 4090 (24 GB)", display: bool = True, steps: int = 2,
          predict: bool = False) -> Panel:
    """Open a panel on a live model: choose techniques, press *Run step*, compare.

    Args:
        model, batch, loss_fn, optimizer: as for :func:`vramnb.profile_step`.
        target: the card for "what fits on ...": a name from
            ``vramnb._gpus.GPUS`` or a size (``"24GiB"``).
        display: show it now, in IPython or Jupyter (``False`` to build it, e.g. in
            tests). As a cell's last line it is shown once: the returned panel
            does not show itself again in the cell that opened it (in a later
            cell, ``p`` or ``display(p)`` adds another view of the same panel).
        steps: steps per run (2: the first and a steady-state step).
        predict: start with "predict it on the card too" ticked: each run is
            also estimated on the target card (:func:`vramnb.estimate`) and the
            prediction shown beside the measurement.

    Returns:
        the :class:`Panel` (its ``results``, ``to_dataframe()``, ``to_csv()``).

    Raises:
        ValueError: bad model, batch, optimizer or target, before any widget is built.
        MissingDependencyError: ipywidgets or matplotlib is not installed (the message says
            ``pip install "vramnb[widgets]"``).
    """
    p = Panel(model, batch, loss_fn, optimizer, target=target, steps=steps, predict=predict)
    if display and _cell() is not None:  # (a script has nowhere to show widgets)
        from IPython.display import display as show

        show(p._repr_mimebundle_(), raw=True)
        p._shown_in = _cell()
    return p


def _cell() -> tuple[int, int] | None:
    """The IPython shell and cell running now (``None`` outside IPython)."""
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else (id(shell), shell.execution_count)
