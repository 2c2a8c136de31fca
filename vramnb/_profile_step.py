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
from .diagnose import verdict
from .diagnose._step_savings import step_savings

__all__ = ["profile_step"]


@functools.wraps(_step.profile_step)
def profile_step(model: Any, batch: Any, loss_fn: Any = None, optimizer: Any = None, *, diagnose: bool = True,
                 **kwargs: Any) -> Any:
    if not isinstance(diagnose, bool):
        raise _step.InputError(f"diagnose must be True or False, not {diagnose!r}")
    try:
        return _step.profile_step(model, batch, loss_fn, optimizer, **kwargs)
    except BaseException as err:
        report = getattr(err, "vramnb_report", None)
        oom = getattr(report, "oom", None)
        if oom is not None and is_oom(err):
            _explain(err, oom, report, model, batch, loss_fn, optimizer, kwargs.get("recipe"), diagnose)
        raise


def _signature() -> inspect.Signature:
    sig = inspect.signature(_step.profile_step)
    diag = inspect.Parameter("diagnose", inspect.Parameter.KEYWORD_ONLY, default=True, annotation="bool")
    return sig.replace(parameters=[*sig.parameters.values(), diag])


profile_step.__signature__ = _signature()  # type: ignore[attr-defined]


def _explain(err: BaseException, oom: Any, report: Any, model: Any, batch: Any, loss_fn: Any, optimizer: Any,
             recipe: Any, diagnose: bool) -> None:
    """Re-give the verdict with this step's estimated savings, then add it to the error's notes."""
    import torch

    state = oom.state
    if diagnose and state is not None:
        try:
            fixes = step_savings(model, batch, loss_fn, optimizer, getattr(report, "recipe", None),
                                 state, state.beside or 0, torch.device(report.device))
            oom.verdict = verdict(state, fixes)
        except KeyboardInterrupt:  # estimating was interrupted: the step's own error stands
            report.notes.append("the post-mortem's savings were interrupted")
        except Exception:  # noqa: BLE001 - savings are extra: never in the way of the user's error
            pass
    if hasattr(err, "add_note"):  # shown under the traceback (Python >= 3.11)
        try:
            for line in oom_lines(oom)[1:]:
                err.add_note(f"vramnb: {line}")
        except Exception:  # noqa: BLE001 - the user's error is never replaced
            pass
