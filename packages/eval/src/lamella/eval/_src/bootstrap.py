"""Stratified bootstrap confidence intervals, computed with JAX.

Resampling follows rliable 1.2's ``StratifiedBootstrap``: within each task, the
runs are drawn with replacement (``runs`` draws from ``runs``), independently per
task; tasks are never resampled. Probability of improvement resamples X and Y
independently (rliable's ``StratifiedIndependentBootstrap``). Intervals are
percentile intervals (rliable's default ``method="percentile"``): the
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the bootstrap
replicates, linearly interpolated like ``np.percentile``.

A replicate is represented by how often each run was drawn, ``counts``
``(runs, tasks)``, so statistics become weighted sums over the original scores:
the interquartile mean walks the scores sorted once up front and keeps the
weight that falls inside the middle half, with no sort per replicate.
Replicates are vmapped (in batches, to bound memory) and vmapped again over
algorithms, pairs and evaluations; each shape compiles once. Everything runs in
float64 (``jax.enable_x64`` inside these functions only).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.eval._src import metrics
from lamella.eval._src.errors import EvalError

__all__ = [
    "STATISTICS",
    "Estimates",
    "ImprovementEstimates",
    "interval_estimates",
    "performance_profiles",
    "probability_of_improvement_estimates",
    "sample_efficiency",
]

STATISTICS = ("iqm", "mean", "median", "optimality_gap")
"""Built-in statistics, by name."""

_POINT: dict[str, Callable[..., Any]] = {
    "iqm": metrics.iqm,
    "mean": metrics.mean,
    "median": metrics.median,
    "optimality_gap": metrics.optimality_gap,
}
# Elements of one batch of replicates (batch x runs x runs x tasks), to bound memory.
_BATCH_ELEMENTS = 1 << 22
# Largest runs x tasks for which the IQM uses a (values, values) matrix (8 MiB at 1024).
_MAX_BELOW = 1024


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


def _x64() -> Any:
    """float64 inside these functions only (the caller's setting is left alone)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # type: ignore[attr-defined]  # older jax

    return enable_x64()


def _key(key: jax.Array | int) -> jax.Array:
    if isinstance(key, int):
        return jax.random.key(key)
    return key


def _check(reps: int, confidence: float) -> None:
    if not isinstance(reps, int) or reps < 2:
        raise EvalError(f"reps (bootstrap replicates) must be an int >= 2, got {reps!r}; 2000 is usual")
    if not 0.0 < confidence < 1.0:
        raise EvalError(f"confidence must be strictly between 0 and 1, got {confidence!r}")


def _draws(key: jax.Array, num_runs: int, num_tasks: int) -> jax.Array:
    """Run indices ``(runs, tasks)``, uniform on ``[0, runs)``, drawn with replacement.

    The bootstrap spends most of its time drawing, so each 32-bit random word gives
    ``k`` draws, its first ``k`` digits in base ``runs`` (multiply by ``runs``, the high
    half is the draw, the low half the rest of the word), with ``k`` the largest
    such that ``runs**k <= 2**12``. The joint law of those ``k`` draws is within total
    variation ``runs**k / 2**32 <= 2**-20`` of independent uniform draws.
    """
    per_word = max(1, int(np.floor(12 * np.log(2) / np.log(max(num_runs, 2)) + 1e-9)))
    # Digits stacked by rows, not interleaved: XLA fuses the draws into the tally, and
    # a row layout keeps that fused index arithmetic cheap.
    words = jax.random.bits(key, (-(-num_runs // per_word), num_tasks), jnp.uint32).astype(jnp.uint64)
    digits = []
    for _ in range(per_word):
        words = words * num_runs
        digits.append((words >> 32).astype(jnp.int32))
        words = words & 0xFFFFFFFF
    return jnp.concatenate(digits, axis=0)[:num_runs]


def _tally(draws: jax.Array, num_runs: int) -> jax.Array:
    """How often each run was drawn, ``(runs, tasks)`` float64, from draws ``(runs, tasks)``."""
    return (draws[None] == jnp.arange(num_runs)[:, None, None]).sum(axis=1).astype(jnp.float64)


def _counts(key: jax.Array, num_runs: int, num_tasks: int) -> jax.Array:
    """How often each run is drawn: ``(runs, tasks)``, ``runs`` draws per task."""
    return _tally(_draws(key, num_runs, num_tasks), num_runs)


def _batch_size(reps: int, per_replicate: int) -> int:
    return max(1, min(reps, _BATCH_ELEMENTS // max(per_replicate, 1)))


def _replicates(replicate: Callable[[jax.Array], jax.Array], keys: jax.Array, batch: int) -> jax.Array:
    """``replicate`` over ``keys``: one vmap, or a loop over batches where that would not fit."""
    if batch >= keys.shape[0]:
        return jax.vmap(replicate)(keys)
    return jax.lax.map(replicate, keys, batch_size=batch)


def _interval(replicates: jax.Array, confidence: float) -> jax.Array:
    """``(2, ...)`` percentile bounds over the leading replicate axis."""
    alpha = (1.0 - confidence) / 2.0
    return jnp.quantile(replicates, jnp.array([alpha, 1.0 - alpha]), axis=0, method="linear")


def _below(order: jax.Array) -> jax.Array:
    """``(values, values)`` 0/1 matrix: entry ``[i, j]`` is 1 where value ``i`` (flat index)
    has sorted rank ``<= j``; ``counts.ravel() @ below`` is the cumulative count in
    sorted order."""
    size = order.shape[0]
    rank = jnp.zeros(size, jnp.int32).at[order].set(jnp.arange(size, dtype=jnp.int32))
    return (rank[:, None] <= jnp.arange(size)[None, :]).astype(jnp.float64)


def _statistic_from_counts(
    name: str, counts: jax.Array, scores: jax.Array, order: jax.Array, below: jax.Array, gamma: float
) -> jax.Array:
    num_runs, num_tasks = scores.shape
    if name == "mean":
        return jnp.mean(jnp.sum(counts * scores, axis=0) / num_runs)
    if name == "median":
        return jnp.median(jnp.sum(counts * scores, axis=0) / num_runs)
    if name == "optimality_gap":
        return gamma - jnp.sum(counts * jnp.minimum(scores, gamma)) / (num_runs * num_tasks)
    # iqm: the sorted resample puts copy c of the run with sorted rank r at positions
    # [cum_r - c_r, cum_r); keep the part of that range inside [low, high).
    low = int(0.25 * num_runs * num_tasks)
    high = num_runs * num_tasks - low
    if below.ndim == 2:
        # Cumulative counts in sorted order from one matrix product with a matrix built
        # once: cheaper on CPU than a gather into sorted order and a scan per replicate.
        cumulative = counts.reshape(-1) @ below
    else:  # too many values for a (values, values) matrix
        cumulative = jnp.cumsum(counts.reshape(-1)[order])
    kept = jnp.clip(cumulative, low, high)
    weight = kept - jnp.concatenate([jnp.full(1, low, kept.dtype), kept[:-1]])
    return jnp.sum(weight * scores.reshape(-1)[order]) / (high - low)


@functools.partial(jax.jit, static_argnames=("names", "customs", "reps", "confidence"))
def _aggregate_bootstrap(
    keys: jax.Array,
    scores: jax.Array,
    gamma: float,
    *,
    names: tuple[str, ...],
    customs: tuple[Callable[[jax.Array], jax.Array], ...],
    reps: int,
    confidence: float,
) -> jax.Array:
    """Bounds ``(algorithms, 2, statistics, evaluations)`` for scores ``(algorithms, runs, tasks, evaluations)``."""
    _, num_runs, num_tasks, num_steps = scores.shape
    # Sorted once per algorithm and evaluation: replicates reuse the order.
    orders = jnp.argsort(scores.reshape(scores.shape[0], num_runs * num_tasks, num_steps), axis=1)
    use_matrix = "iqm" in names and num_runs * num_tasks <= _MAX_BELOW
    below = jax.vmap(jax.vmap(_below, in_axes=1, out_axes=2))(orders) if use_matrix else orders

    def one_algorithm(key: jax.Array, scores: jax.Array, order: jax.Array, below: jax.Array) -> jax.Array:
        def replicate(rep_key: jax.Array) -> jax.Array:
            draws = _draws(rep_key, num_runs, num_tasks)
            counts = _tally(draws, num_runs)

            def one_step(scores: jax.Array, order: jax.Array, below: jax.Array) -> jax.Array:
                values = [_statistic_from_counts(n, counts, scores, order, below, gamma) for n in names]
                if customs:
                    resampled = jnp.take_along_axis(scores, draws, axis=0)
                    values += [jnp.asarray(fn(resampled), scores.dtype) for fn in customs]
                return jnp.stack(values)

            below_axis = 2 if use_matrix else 1
            return jax.vmap(one_step, in_axes=(2, 1, below_axis), out_axes=1)(scores, order, below)

        rep_keys = jax.random.split(key, reps)
        batch = _batch_size(reps, num_runs * num_runs * num_tasks * num_steps)
        return _interval(_replicates(replicate, rep_keys, batch), confidence)

    return jax.vmap(one_algorithm)(keys, scores, orders, below)


Statistics = Sequence[str] | Mapping[str, "str | Callable[..., Any]"]


def _resolve(
    statistics: Statistics,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Callable[..., Any], ...]]:
    """(labels, built-in statistic names, custom functions); labels list built-ins first."""
    names: list[str] = []
    builtin: list[str] = []
    custom: dict[str, Callable[..., Any]] = {}
    items = statistics.items() if isinstance(statistics, Mapping) else ((n, n) for n in statistics)
    for name, statistic in items:
        if isinstance(statistic, str):
            names.append(name)
            builtin.append(statistic)
        elif callable(statistic):
            custom[name] = statistic
        else:
            raise EvalError(f"statistic {name!r} is {statistic!r}; give a built-in name or a function")
    unknown = [n for n in builtin if n not in STATISTICS]
    if unknown:
        raise EvalError(
            f"unknown statistic(s) {unknown}; use {list(STATISTICS)} or pass a mapping name -> function"
        )
    return (*names, *custom), tuple(builtin), tuple(custom.values())


def _by_shape(values: Mapping[str, np.ndarray]) -> dict[tuple[int, ...], list[str]]:
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, array in values.items():
        groups.setdefault(np.shape(array), []).append(name)
    return groups


def _aggregates(
    values: Mapping[str, np.ndarray],
    statistics: Statistics,
    reps: int,
    confidence: float,
    key: jax.Array | int,
    gamma: float,
) -> tuple[tuple[str, ...], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Shared by final scores (evaluations = 1) and curves."""
    _check(reps, confidence)
    labels, builtin, customs = _resolve(statistics)
    arrays = {a: np.asarray(v, dtype=np.float64) for a, v in values.items()}
    for algorithm, array in arrays.items():
        if array.ndim != 3 or array.shape[0] < 1 or array.shape[1] < 1:
            raise EvalError(
                f"scores of {algorithm!r} have shape {array.shape}; expected (runs, tasks[, evaluations])"
            )
    point, lower, upper = {}, {}, {}
    for algorithm, array in arrays.items():
        columns = []
        for s in range(array.shape[2]):
            step = array[:, :, s]
            row = [_POINT[n](step, gamma) if n == "optimality_gap" else _POINT[n](step) for n in builtin]
            row += [np.asarray(fn(step), dtype=np.float64) for fn in customs]
            columns.append(row)
        point[algorithm] = np.array(columns, dtype=np.float64).T  # (statistics, evaluations)
    keys = jax.random.split(_key(key), len(arrays))
    key_of = dict(zip(arrays, keys))
    with _x64():
        for names in _by_shape(arrays).values():
            stacked = jnp.asarray(np.stack([arrays[a] for a in names]))
            bounds = _aggregate_bootstrap(
                jnp.stack([key_of[a] for a in names]),
                stacked,
                float(gamma),
                names=builtin,
                customs=customs,
                reps=reps,
                confidence=float(confidence),
            )
            bounds = np.asarray(bounds)
            for i, algorithm in enumerate(names):
                lower[algorithm], upper[algorithm] = bounds[i, 0], bounds[i, 1]
    return labels, point, lower, upper


def interval_estimates(
    scores: Mapping[str, Any],
    statistics: Statistics = STATISTICS,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: jax.Array | int = 0,
    gamma: float = 1.0,
) -> Estimates:
    """Aggregate statistics with stratified-bootstrap percentile confidence intervals.

    Args:
        scores: algorithm -> ``(runs, tasks)`` scores (e.g. ``Scores.values``); algorithms
            may have different numbers of runs.
        statistics: names from :data:`STATISTICS`, or a mapping ``name -> fn`` where ``fn`` is
            a built-in name or a JAX-traceable function of a ``(runs, tasks)`` matrix.
        reps: bootstrap replicates.
        confidence: coverage of the interval.
        key: a JAX PRNG key or an int seed.
        gamma: the optimality-gap threshold.

    Returns:
        :class:`Estimates` with ``point[algorithm]`` of shape ``(statistics,)``.
    """
    three_d = {a: np.asarray(v, dtype=np.float64)[..., None] for a, v in scores.items()}
    for algorithm, array in three_d.items():
        if array.ndim != 3:
            raise EvalError(f"scores of {algorithm!r} have shape {array.shape[:-1]}; expected (runs, tasks)")
    labels, point, lower, upper = _aggregates(three_d, statistics, reps, confidence, key, gamma)
    squeeze = lambda d: {a: v[:, 0] for a, v in d.items()}  # noqa: E731
    return Estimates(labels, squeeze(point), squeeze(lower), squeeze(upper), confidence, reps)


def sample_efficiency(
    curves: Mapping[str, Any],
    step_counts: Mapping[str, Any] | None = None,
    statistics: Statistics = ("iqm",),
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: jax.Array | int = 0,
    gamma: float = 1.0,
) -> Estimates:
    """Aggregates at every evaluation of learning curves, with confidence intervals.

    One replicate draws runs once and uses the same draw at every evaluation (a run is
    the unit that is repeated); each evaluation's interval has the same marginal
    distribution as rliable's per-evaluation bootstrap.

    Args:
        curves: algorithm -> ``(runs, tasks, evaluations)`` (e.g. ``Curves.values``).
        step_counts: algorithm -> ``(evaluations,)`` x axis (e.g. ``Curves.step_counts``);
            evaluation indices where omitted.

    Returns:
        :class:`Estimates` with ``point[algorithm]`` of shape ``(statistics, evaluations)`` and
        ``x[algorithm]`` the step counts.
    """
    labels, point, lower, upper = _aggregates(curves, statistics, reps, confidence, key, gamma)
    x = {
        a: np.asarray(step_counts[a], dtype=np.float64)
        if step_counts is not None
        else np.arange(point[a].shape[1], dtype=np.float64)
        for a in point
    }
    return Estimates(labels, point, lower, upper, confidence, reps, x)


@functools.partial(jax.jit, static_argnames=("reps", "confidence"))
def _improvement_bootstrap(keys: jax.Array, wins: jax.Array, *, reps: int, confidence: float) -> jax.Array:
    """Bounds ``(pairs, 2)`` from win matrices ``(pairs, tasks, runs_x, runs_y)``."""
    _, num_tasks, runs_x, runs_y = wins.shape

    def one_pair(key: jax.Array, wins: jax.Array) -> jax.Array:
        def replicate(rep_key: jax.Array) -> jax.Array:
            key_x, key_y = jax.random.split(rep_key)
            counts_x = _counts(key_x, runs_x, num_tasks)
            counts_y = _counts(key_y, runs_y, num_tasks)
            # Elementwise rather than a batched dot: with a few runs per side XLA fuses
            # this with the tallies, where tiny dots would not.
            u = jnp.sum(counts_x.T[:, :, None] * wins * counts_y.T[:, None, :], axis=(1, 2))
            return jnp.mean(u / (runs_x * runs_y))

        batch = _batch_size(reps, num_tasks * runs_x * runs_y)
        return _interval(_replicates(replicate, jax.random.split(key, reps), batch), confidence)

    return jax.vmap(one_pair)(keys, wins)


def probability_of_improvement_estimates(
    scores: Mapping[str, Any],
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: jax.Array | int = 0,
) -> ImprovementEstimates:
    """Probability of improvement P(X > Y) with stratified-bootstrap confidence intervals.

    Args:
        scores: algorithm -> ``(runs, tasks)``.
        pairs: ``(x, y)`` pairs; every unordered pair in ``scores`` order where omitted.
        reps: bootstrap replicates (X and Y resampled independently).
        confidence: coverage of the interval.
        key: a JAX PRNG key or an int seed.
    """
    _check(reps, confidence)
    arrays = {a: np.asarray(v, dtype=np.float64) for a, v in scores.items()}
    pairs = tuple(itertools.combinations(arrays, 2)) if pairs is None else tuple((x, y) for x, y in pairs)
    for pair in pairs:
        for name in pair:
            if name not in arrays:
                raise EvalError(f"pair {pair}: no scores for algorithm {name!r} (have {list(arrays)})")
    point = np.array([metrics.probability_of_improvement(arrays[x], arrays[y]) for x, y in pairs])
    bounds = np.empty((len(pairs), 2))
    keys = jax.random.split(_key(key), max(len(pairs), 1))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        groups.setdefault((arrays[x].shape[0], arrays[y].shape[0]), []).append(i)
    with _x64():
        for members in groups.values():
            wins = np.stack(
                [metrics._improvement_matrix(arrays[pairs[i][0]], arrays[pairs[i][1]], np) for i in members]
            )
            bounds[members] = np.asarray(
                _improvement_bootstrap(
                    keys[np.asarray(members)], jnp.asarray(wins), reps=reps, confidence=float(confidence)
                )
            )
    return ImprovementEstimates(pairs, point, bounds[:, 0], bounds[:, 1], confidence, reps)


@functools.partial(jax.jit, static_argnames=("per_run", "reps", "confidence"))
def _profile_bootstrap(
    keys: jax.Array, scores: jax.Array, taus: jax.Array, *, per_run: bool, reps: int, confidence: float
) -> jax.Array:
    """Bounds ``(algorithms, 2, thresholds)`` for scores ``(algorithms, runs, tasks)``."""
    _, num_runs, num_tasks = scores.shape

    def one_algorithm(key: jax.Array, scores: jax.Array) -> jax.Array:
        above = (scores[..., None] > taus).astype(scores.dtype)  # (runs, tasks, thresholds)

        def replicate(rep_key: jax.Array) -> jax.Array:
            counts = _counts(rep_key, num_runs, num_tasks)
            if per_run:
                return jnp.einsum("nm,nmt->t", counts, above) / (num_runs * num_tasks)
            task_means = jnp.sum(counts * scores, axis=0) / num_runs
            return jnp.mean(task_means[:, None] > taus, axis=0)

        batch = _batch_size(reps, num_runs * num_tasks * max(num_runs, taus.shape[0]))
        return _interval(_replicates(replicate, jax.random.split(key, reps), batch), confidence)

    return jax.vmap(one_algorithm)(keys, scores)


def performance_profiles(
    scores: Mapping[str, Any],
    taus: Any,
    *,
    per_run: bool = True,
    reps: int = 2000,
    confidence: float = 0.95,
    key: jax.Array | int = 0,
) -> Estimates:
    """Performance profiles (fraction of scores above each threshold) with confidence bands.

    Args:
        scores: algorithm -> ``(runs, tasks)``.
        taus: ``(thresholds,)``.
        per_run: fraction of all run x task scores (``True``, rliable's default score
            distribution) or of per-task mean scores (``False``).

    Returns:
        :class:`Estimates` with ``point[algorithm]`` ``(thresholds,)`` and ``x[algorithm]`` the
        thresholds.
    """
    _check(reps, confidence)
    taus = np.asarray(taus, dtype=np.float64).reshape(-1)
    arrays = {a: np.asarray(v, dtype=np.float64) for a, v in scores.items()}
    point = {a: metrics.performance_profile(v, taus, per_run) for a, v in arrays.items()}
    keys = jax.random.split(_key(key), len(arrays))
    key_of = dict(zip(arrays, keys))
    lower, upper = {}, {}
    with _x64():
        for names in _by_shape(arrays).values():
            bounds = np.asarray(
                _profile_bootstrap(
                    jnp.stack([key_of[a] for a in names]),
                    jnp.asarray(np.stack([arrays[a] for a in names])),
                    jnp.asarray(taus),
                    per_run=per_run,
                    reps=reps,
                    confidence=float(confidence),
                )
            )
            for i, algorithm in enumerate(names):
                lower[algorithm], upper[algorithm] = bounds[i, 0], bounds[i, 1]
    labels = tuple(float(t) for t in taus)
    return Estimates(labels, point, lower, upper, confidence, reps, {a: taus for a in arrays})
