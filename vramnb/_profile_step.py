"""``vramnb.profile_step``: :func:`vramnb._step.profile_step`, and on an out-of-memory error
the post-mortem's fixes with the saving each would bring to this step.

The runner (:mod:`vramnb._step`) takes the state at the failure and gives the verdict; this
layer, above both the runner and the estimator, estimates each candidate technique on the
same step once the model is restored (:mod:`vramnb.diagnose._step_savings`) and puts the
verdict and fixes into the error's notes, so that a notebook shows them under the traceback.
compare, the panel and the batch search call the runner directly (no savings: one failing
recipe among many is a result, not a failure to explain).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from . import _step
from ._oom import is_oom
from ._report import oom_lines
from .diagnose import Fix, verdict
from .diagnose._step_savings import step_savings
from ._global_state import kept_as_found

__all__ = ["profile_step"]


@kept_as_found
@functools.wraps(_step.profile_step)
def profile_step(model: Any, batch: Any, loss_fn: Any = None, optimizer: Any = None, *, diagnose: bool | None = None,
                 **kwargs: Any) -> Any:
    if diagnose is not None and not isinstance(diagnose, bool):
        raise _step.InputError(f"diagnose must be True, False or None, not {diagnose!r}")
    try:
        return _step.profile_step(model, batch, loss_fn, optimizer, **kwargs)
    except BaseException as err:
        report = getattr(err, "vramnb_report", None)
        oom = getattr(report, "oom", None)
        if oom is not None and is_oom(err):
            _explain(err, oom, report, model, batch, loss_fn, optimizer, kwargs.get("recipe"), diagnose)
        raise


_NOTE_ASK = Fix("each fix's saving on this step: run it again with diagnose=True (the estimates call your loss_fn "
                "again, on fake tensors)", "vramnb.profile_step(model, batch, loss_fn, optimizer, diagnose=True)")
_NOTE_INTERRUPTED = Fix("estimating each fix's saving was interrupted", "")


def _signature() -> inspect.Signature:
    sig = inspect.signature(_step.profile_step)
    diag = inspect.Parameter("diagnose", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="bool | None")
    return sig.replace(parameters=[*sig.parameters.values(), diag])


profile_step.__signature__ = _signature()  # type: ignore[attr-defined]


def _explain(err: BaseException, oom: Any, report: Any, model: Any, batch: Any, loss_fn: Any, optimizer: Any,
             recipe: Any, diagnose: bool | None) -> None:
    """Re-give the verdict with this step's estimated savings, then add it to the error's notes."""
    import torch

    state = oom.state
    # a failure that looks like fragmentation (the request would fit the free space, not its largest
    # block) may be the margin of a step that needs more than the cap or card anyway: the step's own
    # estimate says which (diagnose._verdict); a request larger than the whole device has no saving
    useful = state is not None and oom.verdict is not None and not any(
        f.what.startswith("one request is larger") for f in oom.verdict.fixes)
    # the estimates run the step again on fake tensors: the model's forward on a fake copy (its
    # hooks left out) and the loss; a loss_fn of the user's may keep what it computes (a list of
    # losses), so by default only vramnb's own loss is run again
    auto = diagnose is None and loss_fn is None
    if useful and (diagnose or auto):
        try:
            fixes = step_savings(model, batch, loss_fn, optimizer, getattr(report, "recipe", None),
                                 state, state.beside or 0, torch.device(report.device))
            oom.verdict = verdict(state, fixes)
        except KeyboardInterrupt:  # estimating was interrupted: the step's own error stands
            oom.verdict.fixes.append(_NOTE_INTERRUPTED)
        except Exception:  # noqa: BLE001 - savings are extra: never in the way of the user's error
            pass
    elif useful and diagnose is None:
        oom.verdict.fixes.append(_NOTE_ASK)
    if hasattr(err, "add_note"):  # shown under the traceback (Python >= 3.11)
        try:
            for line in oom_lines(oom)[1:]:
                err.add_note(f"vramnb: {line}")
        except Exception:  # noqa: BLE001 - the user's error is never replaced
            pass
