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
import copy
import keyword
from typing import Any

import torch
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, needs_local_scope, no_var_expand, output_can_be_silenced
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ._free import free_hidden, hidden_holders
from ._holders import HoldersReport, find_holders
from ._measure import _HISTORY, history, vram
from ._probe import CpuProbe, probe_for, resolve_device
from ._units import parse_size

__all__ = ["VramMagics"]

_COMMANDS = ("free", "on", "off", "history", "panel", "estimate")
# which options each line command accepts (the cell magic accepts them all)
_LINE_OPTIONS = {
    None: {"device", "quiet", "out"},
    "free": {"device", "quiet", "out"},
    "history": {"out", "quiet"},
    "on": {"device", "quiet", "budget", "no_reset"},
    "off": set(),
    "panel": {"out"},
    "estimate": {"out", "quiet", "target", "recipe", "max_batch", "margin", "batch_size"},
}
_FLAGS = {"device": "-d/--device", "quiet": "-q/--quiet", "out": "-o/--out", "budget": "--budget", "no_reset": "--no-reset",
          "breakdown": "--breakdown", "target": "--target", "recipe": "--recipe", "max_batch": "--max-batch",
          "margin": "--margin", "batch_size": "--batch-size"}


def _unquote(text: str | None) -> str | None:
    """IPython's argument splitting keeps the quotes around a value with spaces."""
    if text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _positional(fn: Any) -> int | None:
    """How many positional parameters ``fn`` requires (None: cannot tell)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def _recipe(texts: list[str] | str | None) -> dict[str, Any] | None:
    """``"precision=bf16, checkpointing=every block"`` (repeatable) -> settings (numbers as ints)."""
    if not texts:
        return None
    text = ",".join(_unquote(t) or "" for t in ([texts] if isinstance(texts, str) else texts))
    out: dict[str, Any] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, val = part.partition("=")
        if not eq:
            raise UsageError(f"--recipe: {part.strip()!r} is not name=value, e.g. --recipe 'precision=bf16,checkpointing=every block'")
        val = _unquote(val.strip()) or ""
        out[key.strip()] = int(val) if val.isdigit() else val
    return out


def _device(spec: str | None) -> torch.device:
    try:
        return resolve_device(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _budget(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as e:
        raise UsageError(f"--budget: {e}") from None


@magics_class
class VramMagics(Magics):
    """``%%vram`` / ``%vram``; one instance per loaded extension."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._pending: list[Any] = []
        self._depth = 0
        self._auto: dict[str, Any] | None = None
        self._auto_cm: Any = None
        self._auto_m: Any = None
        self._auto_cell: int | None = None
        self._defaults: Any = None

    def _count(self) -> int:
        """The number of the cell being run, as IPython shows it (In[n]/Out[n]);
        IPython 9 increments ``execution_count`` before running a cell, 8 after."""
        return int(self.shell.displayhook.prompt_count)

    # -- events -------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        self._depth += 1
        if self._depth > 1:  # a cell run from inside a cell: the outer measurement covers it
            return
        raw = (getattr(info, "raw_cell", "") or "").lstrip()
        if self._auto is not None and not raw.startswith(("%vram", "%%vram", "%unload_ext", "%reload_ext")):
            label = raw.splitlines()[0][:80] if raw else ""
            a = self._auto
            self._auto_cm = vram(a["device"], label=label, holders=self._holders_fn(a["device"]),
                                 budget=a["budget"], reset_peak=a["reset_peak"], warn=False)
            self._auto_m = self._auto_cm.__enter__()
            self._auto_cell = self._count()

    def post_run_cell(self, result: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth > 0:
            return
        cm, self._auto_cm = self._auto_cm, None
        if cm is not None:
            err = getattr(result, "error_in_exec", None)
            if err is not None:
                cm.__exit__(type(err), err, err.__traceback__)
            else:
                cm.__exit__(None, None, None)
            report = self._auto_m.report
            report.cell = self._auto_cell
            before = getattr(result, "error_before_exec", None)
            if before is not None and report.exception is None:
                report.exception = type(before).__name__
            self._auto_m = None
            if self._auto is not None and not self._auto["quiet"]:
                self._pending.append(report)
        pending, self._pending = self._pending, []
        for obj in pending:
            display(obj)

    def close(self) -> None:
        """Stop an open automatic measurement without recording it (unload)."""
        cm, self._auto_cm = self._auto_cm, None
        if cm is not None:
            cm.__exit__(None, None, None)
            if self._auto_m is not None and _HISTORY and _HISTORY[-1] is self._auto_m.report:
                _HISTORY.pop()
        self._auto = None

    def _show(self, obj: Any) -> None:
        """Display after the cell's own output (at post_run_cell) when inside a cell."""
        if self._depth > 0:
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
    @argument("command", nargs="?", help="line magic only: free | on | off | history | panel | estimate "
              "(none: what holds the memory now)")
    @argument("names", nargs="*", help="%%vram panel|estimate MODEL BATCH [LOSS_FN] [OPTIMIZER]: names of notebook variables")
    @argument("--target", default=None, metavar="GPU", help="estimate: a card (H100, 'RTX 4090') or a size (24GiB); "
              "default: the GPU present, else H100")
    @argument("--recipe", default=None, action="append", metavar="SETTINGS",
              help="estimate: techniques, e.g. --recipe \"precision=bf16,checkpointing=every block\" (repeatable)")
    @argument("--batch-size", default=None, type=int, metavar="N", help="estimate: predict for batch size N")
    @argument("--max-batch", action="store_true", help="estimate: the largest batch size that fits the target")
    @argument("--margin", default=None, type=float, metavar="FRACTION", help="estimate: fraction of the card to keep free")
    @argument("-d", "--device", default=None, help="cpu, cuda or cuda:N (default: the current CUDA device, else cpu)")
    @argument("-q", "--quiet", action="store_true", help="record (or return) the report but display nothing")
    @argument("--budget", default=None, metavar="SIZE", help="warn when the peak would not fit a card of SIZE, e.g. 24GiB")
    @argument(
        "--no-reset",
        action="store_true",
        help="leave the device's global peak counter alone (by default it is reset at the cell's start "
        "to read the cell's own peak; the older peak is kept in vramnb.session_peak())",
    )
    @argument("-o", "--out", default=None, metavar="VAR", help="store the report in variable VAR")
    @argument(
        "--breakdown",
        action="store_true",
        help="label the cell's memory by source: parameters, buffers and gradients of each nn.Module "
        "variable, state of each optimizer, activations, temporaries",
    )
    @argument("-h", "--help", action="store_true", help="show this help")
    @output_can_be_silenced
    @line_cell_magic
    def vram(self, line: str = "", cell: str | None = None, local_ns: dict[str, Any] | None = None) -> Any:
        """Measure the device memory a cell uses, or show what holds it.

        Cell magic: run the cell and report, after its output, Δ allocated
        (end − start), the cell's peak above its start, reserved memory and
        its change, reserved − allocated, non-PyTorch memory (CUDA context and
        library workspaces) and wall time. On CPU (no CUDA, or -d cpu) the
        exact storage tracker measures. By default the device's peak counter
        is reset at the cell's start to read the cell's own peak (--no-reset
        keeps it; the older peak is kept in vramnb.session_peak()).

            %%vram --budget 24GiB
            loss = model(x).sum(); loss.backward()

        Line magic:

            %vram            what holds the memory now: device state and the
                             variables, largest first (shared storage counted once)
            %vram free       release output history and the last exception's
                             frames, gc.collect(), empty the CUDA cache; report
                             what came back per source
            %vram on         measure every cell from now on (-d, -q, --budget,
                             --no-reset apply); %vram off stops
            %vram history    every measured cell as a table (vramnb.history())
            %vram panel model batch [loss_fn] [optimizer]
                             the widget panel on notebook variables (vramnb.panel)
            %vram estimate model batch [loss_fn] [optimizer] --target A100 --recipe precision=bf16
                             predict the step on a card you do not have
                             (vramnb.estimate; --max-batch: vramnb.max_batch_size)
        """
        __tracebackhide__ = True
        try:
            if line.strip():
                args = parse_argstring(self.vram, line)
            else:  # the common `%%vram` with no options: skip argparse (~70 µs)
                if self._defaults is None:
                    self._defaults = parse_argstring(self.vram, "")
                args = copy.copy(self._defaults)
        except UsageError as e:
            if cell is not None and "unrecognized arguments" in str(e):
                raise UsageError(f"{e}: %%vram takes options only; put statements in the cell body") from None
            raise
        except ValueError as e:  # shlex: unbalanced quotes
            raise UsageError(f"%vram: {e} in {line!r}") from None
        if args.help:
            print(self.vram.__doc__)
            return None
        if args.out is not None and (not args.out.isidentifier() or keyword.iskeyword(args.out)
                                     or args.out in self.shell.user_ns_hidden):
            raise UsageError(f"-o {args.out!r}: give a valid variable name that is not one of IPython's own")
        if cell is None:
            return self._line(args)
        if args.command is not None or args.names:
            raise UsageError(f"%%vram takes options only, not {args.command!r}: put the statement in the cell body")
        return self._cell(args, cell, local_ns)

    def _cell(self, args: Any, cell: str, local_ns: dict[str, Any] | None) -> Any:
        __tracebackhide__ = True
        dev = _device(args.device)
        budget = _budget(args.budget)
        shell = self.shell
        count = self._count()
        source = shell.transform_cell(cell)
        # Cache the body under the cell's number so tracebacks show "Cell In[n]"
        # with its lines; the leading newline keeps the line numbers of the
        # whole cell (line 1 is the %%vram line).
        filename = shell.compile.cache("\n" + source, count, raw_code=cell)
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
        cm = vram(dev, reset_peak=not args.no_reset, budget=budget, label=label, holders=self._holders_fn(dev), warn=False,
                  breakdown=shell.user_ns if args.breakdown else None)
        m = None
        try:
            with cm as m:
                exec(code, glob, local_ns)
                if code_last is not None:
                    out = eval(code_last, glob, local_ns)
        finally:
            if m is not None and m.report is not None:
                m.report.cell = count
                if args.out:
                    shell.user_ns[args.out] = m.report
                if not args.quiet:
                    self._show(m.report)
        return out

    def _line(self, args: Any) -> Any:
        cmd = args.command
        if cmd is not None and cmd not in _COMMANDS:
            raise UsageError(f"unknown %vram command {cmd!r}; valid: {', '.join(_COMMANDS)} (or none)")
        given = {k for k in _FLAGS if getattr(args, k) not in (None, False)}
        wrong = given - _LINE_OPTIONS[cmd]
        if wrong:
            what = f"%vram {cmd}" if cmd else "%vram"
            ok = ", ".join(_FLAGS[k] for k in sorted(_LINE_OPTIONS[cmd])) or "no options"
            raise UsageError(f"{what} does not take {', '.join(_FLAGS[k] for k in sorted(wrong))}; it takes {ok}")
        if cmd == "off":
            self._auto = None
            print("vram: automatic per-cell reports off")
            return None
        if cmd == "on":
            dev = _device(args.device)
            self._auto = {"device": str(dev), "quiet": args.quiet, "budget": _budget(args.budget), "reset_peak": not args.no_reset}
            print(f"vram: reporting every cell on {dev} (%vram off to stop)")
            return None
        if args.names and cmd not in ("panel", "estimate"):
            raise UsageError(f"unexpected {' '.join(args.names)!r} after %vram {cmd or ''}".rstrip())
        if cmd == "panel":
            return self._panel(args)
        if cmd == "estimate":
            return self._estimate(args)
        if cmd == "history":
            result: Any = history()
        elif cmd == "free":
            result = free_hidden(self.shell, _device(args.device))
        else:
            result = self.state(_device(args.device))
        if args.out:
            self.shell.user_ns[args.out] = result
        return None if args.quiet else result

    def _step_args(self, args: Any) -> tuple[Any, Any, Any, Any]:
        """MODEL BATCH [LOSS_FN] [OPTIMIZER] from notebook variable names."""
        if not 2 <= len(args.names) <= 4:
            raise UsageError(f"usage: %vram {args.command} MODEL BATCH [LOSS_FN] [OPTIMIZER] (names of notebook variables)")
        ns = self.shell.user_ns
        missing = [n for n in args.names if n not in ns]
        if missing:
            raise UsageError(f"no variable named {missing[0]!r} in the notebook")
        objs = [ns[n] for n in args.names]
        model, batch = objs[0], objs[1]
        loss_fn = optimizer = None
        for name, extra in zip(args.names[2:], objs[2:]):
            if isinstance(extra, torch.optim.Optimizer) or (callable(extra) and _positional(extra) == 1):
                kind = "optimizer"  # an optimizer, or a function params -> optimizer
            elif callable(extra):
                kind = "loss function"
            else:
                raise UsageError(f"{name} ({type(extra).__name__}) is neither a loss function nor an optimizer")
            if (optimizer if kind == "optimizer" else loss_fn) is not None:
                raise UsageError(f"two {kind}s given ({name} is the second): pass one")
            if kind == "optimizer":
                optimizer = extra
            else:
                loss_fn = extra
        return model, batch, loss_fn, optimizer

    def _estimate(self, args: Any) -> Any:
        model, batch, loss_fn, optimizer = self._step_args(args)
        from ._batch_search import max_batch_size
        from ._estimate import estimate

        if args.max_batch and args.batch_size is not None:
            raise UsageError("--max-batch searches the batch size: leave out --batch-size")
        kw: dict[str, Any] = {"recipe": _recipe(args.recipe), "target": _unquote(args.target)}
        if args.margin is not None:
            kw["margin"] = args.margin
        try:
            if args.max_batch:
                result: Any = max_batch_size(model, batch, loss_fn, optimizer, **kw)
            else:
                result = estimate(model, batch, loss_fn, optimizer, batch_size=args.batch_size, **kw)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.out:
            self.shell.user_ns[args.out] = result
        return None if args.quiet else result

    def _panel(self, args: Any) -> Any:
        model, batch, loss_fn, optimizer = self._step_args(args)
        from ._panel import panel

        try:
            p = panel(model, batch, loss_fn, optimizer)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.out:
            self.shell.user_ns[args.out] = p
        return None

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
            total=rows.total,
            allocated=sample.allocated,
            reserved=sample.reserved,
            total_memory=sample.total,
            free=sample.free,
            non_pytorch=sample.non_pytorch,
            method=probe.method,
        )
