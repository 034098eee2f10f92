"""GaussianBandit-misc: a two-armed bandit with one safe and one Gaussian arm (Lange & Sprekeler 2022)."""

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
from lamella.envs.misc.bernoulli_bandit import _bars

__all__ = ["GaussianBandit", "GaussianBanditParams", "GaussianBanditState"]


# Giles (2010), "Approximating the erfinv function", single precision: erfinv(x) = x * p(w) with
# w = -log(1 - x^2), one polynomial below w = 5 (in w - 2.5) and one above (in sqrt(w) - 3).
_ERFINV_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 2.1858087e-04,
    -1.25372503e-03, -4.17768164e-03, 0.246640727, 1.50140941,
)  # fmt: skip
_ERFINV_TAIL = (
    -2.00214257e-04, 1.00950558e-04, 1.34934322e-03, -3.67342844e-03, 5.73950773e-03,
    -7.6224613e-03, 9.43887047e-03, 1.00167406, 2.83297682,
)  # fmt: skip


def _standard_normal(key: jax.Array) -> jax.Array:
    """N(0, 1) float32 by inverting the CDF at a 23-bit uniform ``u`` in (0, 1).

    ``u = (k + 0.5) / 2**23`` is exact for every ``k`` (a 24-bit ``k`` rounded its top value to
    ``u = 1``, an infinite draw once in 2**24). The inverse CDF is ``sqrt(2) * erfinv(2u - 1)``
    with Giles' polynomials, where ``1 - x**2 = 4u(1 - u)`` needs a ``log`` instead of the
    ``log1p`` of ``jax.lax.erf_inv``: on CPU that ``log1p`` costs more than the rest of this
    env's step (GaussianBandit 1.6x -> 3x gymnax). Within 6e-7 of the exact inverse CDF (in
    erfinv units) for every ``u``, monotone, symmetric; tails reach 5.3 sigma. The env draws
    one on every step and every (auto-)reset.
    """
    return _inverse_normal_cdf(((fast_random.bits(key) >> 9).astype(jnp.float32) + 0.5) * (1.0 / (1 << 23)))


def _inverse_normal_cdf(u: jax.Array) -> jax.Array:
    """``Phi^-1(u)`` for float32 ``u`` in (0, 1) (see :func:`_standard_normal`)."""
    w = -jnp.log(4.0 * u * (1.0 - u))
    central, tail = w - 2.5, jnp.sqrt(w) - 3.0
    p_central, p_tail = jnp.float32(_ERFINV_CENTRAL[0]), jnp.float32(_ERFINV_TAIL[0])
    for a, b in zip(_ERFINV_CENTRAL[1:], _ERFINV_TAIL[1:]):
        p_central, p_tail = a + p_central * central, b + p_tail * tail
    erfinv = jnp.where(w < 5.0, p_central, p_tail) * (2.0 * u - 1.0)
    return np.float32(np.sqrt(2.0)) * erfinv


class GaussianBanditState(struct.PyTreeNode):
    mu: jax.Array  # float32 (): mean reward of arm 1 in this episode
    last_action: jax.Array  # int32 (): arm pulled on the last step (0 after a reset)
    last_reward: jax.Array  # float32 (): reward of the last step (0 after a reset)
    time: jax.Array  # int32 (): steps taken in this episode


class GaussianBanditParams(struct.PyTreeNode):
    mean_mu: float = -1.0  # mean of arm 1's episode mean
    # standard deviation of arm 1's episode mean (between episodes)
    sigma_p: float = struct.field(default=1.0, bounds=(0.0, None))
    # standard deviation of arm 1's reward around its mean (between pulls)
    sigma_l: float = struct.field(default=0.1, bounds=(0.0, None))
    normalize_time: bool = True  # time entry as 2 * t / 100 - 1 instead of t
    max_steps_in_episode: int = struct.field(default=100, bounds=(1, None))


class GaussianBandit(Environment[GaussianBanditState, GaussianBanditParams]):
    """Arm 0 pays 0 for sure; arm 1 pays ``N(mu, sigma_l^2)`` with ``mu ~ N(mean_mu, sigma_p^2)`` per episode.

    Follows gymnax's ``GaussianBandit-misc``: whether exploring arm 1 pays off
    depends on the horizon and on the prior, which is what a meta-learner has to
    find out.

    Observation: float32 ``(4,)`` = last reward, one-hot last action (2), time
    (``2 * t / 100 - 1``, or ``t`` without ``params.normalize_time``).
    Action: Discrete(2), int32 ``()``: the arm.
    Reward: 0.0 for arm 0; ``mu + sigma_l * N(0, 1)`` for arm 1 (drawn from the
    step key).
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (100) steps.
    Reset: ``mu = mean_mu + sigma_p * N(0, 1)`` (from the reset key).
    State: :class:`GaussianBanditState`.
    """

    @property
    def default_params(self) -> GaussianBanditParams:
        return GaussianBanditParams()

    def reset_env(
        self, key: jax.Array, params: GaussianBanditParams
    ) -> tuple[jax.Array, GaussianBanditState]:
        state = GaussianBanditState(
            mu=jnp.asarray(params.mean_mu + params.sigma_p * _standard_normal(key), jnp.float32),
            last_action=jnp.zeros((), jnp.int32),
            last_reward=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state, params), state

    def step_env(
        self, key: jax.Array, state: GaussianBanditState, action: Any, params: GaussianBanditParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        pull = state.mu + params.sigma_l * _standard_normal(key)
        reward = jnp.where(action == 0, 0.0, pull).astype(jnp.float32)
        time = state.time + 1
        state = dataclasses.replace(state, last_action=action, last_reward=reward, time=time)
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state, params), state, reward, jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: GaussianBanditState, params: GaussianBanditParams) -> jax.Array:
        time = _common.time_feature(state.time, params.normalize_time)
        return jnp.stack(
            [
                state.last_reward,
                (state.last_action == 0).astype(jnp.float32),
                (state.last_action == 1).astype(jnp.float32),
                time,
            ]
        ).astype(jnp.float32)

    def observation_space(self, params: GaussianBanditParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        max_steps = float(params.max_steps_in_episode)
        if bool(params.normalize_time):
            time_low, time_high = -1.0, max(1.0, 2.0 * max_steps / 100 - 1.0)
        else:
            time_low, time_high = 0.0, max_steps
        big = float(np.finfo(np.float32).max)
        return spaces.Box(
            np.array([-big, 0.0, 0.0, time_low], np.float32), np.array([big, 1.0, 1.0, time_high], np.float32)
        )

    def action_space(self, params: GaussianBanditParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: GaussianBanditState, params: GaussianBanditParams | None = None) -> jax.Array:
        """Bars of the two arms' means mapped from [-3, 3] to [0, 1] (arm 0 at the middle); the
        last pulled arm blue; under it green for a reward above 0, red otherwise.

        Shape ``(11 * 20, 2 * 40, 3)`` uint8.
        """
        levels = (jnp.stack([jnp.zeros((), jnp.float32), state.mu]) + 3.0) / 6.0
        return _bars(levels, state.last_action, state.last_reward > 0.0, state.time > 0)
