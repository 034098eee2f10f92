"""BernoulliBandit-misc: a two-armed Bernoulli bandit for meta-RL (Wang et al. 2017)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["BernoulliBandit", "BernoulliBanditParams", "BernoulliBanditState"]


class BernoulliBanditState(struct.PyTreeNode):
    arm0_prob: jax.Array  # float32 (): P(reward 1) of arm 0; arm 1 pays with 1 - arm0_prob
    exp_reward_best: jax.Array  # float32 (): max(arm0_prob, 1 - arm0_prob), the best arm's mean
    last_action: jax.Array  # int32 (): arm pulled on the last step (0 after a reset)
    last_reward: jax.Array  # float32 (): reward of the last step, 0.0 or 1.0 (0 after a reset)
    time: jax.Array  # int32 (): steps taken in this episode


class BernoulliBanditParams(struct.PyTreeNode):
    # one arm pays with this probability, the other with 1 - reward_prob
    reward_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    normalize_time: bool = True  # time entry normalised into [min_lim, max_lim] over t_max steps
    max_steps_in_episode: int = struct.field(default=100, bounds=(1, None))
    min_lim: float = -1.0
    max_lim: float = 1.0
    t_max: int = struct.field(default=100, bounds=(1, None))


class BernoulliBandit(Environment[BernoulliBanditState, BernoulliBanditParams]):
    """Two arms with reward probabilities ``p`` and ``1 - p``; which arm is better is hidden.

    Follows gymnax's ``BernoulliBandit-misc``.

    Observation: float32 ``(4,)`` = last reward, one-hot last action (2), time
    (``(max_lim - min_lim) * t / t_max + min_lim``, or ``t`` without
    ``params.normalize_time``).
    Action: Discrete(2), int32 ``()``: the arm.
    Reward: 1.0 with the pulled arm's probability, else 0.0 (drawn from the step
    key). gymnax returns it as int32; lamella as float32.
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (100) steps.
    Reset: arm 0's probability is ``reward_prob`` or ``1 - reward_prob`` with
    equal chance (arm 1 gets the other).
    State: :class:`BernoulliBanditState`.
    """

    @property
    def default_params(self) -> BernoulliBanditParams:
        return BernoulliBanditParams()

    def reset_env(
        self, key: jax.Array, params: BernoulliBanditParams
    ) -> tuple[jax.Array, BernoulliBanditState]:
        p = jnp.asarray(params.reward_prob, jnp.float32)
        arm0_prob = jnp.where(fast_random.uniform16(key) < 0.5, p, 1.0 - p)
        state = BernoulliBanditState(
            arm0_prob=arm0_prob,
            exp_reward_best=jnp.where(arm0_prob > 0.5, arm0_prob, 1.0 - arm0_prob),
            last_action=jnp.zeros((), jnp.int32),
            last_reward=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state, params), state

    def step_env(
        self, key: jax.Array, state: BernoulliBanditState, action: Any, params: BernoulliBanditParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        prob = jnp.where(action == 0, state.arm0_prob, 1.0 - state.arm0_prob)
        reward = (fast_random.uniform(key) < prob).astype(jnp.float32)
        time = state.time + 1
        state = dataclasses.replace(state, last_action=action, last_reward=reward, time=time)
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state, params), state, reward, jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: BernoulliBanditState, params: BernoulliBanditParams) -> jax.Array:
        t = jnp.asarray(state.time, jnp.float32)
        time = jnp.where(
            params.normalize_time, _common.normalized_time(t, params.min_lim, params.max_lim, params.t_max), t
        )
        return jnp.stack(
            [
                state.last_reward,
                (state.last_action == 0).astype(jnp.float32),
                (state.last_action == 1).astype(jnp.float32),
                time,
            ]
        ).astype(jnp.float32)

    def observation_space(self, params: BernoulliBanditParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        max_steps = float(params.max_steps_in_episode)
        if bool(params.normalize_time):
            lo, hi = float(params.min_lim), float(params.max_lim)
            ends = [lo, (hi - lo) * max_steps / float(params.t_max) + lo]
            time_low, time_high = min(ends), max([*ends, hi])
        else:
            time_low, time_high = 0.0, max_steps
        return spaces.Box(
            np.array([0.0, 0.0, 0.0, time_low], np.float32), np.array([1.0, 1.0, 1.0, time_high], np.float32)
        )

    def action_space(self, params: BernoulliBanditParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: BernoulliBanditState, params: BernoulliBanditParams | None = None) -> jax.Array:
        """Bars of the two arms' probabilities; the last pulled arm blue, a green (1) or red (0) reward row.

        Shape ``(11 * 20, 2 * 40, 3)`` uint8 (10 bar rows and one reward row).
        """
        probs = jnp.stack([state.arm0_prob, 1.0 - state.arm0_prob])
        return _bars(probs, state.last_action, state.last_reward > 0.5, state.time > 0)


def _bars(levels: jax.Array, last_action: jax.Array, good: jax.Array, show_reward: jax.Array) -> jax.Array:
    """Two bars of ``levels`` in [0, 1] plus a reward row under the pulled arm; shared by both bandits."""
    filled = (9 - jnp.arange(10))[:, None] < jnp.round(jnp.clip(levels, 0.0, 1.0) * 10)[None, :]
    pulled = jnp.arange(2)[None, :] == last_action
    bars = jnp.where(filled, jnp.where(pulled, 2, 1), 0)
    reward_row = jnp.where(pulled[0] & show_reward, jnp.where(good, 3, 4), 0)[None, :]
    labels = jnp.concatenate([bars, reward_row], axis=0)
    colors = [_common.FLOOR, _common.NEUTRAL, _common.AGENT, _common.GOOD, _common.BAD]
    cells = _common.palette(colors)[labels]
    return jnp.repeat(jnp.repeat(cells, 20, axis=0), 40, axis=1)
