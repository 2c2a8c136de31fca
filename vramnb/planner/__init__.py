"""Planning: the cheapest combination of techniques that makes a step fit a card.

:mod:`._fit` searches the allowed techniques on estimates (:func:`vramnb.estimate` with
its step-time model), ranks the plans that fit by predicted step time and gives the code
to apply the best one. It reads estimates and writes a report; it runs nothing on the
device unless asked to verify.
"""

from ._fit import DEFAULT_ALLOW, FitResult, Plan, fit

__all__ = ["fit", "FitResult", "Plan", "DEFAULT_ALLOW"]
