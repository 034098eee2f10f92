"""Hindsight experience replay as a batch sampler of the off-policy loop.

:func:`make_her_batch_sampler` is what ``her=True`` plugs into lamella-agents' off-policy loop
(:func:`lamella.agents.offpolicy.make_offpolicy_runner` and ``train_host``). lamella-gcrl
declares it as the entry point ``her`` of the group ``lamella.batch_samplers``, so installing
lamella-gcrl is all ``lamella train sac --env GMazeGoalDubins-v0 --her`` needs. It can also be
passed by hand: ``make_offpolicy_runner(config, batch_sampler=make_her_batch_sampler)``.

The relabelling itself (future / final / episode goals, a few gathers on device) is
:func:`lamella.buffers.make_her_sampler`; this module turns its samples into the learner's
:class:`~lamella.agents.offpolicy.Batch` and recomputes what the new goal changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from lamella.agents.config import is_swept
from lamella.agents.offpolicy import Batch, GoalFunctions
from lamella.buffers import EpisodeBuffer, EpisodeBufferState, HerSample, make_her_sampler

__all__ = ["make_her_batch_sampler"]


def make_her_batch_sampler(
    config: Any, buffer: EpisodeBuffer, goals: GoalFunctions | None
) -> Callable[[EpisodeBufferState, jax.Array], Batch]:
    """``sample(buffer_state, key) -> Batch`` with hindsight goals.

    Args:
        config: a train config with ``gamma``, ``batch_size``, ``her_strategy`` (``"future"``,
            ``"final"`` or ``"episode"``) and ``her_relabel_probability``.
        buffer: the loop's episode buffer (goal-dict observations).
        goals: the env's goal functions. A relabelled transition's reward is
            ``compute_reward(next achieved goal, new goal)``; its ``terminated`` is recomputed for
            the new goal (``is_success`` and ``terminate_on_success``) where the env has them,
            because the stored flag belongs to the original goal.

    Raises:
        ValueError: ``goals`` is None (HER needs a goal-conditioned env).
    """
    if goals is None:
        raise ValueError(
            "HER needs a goal-conditioned env (dict observations with observation/achieved_goal/"
            "desired_goal and a compute_reward); use a goal env such as GMazeGoalDubins-v0."
        )
    gamma = config.gamma if is_swept(config.gamma) else float(config.gamma)  # a sweep traces it
    her_sample = make_her_sampler(
        buffer, goals.compute_reward, config.her_strategy, config.her_relabel_probability, config.batch_size
    )
    is_success, terminates = goals.is_success, goals.terminate_on_success

    def sample(buffer_state: EpisodeBufferState, key: jax.Array) -> Batch:
        key_sample, key_update = jax.random.split(key)
        her: HerSample = her_sample(buffer_state, key_sample)
        t = her.transition
        terminated = t.terminated
        if is_success is not None:
            new_done = jnp.logical_and(
                is_success(t.next_obs["achieved_goal"], t.next_obs["desired_goal"]), terminates
            )
            terminated = jnp.where(her.relabelled, new_done, terminated)
        discount = gamma * (1.0 - terminated.astype(jnp.float32))
        return Batch(t.obs, t.action, t.reward, discount, t.next_obs, key_update)

    return sample
