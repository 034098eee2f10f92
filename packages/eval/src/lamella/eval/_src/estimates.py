"""The results of the bootstrap: point estimates with confidence intervals (NumPy only)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["STATISTICS", "Estimates", "ImprovementEstimates"]

STATISTICS = ("iqm", "mean", "median", "optimality_gap")
"""Built-in statistics, by name."""


@dataclasses.dataclass(frozen=True)
class Estimates:
    """Point estimates with bootstrap confidence intervals, per algorithm.

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
