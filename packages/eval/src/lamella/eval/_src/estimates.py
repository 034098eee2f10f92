"""The results of the bootstrap: point estimates with confidence intervals (NumPy only)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError

__all__ = ["STATISTICS", "Estimates", "ImprovementEstimates", "require_kind"]

STATISTICS = ("iqm", "mean", "median", "optimality_gap")
"""Built-in statistics, by name."""


@dataclasses.dataclass(frozen=True)
class Estimates:
    """Point estimates with bootstrap confidence intervals, per algorithm.

    Three functions make them, each of its own form, and each plot or table takes one form
    (another is an :class:`EvalError` naming both): :func:`interval_estimates` (one value per
    statistic, no ``x``), :func:`performance_profiles` (one value per threshold, the thresholds
    as ``x``) and :func:`sample_efficiency` (``(statistics, evaluations)`` per algorithm, the
    step counts as ``x``).

    Attributes:
        labels: what each entry of the last axis is (statistic names, or thresholds).
        point: algorithm -> float64 array ``(len(labels),)`` (``(len(labels), evaluations)`` for
            sample-efficiency curves).
        lower: the lower confidence bounds, same shapes.
        upper: the upper confidence bounds, same shapes.
        confidence: the interval's coverage, e.g. 0.95.
        reps: the number of bootstrap replicates.
        x: algorithm -> the x axis where there is one (step counts of curves, thresholds of
            profiles), else empty.
    """

    labels: tuple[Any, ...]
    point: Mapping[str, np.ndarray]
    lower: Mapping[str, np.ndarray]
    upper: Mapping[str, np.ndarray]
    confidence: float
    reps: int
    x: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ImprovementEstimates:
    """Probability of improvement P(X > Y) per pair of algorithms.

    Attributes:
        pairs: the ``(x, y)`` algorithm pairs.
        point: float64 ``(pairs,)``.
        lower: float64 ``(pairs,)``.
        upper: float64 ``(pairs,)``.
        confidence: the interval's coverage.
        reps: the number of bootstrap replicates.
    """

    pairs: tuple[tuple[str, str], ...]
    point: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    confidence: float
    reps: int


# The form of each function's results, and what draws or tabulates it.
_FORMS = {
    "interval_estimates": (
        "one value per statistic",
        "plot_interval_estimates, estimates_table, ranking_table",
    ),
    "performance_profiles": (
        "one value per threshold, the thresholds as x",
        "plot_performance_profiles, estimates_table",
    ),
    "sample_efficiency": (
        "(statistics, evaluations) per algorithm, the step counts as x",
        "plot_sample_efficiency",
    ),
    "probability_of_improvement_estimates": (
        "P(x > y) per pair of algorithms",
        "plot_probability_of_improvement, improvement_table",
    ),
}


def _kind(estimates: Estimates, where: str) -> str:
    """Which function's form ``estimates`` has, after checking that its algorithms agree with each
    other and with its labels (estimates of two calls merged into one would be drawn under the
    labels of one of them)."""
    names = list(estimates.point)
    if not names:
        raise EvalError(f"{where}: the Estimates hold no algorithm; give the results of a call with scores")
    if set(estimates.lower) != set(names) or set(estimates.upper) != set(names):
        raise EvalError(
            f"{where}: the Estimates' point, lower and upper name different algorithms ({names}, "
            f"{list(estimates.lower)}, {list(estimates.upper)}); give the results of one call unchanged"
        )
    shapes = {a: np.shape(estimates.point[a]) for a in names}
    for a in names:
        for side in ("lower", "upper"):
            if np.shape(getattr(estimates, side)[a]) != shapes[a]:
                raise EvalError(
                    f"{where}: the {side} bounds of {a!r} have shape {np.shape(getattr(estimates, side)[a])}, "
                    f"the point estimates {shapes[a]}; give the results of one call unchanged"
                )
    first = names[0]
    for a in names:
        if len(shapes[a]) != len(shapes[first]) or len(shapes[a]) not in (1, 2):
            raise EvalError(
                f"{where}: the estimates of {first!r} have shape {shapes[first]} and those of {a!r} "
                f"{shapes[a]}: these are the results of different calls (interval_estimates and "
                "performance_profiles give (labels,), sample_efficiency (labels, evaluations)); draw or "
                "tabulate each call's Estimates on its own"
            )
        if shapes[a][0] != len(estimates.labels):
            raise EvalError(
                f"{where}: the estimates of {a!r} have shape {shapes[a]}, {shapes[a][0]} along the label axis, "
                f"but the labels name {len(estimates.labels)} ({list(estimates.labels)!r:.80}): values and "
                "labels come from different calls; give the results of one call unchanged"
            )
    if estimates.x or len(shapes[first]) == 2:
        for a in names:
            if np.shape(estimates.x.get(a, ())) != shapes[a][-1:]:
                raise EvalError(
                    f"{where}: the x axis of {a!r} has shape {np.shape(estimates.x.get(a, ()))}, its "
                    f"estimates {shapes[a]}: give one x value (threshold or step count) per column"
                )
    if len(shapes[first]) == 2:
        return "sample_efficiency"
    return "performance_profiles" if estimates.x else "interval_estimates"


def require_kind(estimates: Any, where: str, *kinds: str) -> str:
    """Check that ``estimates`` are results of one of ``kinds`` (function names, e.g.
    ``"interval_estimates"``) and consistent; return the kind. Raises :class:`EvalError`
    naming the kind given and what to do with it."""
    if isinstance(estimates, ImprovementEstimates):
        kind = "probability_of_improvement_estimates"
        sizes = [
            len(estimates.pairs),
            *(np.size(v) for v in (estimates.point, estimates.lower, estimates.upper)),
        ]
        if len(set(sizes)) > 1:
            raise EvalError(
                f"{where}: the ImprovementEstimates hold {sizes[0]} pairs but {sizes[1:]} point, lower and "
                "upper values; give the results of one call unchanged"
            )
    elif isinstance(estimates, Estimates):
        kind = _kind(estimates, where)
    else:
        raise EvalError(
            f"{where}: takes the results of {' or '.join(kinds)}, got {type(estimates).__name__} "
            f"{estimates!r:.80}"
        )
    if kind not in kinds:
        form, use = _FORMS[kind]
        wanted = "; ".join(f"{k}: {_FORMS[k][0]}" for k in kinds)
        raise EvalError(
            f"{where}: got the results of {kind} ({form}); it takes those of {wanted}. Give these to {use}"
        )
    return kind
