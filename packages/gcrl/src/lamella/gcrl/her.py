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

from lamella.agents.config import ConfigError, is_swept
from lamella.agents.offpolicy import Batch, GoalFunctions
from lamella.buffers import EpisodeBuffer, EpisodeBufferState, HerSample, make_her_sampler
from lamella.gcrl.setters import _check_goal_functions

__all__ = ["make_her_batch_sampler"]


def make_her_batch_sampler(
    config: Any, buffer: EpisodeBuffer, goals: GoalFunctions | None
) -> Callable[[EpisodeBufferState, jax.Array], Batch]:
    """``sample(buffer_state, key) -> Batch`` with hindsight goals.

    Args:
        config: a train config with ``gamma``, ``batch_size``, ``her_strategy`` (``"future"``,
            ``"final"`` or ``"episode"``) and ``her_relabel_probability``.
        buffer: the loop's episode buffer (goal-dict observations).
        goals: the env's goal functions, each for one pair of goals (they are vmapped). A
            relabelled transition's reward is ``compute_reward(next achieved goal, new goal)``.
            With ``terminate_on_success``, its ``terminated`` is recomputed for the new goal
            (``is_success``), because the stored flag belongs to the original goal; a
            termination of the env's own (the stored flag where the original goal was not
            reached) is kept, and without ``terminate_on_success`` the stored flag is kept.

    Raises:
        ConfigError: ``goals`` is None (HER needs a goal-conditioned env),
            ``terminate_on_success`` without ``is_success``, or a buffer that keeps fewer steps
            per env than the env's episodes last (``goals.episode_length``, which the off-policy
            loop fills in from the env params and ``train_host`` from the gymnasium env's time
            limit; None: not checked): goals would come only from the buffer's last steps of an
            episode; when ``sample`` is traced,
            ``compute_reward`` / ``is_success`` that do not return a scalar number (not bool) /
            a scalar bool for one pair of goals.
    """
    if goals is None:
        raise ConfigError(
            "HER needs a goal-conditioned env (dict observations with observation/achieved_goal/"
            "desired_goal and a compute_reward); use a goal env such as GMazeGoalDubins-v0."
        )
    is_success, terminates = goals.is_success, bool(goals.terminate_on_success)
    if terminates and is_success is None:
        raise ConfigError(
            "HER: the env ends episodes on success (terminate_on_success) but has no is_success, so a "
            "relabelled transition's termination cannot be recomputed for its new goal. Give the env an "
            "is_success(achieved_goal, desired_goal, params) method (GoalFunctions.is_success), or do not "
            "terminate on success."
        )
    _check_buffer_holds_an_episode(config, buffer, goals)
    gamma = config.gamma if is_swept(config.gamma) else float(config.gamma)  # a sweep traces it
    her_sample = make_her_sampler(
        buffer, goals.compute_reward, config.her_strategy, config.her_relabel_probability, config.batch_size
    )
    steps_kept = buffer.max_length_time_axis

    def sample(buffer_state: EpisodeBufferState, key: jax.Array) -> Batch:
        stored = buffer_state.trajectory.experience
        goal_shape = tuple(stored.next_obs["achieved_goal"].shape[2:])  # leaves (num_envs, T, ...)
        # Before sampling: the sampler calls compute_reward, and fails inside JAX on a wrong one.
        _check_goal_functions("make_her_batch_sampler", goals.compute_reward, is_success, goal_shape)
        key_sample, key_update = jax.random.split(key)
        her: HerSample = her_sample(buffer_state, key_sample)
        t = her.transition
        terminated = t.terminated
        if terminates and is_success is not None:
            success = jax.vmap(is_success)
            achieved = t.next_obs["achieved_goal"]
            # The goal the step was stored with (step a of an env lives at a % T).
            original_goal = stored.next_obs["desired_goal"][her.env_index, her.time % steps_kept]
            env_own = jnp.logical_and(terminated, jnp.logical_not(success(achieved, original_goal)))
            new_done = jnp.logical_or(env_own, success(achieved, t.next_obs["desired_goal"]))
            terminated = jnp.where(her.relabelled, new_done, terminated)
        discount = gamma * (1.0 - terminated.astype(jnp.float32))
        return Batch(t.obs, t.action, t.reward, discount, t.next_obs, key_update)

    return sample


def _check_buffer_holds_an_episode(config: Any, buffer: EpisodeBuffer, goals: GoalFunctions) -> None:
    """A buffer shorter than an episode never holds one whole: refuse it (before, HER drew goals
    from the buffer's last steps of each episode only, and "final" goals from the newest step of
    an episode still running)."""
    length = goals.episode_length
    steps_kept, num_envs = buffer.max_length_time_axis, buffer.num_envs
    if length is None or steps_kept >= length:
        return
    buffer_size = getattr(config, "buffer_size", num_envs * steps_kept)
    raise ConfigError(
        f"HER: buffer_size={buffer_size} keeps {steps_kept} steps of each of num_envs={num_envs} envs, "
        f"fewer than one episode ({length} steps, the env's time limit), so an episode that "
        f"runs to its time limit is never whole in the buffer: 'future' and 'episode' goals would come "
        f"only from its last {steps_kept} steps and 'final' goals from its newest step, not the one that "
        f"ended it. Set buffer_size >= {num_envs * length} (num_envs * episode length)."
    )
