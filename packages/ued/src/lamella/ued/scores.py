"""Level scores: how much a student can still learn on a level, from one rollout on it.

Every function here is pure JAX over a time-major rollout ``(T, ...)``; every trailing axis is
an independent stream (one env, one level), as in :func:`lamella.agents.losses.gae_advantages`,
so a ``(T, num_envs)`` batch needs no vmap. Time-indexed names follow rlax: ``r_t`` rewards,
``v_t`` values of the observations acted in, ``adv_t`` GAE advantages, ``done_t`` "the episode
ended at this step" (terminated or truncated).

Only **completed** episodes count: the steps after the last ``done`` of a stream belong to an
episode the rollout cut off, and are ignored. A stream with no completed episode has no score;
the score functions return ``incomplete_value`` there (``-inf`` by default, which
:mod:`lamella.ued.buffer` reads as "do not insert, keep the old score").

The scores (every level score of minimax's ``ued_scores``, same definitions):

========================  =================================================================
``positive_value_loss``   mean over episodes of the time-mean of ``max(adv_t, 0)`` (PLR's "PVL")
``l1_value_loss``         mean over episodes of the time-mean of ``|adv_t|``
``max_mc``                mean over episodes of the time-mean of ``R_max - v_t``, where
                          ``R_max`` is the best return ever seen on the level (can be negative:
                          use rank prioritisation)
``episode_return``        mean (and max) undiscounted return of the completed episodes
``neg_return``            minus ``episode_return`` (the minimax adversary's objective)
``value_disagreement``    mean over episodes of the time-mean of the std of ``K`` value heads
``relative_regret``       ``max(antagonist's max return - protagonist's mean return, 0)`` (PAIRED)
``mean_relative_regret``  ``max(antagonist's mean return - protagonist's mean return, 0)``
``population_regret``     best max return over a population minus its mean mean return
========================  =================================================================

Test vector (checked against minimax and JaxUED, ``/work/shared/reference/UED.md`` 5.1): one
stream of T=7 with ``done_t=[0,0,1,0,0,1,0]``, ``r_t=[0,0,.8,0,0,.5,0]``,
``v_t=[.1,.2,.3,.4,.5,.6,.7]`` and a stored best return of 0.9 has ``max_mc = 0.55``; with
``adv_t=[.2,-.1,.4,0,.3,-.2,.9]``, ``positive_value_loss = 0.15`` (the trailing cut-off episode
is ignored).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

__all__ = [
    "SCORES",
    "EpisodeStats",
    "episode_return",
    "episode_stats",
    "l1_value_loss",
    "level_score",
    "max_mc",
    "mean_relative_regret",
    "neg_return",
    "population_regret",
    "positive_value_loss",
    "relative_regret",
    "value_disagreement",
]

#: The student scores :func:`level_score` computes, by name (PLR's ``score`` setting).
SCORES = ("max_mc", "positive_value_loss", "l1_value_loss", "episode_return", "neg_return")


class EpisodeStats(NamedTuple):
    """Per-stream statistics of a per-step metric over the completed episodes of a rollout.

    Attributes:
        mean: float32 ``(...)``: the mean over completed episodes of each episode's value (the
            sum of the metric over its steps, or the time-mean with ``time_average``); 0 where
            none completed.
        max: float32 ``(...)``: the largest episode value; ``-inf`` where none completed.
        num_episodes: int32 ``(...)``: completed episodes.
    """

    mean: jax.Array
    max: jax.Array
    num_episodes: jax.Array


def episode_stats(metric_t: jax.Array, done_t: jax.Array, time_average: bool = False) -> EpisodeStats:
    """Mean and max of a per-step metric over the completed episodes of each stream.

    Args:
        metric_t: float ``(T, ...)``: the metric of each step.
        done_t: bool ``(T, ...)``: the episode ended at this step.
        time_average: an episode's value is the mean of its steps' metric (else the sum).

    Returns:
        :class:`EpisodeStats` with the trailing shape ``(...)``.
    """
    chex.assert_equal_shape([metric_t, done_t])
    if jnp.ndim(metric_t) < 1:
        raise ValueError(f"episode_stats: arrays need a leading time axis, got shape {jnp.shape(metric_t)}.")
    metric_t = jnp.asarray(metric_t, jnp.float32)
    shape = metric_t.shape[1:]

    Carry = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]

    def step(carry: Carry, inputs: tuple[jax.Array, jax.Array]) -> tuple[Carry, None]:
        partial_sum, partial_len, total, best, count = carry
        metric, done = inputs
        partial_sum = partial_sum + metric
        partial_len = partial_len + 1.0
        value = partial_sum / partial_len if time_average else partial_sum
        total = total + jnp.where(done, value, 0.0)
        best = jnp.where(done, jnp.maximum(best, value), best)
        count = count + done.astype(jnp.int32)
        partial_sum = jnp.where(done, 0.0, partial_sum)
        partial_len = jnp.where(done, 0.0, partial_len)
        return (partial_sum, partial_len, total, best, count), None

    zeros = jnp.zeros(shape, jnp.float32)
    init: Carry = (zeros, zeros, zeros, jnp.full(shape, -jnp.inf), jnp.zeros(shape, jnp.int32))
    (_, _, total, best, count), _ = jax.lax.scan(step, init, (metric_t, jnp.asarray(done_t, bool)))
    return EpisodeStats(total / jnp.maximum(count, 1), best, count)


def _or_incomplete(stats: EpisodeStats, incomplete_value: float) -> jax.Array:
    return jnp.where(stats.num_episodes > 0, stats.mean, jnp.float32(incomplete_value))


def positive_value_loss(adv_t: jax.Array, done_t: jax.Array, incomplete_value: float = -jnp.inf) -> jax.Array:
    """PLR's positive value loss: mean over completed episodes of the time-mean of ``max(adv_t, 0)``.

    Args:
        adv_t: float ``(T, ...)`` GAE advantages (:func:`lamella.agents.losses.gae_advantages`).
        done_t: bool ``(T, ...)``.
        incomplete_value: the score of a stream with no completed episode.

    Returns:
        float32 ``(...)``.
    """
    return _or_incomplete(episode_stats(jnp.maximum(adv_t, 0.0), done_t, time_average=True), incomplete_value)


def l1_value_loss(adv_t: jax.Array, done_t: jax.Array, incomplete_value: float = -jnp.inf) -> jax.Array:
    """Mean over completed episodes of the time-mean of ``|adv_t|`` (see :func:`positive_value_loss`)."""
    return _or_incomplete(episode_stats(jnp.abs(adv_t), done_t, time_average=True), incomplete_value)


def max_mc(
    r_t: jax.Array,
    v_t: jax.Array,
    done_t: jax.Array,
    best_return: jax.Array | float = -jnp.inf,
    incomplete_value: float = -jnp.inf,
) -> tuple[jax.Array, jax.Array]:
    """Maximum Monte-Carlo regret: mean over completed episodes of the time-mean of ``R_max - v_t``.

    ``R_max`` is the larger of ``best_return`` (the best return seen on the level before) and
    the best return of this rollout's completed episodes. The score can be negative.

    Args:
        r_t: float ``(T, ...)`` rewards.
        v_t: float ``(T, ...)`` values of the observations acted in.
        done_t: bool ``(T, ...)``.
        best_return: float ``(...)`` (or a scalar): the best return stored for each level
            (``-inf`` for a level never played).
        incomplete_value: the score of a stream with no completed episode.

    Returns:
        ``(score, best_return)``: float32 ``(...)`` each; ``best_return`` is the running best
        (what a level buffer should store: minimax stores this rollout's best instead).
    """
    returns = episode_stats(r_t, done_t)
    best = jnp.maximum(jnp.asarray(best_return, jnp.float32), returns.max)
    stats = episode_stats(best[None] - jnp.asarray(v_t, jnp.float32), done_t, time_average=True)
    return _or_incomplete(stats, incomplete_value), best


def episode_return(r_t: jax.Array, done_t: jax.Array, incomplete_value: float = -jnp.inf) -> jax.Array:
    """Mean undiscounted return of the completed episodes of each stream."""
    return _or_incomplete(episode_stats(r_t, done_t), incomplete_value)


def neg_return(r_t: jax.Array, done_t: jax.Array, incomplete_value: float = -jnp.inf) -> jax.Array:
    """Minus the mean return of the completed episodes (the minimax adversary's score)."""
    stats = episode_stats(r_t, done_t)
    return jnp.where(stats.num_episodes > 0, -stats.mean, jnp.float32(incomplete_value))


def value_disagreement(v_tk: jax.Array, done_t: jax.Array, incomplete_value: float = -jnp.inf) -> jax.Array:
    """Mean over completed episodes of the time-mean of the standard deviation of ``K`` values.

    Args:
        v_tk: float ``(T, K, ...)``: ``K`` value estimates of each step (an ensemble of critics,
            or minimax's ``n_eval`` copies of a level).
        done_t: bool ``(T, ...)``.
        incomplete_value: the score of a stream with no completed episode.
    """
    if jnp.ndim(v_tk) != jnp.ndim(done_t) + 1:
        raise ValueError(
            f"value_disagreement: values need a K axis after time, got values {jnp.shape(v_tk)} "
            f"and done {jnp.shape(done_t)}."
        )
    return _or_incomplete(episode_stats(jnp.std(v_tk, axis=1), done_t, time_average=True), incomplete_value)


def relative_regret(antagonist_max_return: jax.Array, protagonist_mean_return: jax.Array) -> jax.Array:
    """PAIRED's regret: ``max(antagonist's best return - protagonist's mean return, 0)``."""
    return jnp.maximum(jnp.asarray(antagonist_max_return) - protagonist_mean_return, 0.0)


def mean_relative_regret(antagonist_mean_return: jax.Array, protagonist_mean_return: jax.Array) -> jax.Array:
    """``max(antagonist's mean return - protagonist's mean return, 0)``."""
    return jnp.maximum(jnp.asarray(antagonist_mean_return) - protagonist_mean_return, 0.0)


def population_regret(mean_return: jax.Array, max_return: jax.Array) -> jax.Array:
    """Population PAIRED's regret: the best max return of any student minus the students' mean
    mean return. ``mean_return``, ``max_return``: ``(num_students, ...)``; not clipped."""
    chex.assert_equal_shape([mean_return, max_return])
    return jnp.max(max_return, axis=0) - jnp.mean(mean_return, axis=0)


def level_score(
    name: str,
    r_t: jax.Array,
    v_t: jax.Array,
    adv_t: jax.Array,
    done_t: jax.Array,
    best_return: jax.Array | float = -jnp.inf,
) -> tuple[jax.Array, jax.Array]:
    """One of the student scores of :data:`SCORES` by name, and the running best return.

    Args:
        name: a name in :data:`SCORES`.
        r_t, v_t, adv_t: float ``(T, ...)`` rewards, values, advantages.
        done_t: bool ``(T, ...)``.
        best_return: float ``(...)``: the best return stored per level (``-inf``: none).

    Returns:
        ``(score, best_return)``, float32 ``(...)`` each; ``score`` is ``-inf`` where no episode
        completed.

    Raises:
        ValueError: an unknown name (listing the known ones).
    """
    if name not in SCORES:
        raise ValueError(f"Unknown level score {name!r}; choose one of {', '.join(SCORES)}.")
    stats = episode_stats(r_t, done_t)
    best = jnp.maximum(jnp.asarray(best_return, jnp.float32), stats.max)
    if name == "max_mc":
        score, best = max_mc(r_t, v_t, done_t, best_return)
    elif name == "positive_value_loss":
        score = positive_value_loss(adv_t, done_t)
    elif name == "l1_value_loss":
        score = l1_value_loss(adv_t, done_t)
    elif name == "episode_return":
        score = episode_return(r_t, done_t)
    else:
        score = neg_return(r_t, done_t)
    return score, best
