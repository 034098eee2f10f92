"""Pendulum-v1: swing a pendulum up and hold it upright (gymnasium's dynamics)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.classic_control._once import computed_once
from lamella.envs.environment import Environment, StepOutput

__all__ = ["Pendulum", "PendulumParams", "PendulumState"]

_TWO_PI = 2.0 * math.pi


class PendulumState(struct.PyTreeNode):
    theta: jax.Array  # float32 (): angle from upright, radians, counter-clockwise, not wrapped
    theta_dot: jax.Array  # float32 (): angular velocity, radians per second
    time: jax.Array  # int32 (): steps taken in this episode


class PendulumParams(struct.PyTreeNode):
    max_speed: float = struct.field(
        default=8.0, bounds=(0.0, None)
    )  # angular velocity is clipped to [-max_speed, max_speed]
    max_torque: float = struct.field(
        default=2.0, bounds=(0.0, None)
    )  # torque is clipped to [-max_torque, max_torque]
    dt: float = struct.field(default=0.05, above=0.0, finite=True)  # seconds per step
    g: float = 10.0
    m: float = struct.field(default=1.0, above=0.0)
    l: float = struct.field(default=1.0, above=0.0)  # noqa: E741 - the pendulum's length, named as in the physics
    max_steps_in_episode: int = struct.field(default=200, bounds=(1, None))


def angle_normalize(theta: jax.Array) -> jax.Array:
    """``theta`` wrapped to [-pi, pi] (either end at exactly +-pi, which squares the same)."""
    return theta - _TWO_PI * jnp.round(theta * (1.0 / _TWO_PI))


class Pendulum(Environment[PendulumState, PendulumParams]):
    """Apply a torque to swing a pendulum up and keep it upright.

    Observation: float32 ``(3,)`` = cos(theta), sin(theta), angular velocity
    (in [-max_speed, max_speed]).
    Action: Box float32 ``(1,)`` in [-max_torque, max_torque] (2.0): the torque,
    positive counter-clockwise. Out-of-range torques are clipped (as gymnasium).
    Reward: ``-(angle_normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * u**2)``
    of the state *before* the step and the clipped torque ``u``; in [-16.27, 0].
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (200) steps.
    Reset: theta uniform in [-pi, pi], theta_dot uniform in [-1, 1].
    State: :class:`PendulumState`:

    * ``theta``: float32 ``()``, radians from upright, counter-clockwise; not
      wrapped (gymnasium keeps it unwrapped too).
    * ``theta_dot``: float32 ``()``, radians per second.
    * ``time``: int32 ``()``, steps taken in this episode.

    Dynamics: ``theta_dot += (3 g / (2 l) sin(theta) + 3 / (m l^2) u) dt``,
    clipped to ``max_speed``, then ``theta += theta_dot dt`` (semi-implicit
    Euler), as gymnasium's Pendulum-v1.
    """

    stochastic_step = False

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def reset_env(self, key: jax.Array, params: PendulumParams) -> tuple[jax.Array, PendulumState]:
        high = np.array([math.pi, 1.0], np.float32)
        theta, theta_dot = fast_random.uniform(key, (2,), -high, high)
        state = PendulumState(theta, theta_dot, jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: PendulumState, action: Any, params: PendulumParams
    ) -> StepOutput:
        u = jnp.clip(jnp.reshape(action, ()), -params.max_torque, params.max_torque)
        theta, theta_dot = state.theta, state.theta_dot
        cost = jnp.square(angle_normalize(theta)) + 0.1 * jnp.square(theta_dot) + 0.001 * jnp.square(u)
        theta_ddot = (
            3.0 * params.g / (2.0 * params.l) * jnp.sin(theta) + 3.0 / (params.m * params.l * params.l) * u
        )
        theta_dot = jnp.clip(theta_dot + theta_ddot * params.dt, -params.max_speed, params.max_speed)
        # The sine, and the observation's cosine and sine, run once per step instead of once per
        # reader of the new state and observation (_once.py).
        (theta_dot,) = computed_once(state.time, theta_dot)
        theta = theta + theta_dot * params.dt
        cos, sin = computed_once(state.time, jnp.cos(theta), jnp.sin(theta))
        state = PendulumState(theta, theta_dot, state.time + 1)
        truncated = state.time >= params.max_steps_in_episode
        reward = (-cost).astype(jnp.float32)
        obs = jnp.stack([cos, sin, theta_dot]).astype(jnp.float32)
        return obs, state, reward, jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: PendulumState) -> jax.Array:
        return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot]).astype(jnp.float32)

    def observation_space(self, params: PendulumParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        high = np.array([1.0, 1.0, params.max_speed], np.float32)
        return spaces.Box(-high, high, (3,), jnp.float32)

    def action_space(self, params: PendulumParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        return spaces.Box(-params.max_torque, params.max_torque, (1,), jnp.float32)

    def render(self, state: PendulumState, params: PendulumParams | None = None) -> jax.Array:
        """A 250 x 250 frame: the rod (red) seen from the front, the axle (black) at the centre.

        gymnasium's picture at half its size, without the torque arrow (the state
        does not keep the last torque).
        """
        size = 250
        scale = size / (2.2 * 2)
        centre = size / 2.0
        rod_length, rod_width = 1.0 * scale, 0.2 * scale
        tip_x = centre - rod_length * jnp.sin(state.theta)
        tip_y = centre - rod_length * jnp.cos(state.theta)
        frame = rendering.canvas(size, size)
        frame = rendering.draw_segment(frame, centre, centre, tip_x, tip_y, rod_width, (204, 77, 77))
        return rendering.fill_circle(frame, centre, centre, 0.05 * scale, (0, 0, 0))
