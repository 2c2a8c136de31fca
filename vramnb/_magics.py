"""IPython glue: ``%%vram``, ``%vram`` and the cell events behind ``%vram on``.

Thin by design: parse arguments, call :mod:`vramnb._measure`,
:mod:`vramnb._holders` and :mod:`vramnb._free`, display the result. The cell
body is run the way ``%%time`` runs it (transform, compile, ``exec``, then
``eval`` of a final expression, whose value is returned so IPython displays it
once as ``Out[n]``), so the cell's value, namespace and exception are exactly
what IPython alone would have produced.
"""

from __future__ import annotations

import ast
from typing import Any

import torch
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, needs_local_scope, no_var_expand, output_can_be_silenced
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ._free import free_hidden, hidden_holders
from ._holders import HoldersReport, find_holders
from ._measure import history, vram
from ._probe import CpuProbe, probe_for, resolve_device

__all__ = ["VramMagics"]

_COMMANDS = ("free", "on", "off", "history")


def _device(spec: str | None) -> torch.device:
    try:
        return resolve_device(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None


@magics_class
class VramMagics(Magics):
    """``%%vram`` / ``%vram``; one instance per loaded extension."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._pending: list[Any] = []
        self._in_cell = False
        self._auto: dict[str, Any] | None = None
        self._auto_cm: Any = None
        self._auto_m: Any = None
        self._auto_cell: int | None = None

    # -- events -------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        if self._auto_cm is not None:  # a previous cell's measurement never closed
            self._auto_cm.__exit__(None, None, None)
            self._auto_cm = None
        self._in_cell = True
        raw = (getattr(info, "raw_cell", "") or "").lstrip()
        if self._auto is not None and not raw.startswith("%vram") and not raw.startswith("%%vram"):
            label = raw.splitlines()[0][:80] if raw else ""
            dev = self._auto["device"]
            self._auto_cm = vram(dev, label=label, holders=self._holders_fn(dev))
            self._auto_m = self._auto_cm.__enter__()
            self._auto_cell = self.shell.execution_count

    def post_run_cell(self, result: Any) -> None:
        cm, self._auto_cm = self._auto_cm, None
        if cm is not None:
            err = getattr(result, "error_in_exec", None)
            if err is not None:
                cm.__exit__(type(err), err, err.__traceback__)
            else:
                cm.__exit__(None, None, None)
            report = self._auto_m.report
            report.cell = self._auto_cell
            self._auto_m = None
            if self._auto is not None and not self._auto["quiet"]:
                self._pending.append(report)
        pending, self._pending = self._pending, []
        self._in_cell = False
        for obj in pending:
            display(obj)

    def _show(self, obj: Any) -> None:
        """Display after the cell's own output (at post_run_cell) when inside a cell."""
        if self._in_cell:
            self._pending.append(obj)
        else:
            display(obj)

    def _holders_fn(self, device: Any) -> Any:
        def top() -> list[tuple[str, int]]:
            dev = resolve_device(device)
            rows = find_holders(self.shell.user_ns, dev, skip=self.shell.user_ns_hidden, limit=3)
            return [(h.name, h.unique) for h in rows]

        return top

    # -- the magic ----------------------------------------------------------
    @no_var_expand
    @needs_local_scope
    @magic_arguments()
    @argument("command", nargs="?", help="line magic only: free | on | off | history (none: what holds the memory now)")
    @argument("-d", "--device", default=None, help="cpu, cuda or cuda:N (default: the current CUDA device, else cpu)")
    @argument("-q", "--quiet", action="store_true", help="record the report in vramnb.history() but print nothing")
    @argument("--budget", default=None, metavar="SIZE", help="warn when the peak would not fit a card of SIZE, e.g. 24GiB")
    @argument(
        "--no-reset",
        action="store_true",
        help="leave the device's global peak counter alone (by default it is reset at the cell's start "
        "to read the cell's own peak; the older peak is kept in vramnb.session_peak())",
    )
    @argument("-o", "--out", default=None, metavar="VAR", help="store the report (a CellReport) in variable VAR")
    @argument("-h", "--help", action="store_true", help="show this help")
    @output_can_be_silenced
    @line_cell_magic
    def vram(self, line: str = "", cell: str | None = None, local_ns: dict[str, Any] | None = None) -> Any:
        """Measure the device memory a cell uses, or show what holds it.

        Cell magic — run the cell and report, after its output: Δ allocated
        (end − start), the cell's peak above its start, reserved memory and
        its change, reserved − allocated, non-PyTorch memory (CUDA context and
        library workspaces) and wall time. On CPU (no CUDA, or ``-d cpu``) the
        exact storage tracker measures. By default the device's peak counter
        is reset at the cell's start to read the cell's own peak
        (``--no-reset`` keeps it; the older peak is kept in
        ``vramnb.session_peak()``)::

            %%vram --budget 24GiB
            loss = model(x).sum(); loss.backward()

        Line magic::

            %vram            what holds the memory now: device state and the
                             variables, largest first (shared storage counted once)
            %vram free       release output history and the last exception's
                             frames, gc.collect(), empty the CUDA cache; report
                             what came back per source
            %vram on [-d D]  measure every cell from now on (%vram off stops)
            %vram history    every measured cell as a table (vramnb.history())
        """
        __tracebackhide__ = True
        args = parse_argstring(self.vram, line)
        if args.help:
            print(self.vram.__doc__)
            return None
        if cell is None:
            return self._line(args)
        if args.command is not None:
            raise UsageError(f"%%vram takes options only, not {args.command!r}: put the statement in the cell body")
        return self._cell(args, cell, local_ns)

    def _cell(self, args: Any, cell: str, local_ns: dict[str, Any] | None) -> Any:
        __tracebackhide__ = True
        dev = _device(args.device)
        try:
            budget = args.budget
            if budget is not None:
                from ._units import parse_size

                budget = parse_size(budget)
        except ValueError as e:
            raise UsageError(f"--budget: {e}") from None
        shell = self.shell
        source = shell.transform_cell(cell)
        # Cache the body under the cell's number so tracebacks show "Cell In[n]"
        # with its lines; the leading newline keeps line numbers those of the
        # whole cell (line 1 is the %%vram line).
        filename = shell.compile.cache("\n" + source, shell.execution_count, raw_code=cell)
        tree = shell.compile.ast_parse("\n" + source, filename=filename)
        tree = shell.transform_ast(tree)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        code = shell.compile(tree, filename, "exec")
        code_last = shell.compile(last, filename, "eval") if last is not None else None
        label = next((ln.strip() for ln in cell.splitlines() if ln.strip()), "")[:80]
        glob = shell.user_ns
        out = None
        cm = vram(dev, reset_peak=not args.no_reset, budget=budget, label=label, holders=self._holders_fn(dev))
        try:
            with cm as m:
                exec(code, glob, local_ns)
                if code_last is not None:
                    out = eval(code_last, glob, local_ns)
        finally:
            report = m.report
            report.cell = shell.execution_count
            if args.out:
                shell.user_ns[args.out] = report
            if not args.quiet:
                self._show(report)
        return out

    def _line(self, args: Any) -> Any:
        cmd = args.command
        if cmd is not None and cmd not in _COMMANDS:
            raise UsageError(f"unknown %vram command {cmd!r}; valid: {', '.join(_COMMANDS)} (or none)")
        if cmd == "off":
            self._auto = None
            print("vram: automatic per-cell reports off")
            return None
        if cmd == "history":
            return history()
        dev = _device(args.device)
        if cmd == "on":
            self._auto = {"device": str(dev), "quiet": args.quiet}
            print(f"vram: reporting every cell on {dev} (%vram off to stop)")
            return None
        if cmd == "free":
            return free_hidden(self.shell, dev)
        return self.state(dev)

    def state(self, dev: torch.device) -> HoldersReport:
        """What holds memory on ``dev`` now."""
        probe = probe_for(dev)
        if isinstance(probe, CpuProbe):
            probe.tracker.scan()
        sample = probe.sample(device_info=probe.active())
        ns = self.shell.user_ns
        rows = find_holders(ns, dev, hidden=hidden_holders(self.shell), skip=self.shell.user_ns_hidden)
        return HoldersReport(
            device=str(dev),
            holders=rows,
            total=sum(h.unique for h in rows),
            allocated=sample.allocated,
            reserved=sample.reserved,
            total_memory=sample.total,
            free=sample.free,
            non_pytorch=sample.non_pytorch,
            method=probe.method,
        )

