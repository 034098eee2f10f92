"""The bootstrap's NumPy kernels: small inputs, where compiling the JAX kernels would cost more
than running these (see bootstrap.py).

The same estimator as the JAX kernels: a replicate is how often each run was drawn (``counts``,
``runs`` draws with replacement within each task), and every statistic is a weighted sum over
the original scores (the IQM keeps the weight of the scores sorted once that falls inside the
middle half). Replicates are processed in batches, vectorised over the batch, to bound memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Elements of the largest array of one batch (batch x ...), to bound memory (32 MiB of float64).
_BATCH_ELEMENTS = 1 << 22


def _batches(reps: int, per_replicate: int) -> list[int]:
    size = max(1, min(reps, _BATCH_ELEMENTS // max(per_replicate, 1)))
    return [min(size, reps - start) for start in range(0, reps, size)]


def counts(rng: np.random.Generator, batch: int, num_runs: int, num_tasks: int) -> np.ndarray:
    """``(batch, runs, tasks)`` float64: how often each run is drawn in ``runs`` draws per task."""
    draws = rng.integers(0, num_runs, size=(batch, num_runs, num_tasks))
    # Flat index (replicate, task, run): one bincount tallies every replicate and task.
    offsets = (np.arange(batch)[:, None, None] * num_tasks + np.arange(num_tasks)[None, None, :]) * num_runs
    tally = np.bincount((offsets + draws).ravel(), minlength=batch * num_tasks * num_runs)
    return tally.reshape(batch, num_tasks, num_runs).transpose(0, 2, 1).astype(np.float64)


def _interval(replicates: np.ndarray, confidence: float) -> np.ndarray:
    alpha = (1.0 - confidence) / 2.0
    return np.quantile(replicates, [alpha, 1.0 - alpha], axis=0, method="linear")


def _statistic(
    name: str, weights: np.ndarray, scores: np.ndarray, order: np.ndarray, gamma: float
) -> np.ndarray:
    """One statistic per replicate from ``weights`` ``(batch, runs, tasks)``."""
    batch, (num_runs, num_tasks) = weights.shape[0], scores.shape
    if name == "mean":
        return np.mean(np.sum(weights * scores, axis=1) / num_runs, axis=1)
    if name == "median":
        return np.median(np.sum(weights * scores, axis=1) / num_runs, axis=1)
    if name == "optimality_gap":
        return gamma - np.sum(weights * np.minimum(scores, gamma), axis=(1, 2)) / (num_runs * num_tasks)
    # iqm: copy c of the run with sorted rank r sits at positions [cum_r - c_r, cum_r) of the
    # sorted resample; keep the part of that range inside [low, high).
    low = int(0.25 * num_runs * num_tasks)
    high = num_runs * num_tasks - low
    cumulative = np.cumsum(weights.reshape(batch, -1)[:, order], axis=1)
    kept = np.clip(cumulative, low, high)
    weight = np.diff(kept, axis=1, prepend=float(low))
    return weight @ scores.reshape(-1)[order] / (high - low)


def aggregate_bounds(
    rng: np.random.Generator,
    scores: np.ndarray,
    names: Sequence[str],
    gamma: float,
    reps: int,
    confidence: float,
) -> np.ndarray:
    """Bounds ``(2, statistics, evaluations)`` for scores ``(runs, tasks, evaluations)``; the
    same draw of runs serves every evaluation of a replicate."""
    num_runs, num_tasks, num_steps = scores.shape
    orders = [np.argsort(scores[:, :, s].reshape(-1), kind="stable") for s in range(num_steps)]
    parts = []
    for batch in _batches(reps, num_runs * num_tasks * max(num_steps, 2)):
        weights = counts(rng, batch, num_runs, num_tasks)
        parts.append(
            np.stack(
                [
                    np.stack(
                        [_statistic(n, weights, scores[:, :, s], orders[s], gamma) for s in range(num_steps)],
                        -1,
                    )
                    for n in names
                ],
                axis=1,
            )
        )
    return _interval(np.concatenate(parts), confidence)


def improvement_bounds(
    rng: np.random.Generator, wins: np.ndarray, reps: int, confidence: float
) -> np.ndarray:
    """Bounds ``(2,)`` of P(X > Y) from the win matrix ``(tasks, runs_x, runs_y)``; X and Y are
    resampled independently."""
    num_tasks, runs_x, runs_y = wins.shape
    parts = []
    for batch in _batches(reps, num_tasks * runs_x * runs_y):
        counts_x = counts(rng, batch, runs_x, num_tasks)
        counts_y = counts(rng, batch, runs_y, num_tasks)
        # u[b, t] = counts_x[b, :, t] @ wins[t] @ counts_y[b, :, t]
        left = np.einsum("bit,tij->btj", counts_x, wins)
        u = np.sum(left * counts_y.transpose(0, 2, 1), axis=2)
        parts.append(np.mean(u / (runs_x * runs_y), axis=1))
    return _interval(np.concatenate(parts), confidence)


def profile_bounds(
    rng: np.random.Generator,
    scores: np.ndarray,
    taus: np.ndarray,
    per_run: bool,
    reps: int,
    confidence: float,
) -> np.ndarray:
    """Bounds ``(2, thresholds)`` of the performance profile of scores ``(runs, tasks)``."""
    num_runs, num_tasks = scores.shape
    above = (scores.reshape(-1)[:, None] > taus[None, :]).astype(np.float64)  # (runs * tasks, thresholds)
    parts = []
    for batch in _batches(reps, num_runs * num_tasks + num_tasks * taus.shape[0]):
        weights = counts(rng, batch, num_runs, num_tasks)
        if per_run:
            parts.append(weights.reshape(batch, -1) @ above / (num_runs * num_tasks))
        else:
            task_means = np.sum(weights * scores, axis=1) / num_runs
            parts.append(np.mean(task_means[:, :, None] > taus, axis=1))
    return _interval(np.concatenate(parts), confidence)
