"""The bootstrap's JAX kernels (large inputs and custom statistics; see bootstrap.py).

A replicate is represented by how often each run was drawn, ``counts``
``(runs, tasks)``, so statistics become weighted sums over the original scores:
the interquartile mean walks the scores sorted once up front and keeps the
weight that falls inside the middle half, with no sort per replicate.
Replicates are vmapped (in batches, to bound memory) and vmapped again over
algorithms, pairs and evaluations; each shape compiles once. Everything runs in
float64 (``jax.enable_x64`` inside these functions only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Elements of one batch of replicates (batch x runs x runs x tasks), to bound memory.
_BATCH_ELEMENTS = 1 << 22
# Largest runs x tasks for which the IQM uses a (values, values) matrix (8 MiB at 1024).
_MAX_BELOW = 1024


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
