"""Hindsight experience replay as a pure sample-time transform, on device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from lamella.buffers._src import struct
from lamella.buffers._src.episodes import (
    EpisodeBuffer,
    EpisodeBufferState,
    _batch_size,
    _episode_bounds,
    _gather,
    _sample_steps,
)
from lamella.buffers._src.types import Transition

PRNGKey = jax.Array
STRATEGIES = ("future", "final", "episode")


@struct.dataclass
class HerSample:
    """A batch of transitions with hindsight goals.

    Attributes:
        transition: :class:`Transition` with leading axis ``batch``; where
            ``relabelled``, ``obs["desired_goal"]`` and ``next_obs["desired_goal"]``
            hold the new goal and ``reward`` is ``compute_reward(next achieved goal,
            new goal)``; elsewhere everything is as stored.
        relabelled: bool ``(batch,)``.
        env_index: int32 ``(batch,)``: env of each transition.
        time: int32 ``(batch,)``: absolute time of each transition.
        goal_time: int32 ``(batch,)``: absolute time of the step whose
            ``next_obs["achieved_goal"]`` became the goal (where relabelled).
    """

    transition: Transition
    relabelled: jax.Array
    env_index: jax.Array
    time: jax.Array
    goal_time: jax.Array


def _check_goal_obs(obs: Any, name: str) -> None:
    if not isinstance(obs, Mapping) or "achieved_goal" not in obs or "desired_goal" not in obs:
        raise TypeError(
            f"make_her_sampler: transition.{name} must be a dict with 'achieved_goal' and "
            f"'desired_goal' (a goal-conditioned env's observation), got {type(obs).__name__}"
            + (f" with keys {sorted(obs)}" if isinstance(obs, Mapping) else "")
            + "."
        )


def _check_goal_shapes(experience: Transition) -> None:
    """The new desired goal is an achieved goal: same per-step shape (else broadcast or a JAX error)."""
    achieved = experience.next_obs["achieved_goal"].shape[2:]
    for name, obs in (("obs", experience.obs), ("next_obs", experience.next_obs)):
        desired = obs["desired_goal"].shape[2:]
        if desired != achieved:
            raise ValueError(
                f"make_her_sampler: next_obs achieved_goal has shape {achieved} per step but desired_goal "
                f"{desired} in transition.{name}; HER replaces the desired goal with an achieved goal, so "
                "store both goals with the same shape."
            )


def make_her_sampler(
    buffer: EpisodeBuffer,
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    strategy: str = "future",
    relabel_probability: float = 0.8,
    batch_size: int | None = None,
) -> Callable[[EpisodeBufferState, PRNGKey], HerSample]:
    """Sample transitions uniformly and relabel goals in hindsight, all in JAX.

    For each sampled step ``t`` of an episode whose stored steps run from
    ``start`` to ``end`` (``end`` is the newest step while the episode runs), with
    probability ``relabel_probability`` the desired goal becomes the achieved goal
    ``next_obs["achieved_goal"]`` of step ``j``:

    * ``"future"``: ``j`` uniform in ``[t, end]`` (includes ``t`` itself, as in
      the original HER: the goal reached by this very step);
    * ``"final"``: ``j = end``;
    * ``"episode"``: ``j`` uniform in ``[start, end]``.

    Goals never come from another episode or env. The reward of a relabelled
    transition is ``compute_reward(next_obs["achieved_goal"], new goal)``;
    ``terminated`` and ``truncated`` are kept as stored. The default probability
    0.8 is HER's ``replay_k = 4`` (``1 - 1 / (1 + k)``), xpag's default too.

    Args:
        buffer: from :func:`lamella.buffers.make_episode_buffer`, storing
            :class:`Transition` whose ``obs`` and ``next_obs`` are dicts with
            ``achieved_goal`` and ``desired_goal``.
        compute_reward: the env's pure ``compute_reward(achieved_goal,
            desired_goal)`` for one pair of goals (it is vmapped); bind extra
            arguments with ``functools.partial``.
        strategy: ``"future"``, ``"final"`` or ``"episode"``.
        relabel_probability: chance that a sampled transition gets a hindsight goal.
        batch_size: transitions per call (default the buffer's ``sample_batch_size``).

    Returns:
        ``sample(state, key) -> HerSample``, pure and jittable.
    """
    owner = "make_her_sampler"
    batch_size = _batch_size(batch_size, buffer, owner)
    if strategy not in STRATEGIES:
        raise ValueError(f"{owner}: strategy must be one of {STRATEGIES}, got {strategy!r}.")
    try:
        probability: float | None = float(relabel_probability)
    except jax.errors.ConcretizationTypeError:  # traced: a sweep's probability, checked by its caller
        probability = None
    if probability is not None and not 0.0 <= probability <= 1.0:
        raise ValueError(f"{owner}: relabel_probability must be in [0, 1], got {relabel_probability}.")
    if not callable(compute_reward):
        raise TypeError(
            f"{owner}: compute_reward must be a function (achieved_goal, desired_goal) -> reward."
        )
    T, num_envs = buffer.max_length_time_axis, buffer.num_envs
    batched_reward = jax.vmap(compute_reward)

    def sample(state: EpisodeBufferState, key: PRNGKey) -> HerSample:
        experience = state.trajectory.experience
        _check_goal_obs(experience.obs, "obs")
        _check_goal_obs(experience.next_obs, "next_obs")
        _check_goal_shapes(experience)
        key_steps, key_relabel, key_goal = jax.random.split(key, 3)
        env, time = _sample_steps(state, key_steps, batch_size, num_envs, T)
        start, end = _episode_bounds(state, env, time, T)
        if strategy == "final":
            goal_time = end
        else:
            low = time if strategy == "future" else start
            # floor(u * count) is uniform on [0, count); the minimum guards u close to 1 in float32.
            u = jax.random.uniform(key_goal, (batch_size,))
            offset = jnp.floor(u * (end - low + 1).astype(jnp.float32)).astype(jnp.int32)
            goal_time = jnp.minimum(low + offset, end)
        relabelled = jax.random.uniform(key_relabel, (batch_size,)) < relabel_probability
        transition = _gather(experience, env, time, T)
        goal = _gather(experience.next_obs["achieved_goal"], env, goal_time, T)
        select = lambda new, old: jnp.where(  # noqa: E731
            relabelled.reshape(relabelled.shape + (1,) * (old.ndim - 1)), new, old
        )
        desired = select(goal, transition.obs["desired_goal"])
        new_reward = jnp.asarray(batched_reward(transition.next_obs["achieved_goal"], desired))
        if new_reward.shape != transition.reward.shape:
            raise ValueError(
                f"{owner}: compute_reward(achieved_goal, desired_goal) returned shape {new_reward.shape[1:]} "
                f"for one pair of goals, expected {transition.reward.shape[1:]} (the stored reward's); it "
                "is vmapped over the batch, so return one reward per pair (e.g. no keepdims=True)."
            )
        transition = transition.replace(
            obs={**transition.obs, "desired_goal": desired},
            next_obs={
                **transition.next_obs,
                "desired_goal": select(goal, transition.next_obs["desired_goal"]),
            },
            reward=select(new_reward.astype(transition.reward.dtype), transition.reward),
        )
        return HerSample(
            transition=transition,
            relabelled=relabelled,
            env_index=env.astype(jnp.int32),
            time=time.astype(jnp.int32),
            goal_time=goal_time.astype(jnp.int32),
        )

    return sample
