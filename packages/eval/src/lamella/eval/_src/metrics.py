"""Aggregate metrics of a ``(runs, tasks)`` score matrix.

Each function accepts a NumPy array or a JAX array. NumPy input is computed in
float64 with the same operations in the same order as rliable 1.2 (so point
estimates are bit-identical to rliable's); JAX input is computed with
``jax.numpy`` and is jit- and vmap-safe.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError

__all__ = [
    "iqm",
    "mean",
    "median",
    "optimality_gap",
    "performance_profile",
    "probability_of_improvement",
]


def _namespace(*arrays: Any) -> ModuleType:
    # JAX arrays exist only once jax is imported: NumPy input never imports it (cold start).
    jax = sys.modules.get("jax")
    if jax is not None and any(isinstance(a, jax.Array) for a in arrays):
        import jax.numpy as jnp

        return jnp
    return np


def _matrix(scores: Any, xp: ModuleType) -> Any:
    scores = xp.asarray(scores) if xp is not np else np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise EvalError(f"scores must be a (runs, tasks) matrix, got shape {scores.shape}")
    return scores


def mean(scores: Any) -> Any:
    """Mean over tasks of the per-task mean score.

    Args:
        scores: ``(runs, tasks)``.

    Returns:
        A scalar.
    """
    xp = _namespace(scores)
    scores = _matrix(scores, xp)
    return xp.mean(xp.mean(scores, axis=0), axis=0)


def median(scores: Any) -> Any:
    """Median over tasks of the per-task mean score (``scores``: ``(runs, tasks)``)."""
    xp = _namespace(scores)
    scores = _matrix(scores, xp)
    return xp.median(xp.mean(scores, axis=0), axis=0)


def optimality_gap(scores: Any, gamma: float = 1.0) -> Any:
    """``gamma`` minus the mean of ``min(score, gamma)`` over all runs and tasks.

    Args:
        scores: ``(runs, tasks)``, usually normalised so that 1 is a good score.
        gamma: the threshold above which a score counts as optimal (rliable uses 1).
    """
    xp = _namespace(scores)
    scores = _matrix(scores, xp)
    return gamma - xp.mean(xp.minimum(scores, gamma))


def _cuts(count: int) -> tuple[int, int]:
    low = int(0.25 * count)
    return low, count - low


def iqm(scores: Any) -> Any:
    """Interquartile mean: the 25 % trimmed mean over all runs and tasks together.

    With ``n = runs * tasks`` values sorted, the mean of positions
    ``[floor(n / 4), n - floor(n / 4))``.
    """
    xp = _namespace(scores)
    flat = _matrix(scores, xp).reshape(-1)
    low, high = _cuts(flat.shape[0])
    kept: Any
    if xp is np:
        # Partition at the same positions as scipy.stats.trim_mean so the mean sums the
        # same values in the same order.
        kept = np.partition(flat, (low, high - 1))[low:high]
    else:
        kept = xp.sort(flat)[low:high]
    return xp.mean(kept, axis=0)


def _improvement_matrix(x: Any, y: Any, xp: ModuleType) -> Any:
    """``(tasks, runs_x, runs_y)``: 1 where x beats y, 1/2 on a tie, 0 otherwise."""
    xt, yt = x.T[:, :, None], y.T[:, None, :]
    return (xt > yt).astype(xt.dtype) + 0.5 * (xt == yt).astype(xt.dtype)


def probability_of_improvement(scores_x: Any, scores_y: Any) -> Any:
    """P(X > Y): the Mann-Whitney U statistic of X against Y per task, over ``runs_x * runs_y``,
    averaged over tasks. Ties count one half.

    Args:
        scores_x: ``(runs_x, tasks)``.
        scores_y: ``(runs_y, tasks)``, the same tasks in the same order.
    """
    xp = _namespace(scores_x, scores_y)
    x, y = _matrix(scores_x, xp), _matrix(scores_y, xp)
    if x.shape[1] != y.shape[1]:
        raise EvalError(f"scores_x has {x.shape[1]} tasks but scores_y has {y.shape[1]}")
    # Every U here is a sum of halves, exact in floating point, as scipy's rank sums are.
    wins = xp.sum(_improvement_matrix(x, y, xp), axis=(1, 2))
    return xp.mean(wins / (x.shape[0] * y.shape[0]), axis=0)


def performance_profile(scores: Any, taus: Any, per_run: bool = True) -> Any:
    """Fraction of scores above each threshold.

    Args:
        scores: ``(runs, tasks)``.
        taus: ``(thresholds,)``.
        per_run: ``True``: the fraction of all runs x tasks scores ``> tau`` (rliable's score
            distribution); ``False``: the fraction of per-task mean scores ``> tau``.

    Returns:
        ``(thresholds,)``.
    """
    xp = _namespace(scores, taus)
    scores = _matrix(scores, xp)
    taus = xp.asarray(taus) if xp is not np else np.asarray(taus, dtype=np.float64)
    values = scores if per_run else xp.mean(scores, axis=0)
    if xp is np:
        return np.array([np.mean(values > tau) for tau in taus])
    return xp.mean(values[..., None] > taus, axis=tuple(range(values.ndim)))
