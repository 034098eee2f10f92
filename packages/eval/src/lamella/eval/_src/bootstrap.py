"""Stratified bootstrap confidence intervals.

Resampling follows rliable 1.2's ``StratifiedBootstrap``: within each task, the
runs are drawn with replacement (``runs`` draws from ``runs``), independently per
task; tasks are never resampled. Probability of improvement resamples X and Y
independently (rliable's ``StratifiedIndependentBootstrap``; the NumPy backend draws each
algorithm's resample once per replicate for all the pairs it is in, so pairs' replicates are
correlated but every pair's interval is the same). Intervals are
percentile intervals (rliable's default ``method="percentile"``): the
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the bootstrap
replicates, linearly interpolated like ``np.percentile``.

Two backends compute the same estimator (a replicate is how often each run was drawn, every
statistic a weighted sum over the original scores): JAX kernels compiled once per shape
(bootstrap_jax.py), and NumPy kernels (bootstrap_np.py) that need no compilation.
``backend="auto"`` takes NumPy where the work is small enough that compiling would cost more
than it saves (a fresh ``lamella eval aggregate`` process then never imports JAX) and for
no custom statistic; JAX otherwise. Each backend is deterministic for a given ``key``; the
two draw different replicates, so their bounds differ by Monte-Carlo error only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from lamella.eval._src import bootstrap_np, metrics
from lamella.eval._src.errors import EvalError
from lamella.eval._src.estimates import STATISTICS, Estimates, ImprovementEstimates

__all__ = [
    "STATISTICS",
    "Estimates",
    "ImprovementEstimates",
    "interval_estimates",
    "performance_profiles",
    "probability_of_improvement_estimates",
    "sample_efficiency",
]

_POINT: dict[str, Callable[..., Any]] = {
    "iqm": metrics.iqm,
    "mean": metrics.mean,
    "median": metrics.median,
    "optimality_gap": metrics.optimality_gap,
}
# backend="auto" takes NumPy up to this many score-replicate products (replicates x runs x
# tasks x evaluations summed over algorithms; x runs for probability of improvement): about
# a second of NumPy on one CPU core, less than compiling the JAX kernels takes.
NUMPY_MAX_WORK = 50_000_000

Backend = Literal["auto", "numpy", "jax"]


def _check(reps: int, confidence: float) -> None:
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 2:
        raise EvalError(f"reps (bootstrap replicates) must be an int >= 2, got {reps!r}; 2000 is usual")
    if not 0.0 < confidence < 1.0:
        raise EvalError(f"confidence must be strictly between 0 and 1, got {confidence!r}")


def _use_numpy(backend: str, work: int, customs: tuple[Any, ...] = ()) -> bool:
    if backend not in ("auto", "numpy", "jax"):
        raise EvalError(f"backend must be 'auto', 'numpy' or 'jax', got {backend!r}")
    if backend == "numpy" and customs:
        raise EvalError("custom statistics are JAX functions; use backend='jax' or 'auto' with them")
    return backend == "numpy" or (backend == "auto" and not customs and work <= NUMPY_MAX_WORK)


def _rngs(key: Any, count: int) -> list[np.random.Generator]:
    """``count`` independent NumPy generators from an int seed or a JAX key."""
    if isinstance(key, int | np.integer):
        entropy: Any = int(key)
    else:  # a JAX key: its raw words seed the generators
        import jax

        data = jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
        entropy = [int(w) for w in np.asarray(data).reshape(-1)]
    return [np.random.default_rng(s) for s in np.random.SeedSequence(entropy).spawn(count)]


def _jax_keys(key: Any, count: int) -> Any:
    import jax

    from lamella.eval._src import bootstrap_jax

    return jax.random.split(bootstrap_jax._key(key), count)


Statistics = Sequence[str] | Mapping[str, "str | Callable[..., Any]"]


def _resolve(
    statistics: Statistics,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Callable[..., Any], ...]]:
    """(labels, built-in statistic names, custom functions); labels list built-ins first."""
    names: list[str] = []
    builtin: list[str] = []
    custom: dict[str, Callable[..., Any]] = {}
    if isinstance(statistics, str):  # one name: not its letters
        statistics = (statistics,)
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


def _arrays(scores: Any, where: str) -> dict[str, np.ndarray]:
    """algorithm -> float64 array of ``scores``: a mapping, or a :class:`Scores` / :class:`Curves`
    (its ``values``); every score must be finite (a NaN would drop out of some statistics and
    turn others into NaN, silently)."""
    if not isinstance(scores, Mapping) and isinstance(getattr(scores, "values", None), Mapping):
        scores = scores.values
    if not isinstance(scores, Mapping):
        raise EvalError(
            f"{where}: give the scores as a mapping algorithm -> array (a Scores or Curves, or its "
            f".values), got {type(scores).__name__}."
        )
    arrays = {}
    for algorithm, value in scores.items():
        array = np.asarray(value, dtype=np.float64)
        bad = np.argwhere(~np.isfinite(array))
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            raise EvalError(
                f"{where}: the scores of {algorithm!r} hold {array[index]} at index {index} (run, task"
                f"{', evaluation' if array.ndim == 3 else ''}); every score must be finite: fix that "
                "run's log or leave the run out."
            )
        arrays[algorithm] = array
    return arrays


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
    key: Any,
    gamma: float,
    backend: str,
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
    work = sum(reps * a.size for a in arrays.values())
    if _use_numpy(backend, work, customs):
        for rng, (algorithm, array) in zip(_rngs(key, len(arrays)), arrays.items()):
            bounds = bootstrap_np.aggregate_bounds(rng, array, builtin, float(gamma), reps, float(confidence))
            lower[algorithm], upper[algorithm] = bounds[0], bounds[1]
        return labels, point, lower, upper

    import jax.numpy as jnp

    from lamella.eval._src import bootstrap_jax

    key_of = dict(zip(arrays, _jax_keys(key, len(arrays))))
    with bootstrap_jax._x64():
        for names in _by_shape(arrays).values():
            bounds = np.asarray(
                bootstrap_jax._aggregate_bootstrap(
                    jnp.stack([key_of[a] for a in names]),
                    jnp.asarray(np.stack([arrays[a] for a in names])),
                    float(gamma),
                    names=builtin,
                    customs=customs,
                    reps=reps,
                    confidence=float(confidence),
                )
            )
            for i, algorithm in enumerate(names):
                lower[algorithm], upper[algorithm] = bounds[i, 0], bounds[i, 1]
    return labels, point, lower, upper


def interval_estimates(
    scores: Mapping[str, Any],
    statistics: Statistics = STATISTICS,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: Any = 0,
    gamma: float = 1.0,
    backend: Backend = "auto",
) -> Estimates:
    """Aggregate statistics with stratified-bootstrap percentile confidence intervals.

    Args:
        scores: algorithm -> ``(runs, tasks)`` scores (``Scores.values``, or a :class:`Scores`
            itself); algorithms may have different numbers of runs; every score finite.
        statistics: names from :data:`STATISTICS`, or a mapping ``name -> fn`` where ``fn`` is
            a built-in name or a JAX-traceable function of a ``(runs, tasks)`` matrix.
        reps: bootstrap replicates.
        confidence: coverage of the interval.
        key: a JAX PRNG key or an int seed.
        gamma: the optimality-gap threshold.
        backend: ``"auto"`` (NumPy for small inputs without custom statistics, else JAX),
            ``"numpy"`` or ``"jax"``.

    Returns:
        :class:`Estimates` with ``point[algorithm]`` of shape ``(statistics,)``.
    """
    three_d = {a: v[..., None] for a, v in _arrays(scores, "interval_estimates").items()}
    for algorithm, array in three_d.items():
        if array.ndim != 3:
            raise EvalError(f"scores of {algorithm!r} have shape {array.shape[:-1]}; expected (runs, tasks)")
    labels, point, lower, upper = _aggregates(three_d, statistics, reps, confidence, key, gamma, backend)
    squeeze = lambda d: {a: v[:, 0] for a, v in d.items()}  # noqa: E731
    return Estimates(labels, squeeze(point), squeeze(lower), squeeze(upper), confidence, reps)


def sample_efficiency(
    curves: Mapping[str, Any],
    step_counts: Mapping[str, Any] | None = None,
    statistics: Statistics = ("iqm",),
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: Any = 0,
    gamma: float = 1.0,
    backend: Backend = "auto",
) -> Estimates:
    """Aggregates at every evaluation of learning curves, with confidence intervals.

    One replicate draws runs once and uses the same draw at every evaluation (a run is
    the unit that is repeated); each evaluation's interval has the same marginal
    distribution as rliable's per-evaluation bootstrap.

    Args:
        curves: algorithm -> ``(runs, tasks, evaluations)`` (``Curves.values``, or a
            :class:`Curves` itself).
        step_counts: algorithm -> ``(evaluations,)`` x axis (e.g. ``Curves.step_counts``, the
            default for a :class:`Curves`); evaluation indices where omitted.
        backend: as for :func:`interval_estimates`.

    Returns:
        :class:`Estimates` with ``point[algorithm]`` of shape ``(statistics, evaluations)`` and
        ``x[algorithm]`` the step counts.
    """
    counts = getattr(curves, "step_counts", None)  # a Curves has them
    if step_counts is None and isinstance(counts, Mapping):
        step_counts = counts
    if step_counts is not None and not isinstance(step_counts, Mapping):
        raise EvalError(
            "sample_efficiency: step_counts must be a mapping algorithm -> (evaluations,) step counts, "
            f"got {type(step_counts).__name__} {step_counts!r:.80}; give statistics by keyword: "
            "sample_efficiency(curves, statistics=('iqm', 'mean'))"
        )
    arrays = _arrays(curves, "sample_efficiency")
    labels, point, lower, upper = _aggregates(arrays, statistics, reps, confidence, key, gamma, backend)
    x = {
        a: np.asarray(step_counts[a], dtype=np.float64)
        if step_counts is not None
        else np.arange(point[a].shape[1], dtype=np.float64)
        for a in point
    }
    return Estimates(labels, point, lower, upper, confidence, reps, x)


def _pairs(pairs: Any) -> tuple[tuple[str, str], ...]:
    """``pairs`` as a tuple of ``(x, y)`` name pairs, where one pair ``("a", "b")`` is a list of one:
    read as a list of pairs, its names would be split into letters."""
    where = "probability_of_improvement_estimates: pairs"
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise EvalError(
            f"{where} must be a list of (x, y) pairs of algorithm names, got {type(pairs).__name__} "
            f"{pairs!r:.80}; e.g. pairs=[('ppo', 'dqn')]"
        )
    if isinstance(pairs, Sequence) and len(pairs) == 2 and all(isinstance(name, str) for name in pairs):
        pairs = [pairs]
    checked = []
    for pair in pairs:
        names = tuple(pair) if isinstance(pair, Iterable) and not isinstance(pair, (str, bytes)) else ()
        if len(names) != 2 or not all(isinstance(name, str) for name in names):
            raise EvalError(
                f"{where}: {pair!r:.80} is not an (x, y) pair of two algorithm names; give "
                "pairs=[('ppo', 'dqn'), ...], or one pair as ('ppo', 'dqn')"
            )
        checked.append((names[0], names[1]))
    if not checked:
        raise EvalError(f"{where} is empty; give at least one (x, y) pair, or leave pairs out for every pair")
    return tuple(checked)


def probability_of_improvement_estimates(
    scores: Mapping[str, Any],
    pairs: Iterable[tuple[str, str]] | tuple[str, str] | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    key: Any = 0,
    backend: Backend = "auto",
) -> ImprovementEstimates:
    """Probability of improvement P(X > Y) with stratified-bootstrap confidence intervals.

    Args:
        scores: algorithm -> ``(runs, tasks)``.
        pairs: ``(x, y)`` pairs of algorithm names, or one pair ``(x, y)``; every unordered
            pair in ``scores`` order where omitted.
        reps: bootstrap replicates (X and Y resampled independently).
        confidence: coverage of the interval.
        key: a JAX PRNG key or an int seed.
        backend: as for :func:`interval_estimates`.
    """
    _check(reps, confidence)
    arrays = _arrays(scores, "probability_of_improvement_estimates")
    pairs = tuple(itertools.combinations(arrays, 2)) if pairs is None else _pairs(pairs)
    for pair in pairs:
        for name in pair:
            if name not in arrays:
                raise EvalError(f"pair {pair}: no scores for algorithm {name!r} (have {list(arrays)})")
    point = np.array([metrics.probability_of_improvement(arrays[x], arrays[y]) for x, y in pairs])
    bounds = np.empty((len(pairs), 2))
    wins = [metrics._improvement_matrix(arrays[x], arrays[y], np) for x, y in pairs]
    work = sum(reps * w.size for w in wins)
    if _use_numpy(backend, work):
        if pairs and all(x != y for x, y in pairs):
            # Each algorithm resampled once per replicate for all its pairs (X and Y still
            # independent within a pair): a quarter of the draws for 5 algorithms.
            names = list(dict.fromkeys(name for pair in pairs for name in pair))
            rngs = dict(zip(names, _rngs(key, len(names))))
            shapes = {name: arrays[name].shape for name in names}
            bounds[:] = bootstrap_np.improvement_bounds_shared(
                rngs, shapes, pairs, wins, reps, float(confidence)
            )
        else:
            for i, rng in enumerate(_rngs(key, max(len(pairs), 1))[: len(pairs)]):
                bounds[i] = bootstrap_np.improvement_bounds(rng, wins[i], reps, float(confidence))
        return ImprovementEstimates(pairs, point, bounds[:, 0], bounds[:, 1], confidence, reps)

    import jax.numpy as jnp

    from lamella.eval._src import bootstrap_jax

    keys = _jax_keys(key, max(len(pairs), 1))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        groups.setdefault((arrays[x].shape[0], arrays[y].shape[0]), []).append(i)
    with bootstrap_jax._x64():
        for members in groups.values():
            bounds[members] = np.asarray(
                bootstrap_jax._improvement_bootstrap(
                    keys[np.asarray(members)],
                    jnp.asarray(np.stack([wins[i] for i in members])),
                    reps=reps,
                    confidence=float(confidence),
                )
            )
    return ImprovementEstimates(pairs, point, bounds[:, 0], bounds[:, 1], confidence, reps)


def _thresholds(taus: Any) -> np.ndarray:
    """``taus`` as a float64 ``(thresholds,)`` array: one or more finite numbers in a 1-D array or
    list. A bare number is refused: ``taus=51`` reads as "51 thresholds" as well as "the threshold
    51", and taking it as the latter would draw a profile of one point without a word."""
    where = "performance_profiles: taus"
    try:
        values = np.asarray(taus)
    except (TypeError, ValueError):  # ragged nesting
        values = np.asarray(None)
    if values.ndim == 0 and values.dtype.kind in "iuf":
        n = values.item()
        raise EvalError(
            f"{where} is the number {n!r}; give an array of thresholds: np.linspace(low, high, {n!r}) "
            f"for {n!r} evenly spaced ones (e.g. np.linspace(0, 1, {n!r}) for normalised scores), "
            f"or [{n!r}] for that one threshold"
        )
    if values.ndim != 1 or values.size == 0 or values.dtype.kind not in "iuf":
        raise EvalError(
            f"{where} must be a 1-D array of one or more numbers (the thresholds), got {type(taus).__name__} "
            f"{taus!r:.80}; e.g. np.linspace(0, 1, 51)"
        )
    values = values.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise EvalError(
            f"{where}[{bad[0]}] is {values[bad[0]]}; every threshold must be finite: give e.g. "
            "np.linspace(low, high, 51) with finite bounds"
        )
    return values


def performance_profiles(
    scores: Mapping[str, Any],
    taus: Any,
    *,
    per_run: bool = True,
    reps: int = 2000,
    confidence: float = 0.95,
    key: Any = 0,
    backend: Backend = "auto",
) -> Estimates:
    """Performance profiles (fraction of scores above each threshold) with confidence bands.

    Args:
        scores: algorithm -> ``(runs, tasks)``.
        taus: ``(thresholds,)``, e.g. ``np.linspace(0, 1, 51)``; a bare number is refused (say
            ``np.linspace(low, high, 51)`` for 51 thresholds, ``[51.0]`` for the one threshold).
        per_run: fraction of all run x task scores (``True``, rliable's default score
            distribution) or of per-task mean scores (``False``).
        backend: as for :func:`interval_estimates`.

    Returns:
        :class:`Estimates` with ``point[algorithm]`` ``(thresholds,)`` and ``x[algorithm]`` the
        thresholds.
    """
    _check(reps, confidence)
    taus = _thresholds(taus)
    arrays = _arrays(scores, "performance_profiles")
    point = {a: metrics.performance_profile(v, taus, per_run) for a, v in arrays.items()}
    lower, upper = {}, {}
    # Per run, the thresholds enter through one matrix product per batch (cheap per element).
    work = sum(reps * (a.size + a.shape[1] * taus.size) for a in arrays.values())
    if _use_numpy(backend, work):
        for rng, (algorithm, array) in zip(_rngs(key, len(arrays)), arrays.items()):
            bounds = bootstrap_np.profile_bounds(rng, array, taus, per_run, reps, float(confidence))
            lower[algorithm], upper[algorithm] = bounds[0], bounds[1]
    else:
        import jax.numpy as jnp

        from lamella.eval._src import bootstrap_jax

        key_of = dict(zip(arrays, _jax_keys(key, len(arrays))))
        with bootstrap_jax._x64():
            for names in _by_shape(arrays).values():
                bounds = np.asarray(
                    bootstrap_jax._profile_bootstrap(
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
