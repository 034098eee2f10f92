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

# Elements of the largest array of one batch (batch x ...): 1 MiB of float64. Batches that stay
# in the CPU's cache: a quarter faster on 5 x 10 x 10 scores than one 32 MiB batch.
_BATCH_ELEMENTS = 1 << 17


def _batches(reps: int, per_replicate: int) -> list[int]:
    size = max(1, min(reps, _BATCH_ELEMENTS // max(per_replicate, 1)))
    return [min(size, reps - start) for start in range(0, reps, size)]


def counts(rng: np.random.Generator, batch: int, num_runs: int, num_tasks: int) -> np.ndarray:
    """``(batch, runs, tasks)`` float64: how often each run is drawn in ``runs`` draws per task."""
    draws = rng.integers(0, num_runs, size=(batch, num_runs, num_tasks))
    # Flat index (replicate, run drawn, task): one bincount tallies every replicate and task,
    # already in the layout returned (no transposed copy).
    offsets = np.arange(batch)[:, None, None] * (num_runs * num_tasks) + np.arange(num_tasks)
    tally = np.bincount((draws * num_tasks + offsets).ravel(), minlength=batch * num_runs * num_tasks)
    return tally.reshape(batch, num_runs, num_tasks).astype(np.float64)


def _interval(replicates: np.ndarray, confidence: float) -> np.ndarray:
    """``np.quantile(replicates, [alpha, 1 - alpha], axis=0, method="linear")``, bit for bit
    (tested), from one sort of each column laid out contiguously: np.quantile along axis 0 of
    a ``(2000, 101)`` array takes about five times as long, most of a performance profile's
    time (np.partition with several kth is slower than the sort)."""
    alpha = (1.0 - confidence) / 2.0
    n = replicates.shape[0]
    if n < 2 or np.isnan(replicates).any():
        return np.quantile(replicates, [alpha, 1.0 - alpha], axis=0, method="linear")
    # numpy's "linear" method: virtual index (n - 1) q, then its _lerp of the two neighbours.
    virtual = (n - 1) * np.array([alpha, 1.0 - alpha])
    below = np.floor(virtual).astype(np.intp)
    above = np.minimum(below + 1, n - 1)
    gamma = (virtual - below)[:, None]
    columns = np.ascontiguousarray(replicates.reshape(n, -1).T)
    ordered = np.sort(columns, axis=1)
    a, b = ordered[:, below].T, ordered[:, above].T
    difference = b - a
    bounds = np.where(gamma >= 0.5, b - difference * (1 - gamma), a + difference * gamma)
    return bounds.reshape(2, *replicates.shape[1:])


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
        # u[t, b] = counts_x[b, :, t] @ wins[t] @ counts_y[b, :, t]: one stacked matrix product
        # per task (a few times faster than the einsum it replaces).
        left = np.ascontiguousarray(counts_x.transpose(2, 0, 1)) @ wins
        u = np.sum(left * counts_y.transpose(2, 0, 1), axis=2)
        parts.append(np.mean(u / (runs_x * runs_y), axis=0))
    return _interval(np.concatenate(parts), confidence)


def improvement_bounds_shared(
    rngs: dict[str, np.random.Generator],
    shapes: dict[str, tuple[int, int]],
    pairs: Sequence[tuple[str, str]],
    wins: Sequence[np.ndarray],
    reps: int,
    confidence: float,
) -> np.ndarray:
    """Bounds ``(pairs, 2)`` of every pair's P(X > Y), each algorithm resampled once per
    replicate for all the pairs it is in (its own generator in ``rngs``; ``shapes`` its
    ``(runs, tasks)``). Within a pair X and Y are still resampled independently (two
    algorithms, two generators), so each pair's interval is the one of
    :func:`improvement_bounds`; only the pairs' replicates are no longer independent of each
    other. A fresh ``lamella eval aggregate`` on 5 algorithms draws 5 resamples instead of 20.
    Pairs must name two different algorithms."""
    per_replicate = max(w.size for w in wins)
    parts: list[np.ndarray] = []
    for batch in _batches(reps, per_replicate):
        # (tasks, batch, runs) per algorithm: the layout of the stacked products below.
        drawn = {
            name: np.ascontiguousarray(counts(rng, batch, *shapes[name]).transpose(2, 0, 1))
            for name, rng in rngs.items()
        }
        u = np.empty((len(pairs), batch))
        for i, ((x, y), matrix) in enumerate(zip(pairs, wins)):
            # per task t: counts_x[t] @ wins[t] @ counts_y[t] for every replicate at once
            products = np.sum((drawn[x] @ matrix) * drawn[y], axis=2)  # (tasks, batch)
            u[i] = np.mean(products, axis=0) / (shapes[x][0] * shapes[y][0])
        parts.append(u.T)
    return np.moveaxis(_interval(np.concatenate(parts), confidence), 0, -1)


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
    size = num_runs * num_tasks
    # Per run: the weight of the scores above tau is the replicate's total (size) less the
    # cumulated weight of the sorted scores up to tau; the counts are integers, so this equals
    # the matrix product with the 0/1 matrix of scores above tau exactly, without one.
    order = np.argsort(scores.reshape(-1), kind="stable")
    at_or_below = np.searchsorted(scores.reshape(-1)[order], taus, side="right")
    parts = []
    for batch in _batches(reps, num_runs * num_tasks + num_tasks * taus.shape[0]):
        weights = counts(rng, batch, num_runs, num_tasks)
        if per_run:
            cumulative = np.zeros((batch, size + 1))
            np.cumsum(weights.reshape(batch, -1)[:, order], axis=1, out=cumulative[:, 1:])
            parts.append((size - cumulative[:, at_or_below]) / size)
        else:
            task_means = np.sum(weights * scores, axis=1) / num_runs
            parts.append(np.mean(task_means[:, :, None] > taus, axis=1))
    return _interval(np.concatenate(parts), confidence)
