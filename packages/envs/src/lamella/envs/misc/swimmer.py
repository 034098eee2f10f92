"""Swimmer-misc: steer a point swimmer to a goal while avoiding sea urchins (gymnax's version of ivy_gym's swimmer)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["Swimmer", "SwimmerParams", "SwimmerState"]


class SwimmerState(struct.PyTreeNode):
    urchin_xys: jax.Array  # float32 (num_urchins, 2): urchin positions
    x: jax.Array  # float32 (): swimmer position, x
    y: jax.Array  # float32 (): swimmer position, y
    vel_x: jax.Array  # float32 (): swimmer velocity, x
    vel_y: jax.Array  # float32 (): swimmer velocity, y
    goal_x: jax.Array  # float32 (): goal position, x
    goal_y: jax.Array  # float32 (): goal position, y
    time: jax.Array  # int32 (): steps taken in this episode


class SwimmerParams(struct.PyTreeNode):
    dt: float = struct.field(default=0.05, above=0.0, finite=True)  # seconds per step
    max_steps_in_episode: int = struct.field(default=500, bounds=(1, None))


class Swimmer(Environment[SwimmerState, SwimmerParams]):
    """Accelerate a point in the plane towards a goal; urchins spoil the reward near them.

    Follows gymnax's ``Swimmer-misc``.

    Observation: float32 ``(2 * num_urchins + 6,)`` = urchin positions
    (x0, y0, x1, y1, ...), swimmer position (x, y), velocity (x, y), goal (x, y).
    Action: Box ``[-1, 1]^2`` float32: acceleration (used as given, not clipped,
    as in gymnax).
    Dynamics: semi-implicit Euler, ``vel += dt * action``, ``pos += dt * vel``.
    Reward: ``exp(-|pos - goal|^2 / 2) * prod_u (1 - exp(-30 |pos - urchin_u|^2))``
    after the move, in [0, 1].
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (500) steps.
    Reset: urchins, position and goal uniform in ``[-1, 1]^2``, velocity 0.
    State: :class:`SwimmerState`. The step ignores its key.

    Args:
        num_urchins: number of urchins (static), >= 0.
    """

    stochastic_step = False

    def __init__(self, num_urchins: int = 5):
        if int(num_urchins) < 0:
            raise ValueError(f"Swimmer(num_urchins={num_urchins}): must be >= 0.")
        self.num_urchins = int(num_urchins)

    @property
    def default_params(self) -> SwimmerParams:
        return SwimmerParams()

    def reset_env(self, key: jax.Array, params: SwimmerParams) -> tuple[jax.Array, SwimmerState]:
        n = 2 * self.num_urchins
        u = fast_random.uniform16(key, (n + 4,), -1.0, 1.0)
        zero = jnp.zeros((), jnp.float32)
        state = SwimmerState(
            urchin_xys=u[:n].reshape(self.num_urchins, 2),
            x=u[n],
            y=u[n + 1],
            vel_x=zero,
            vel_y=zero,
            goal_x=u[n + 2],
            goal_y=u[n + 3],
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: SwimmerState, action: Any, params: SwimmerParams) -> StepOutput:
        action = jnp.asarray(action, jnp.float32)
        vel_x = state.vel_x + params.dt * action[0]
        vel_y = state.vel_y + params.dt * action[1]
        x = state.x + params.dt * vel_x
        y = state.y + params.dt * vel_y
        reward = jnp.exp(-0.5 * (jnp.square(x - state.goal_x) + jnp.square(y - state.goal_y)))
        for u in range(self.num_urchins):
            d2 = jnp.square(x - state.urchin_xys[u, 0]) + jnp.square(y - state.urchin_xys[u, 1])
            reward = reward * (1.0 - jnp.exp(-30.0 * d2))
        state = dataclasses.replace(state, x=x, y=y, vel_x=vel_x, vel_y=vel_y, time=state.time + 1)
        truncated = state.time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward.astype(jnp.float32), jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: SwimmerState, params: SwimmerParams | None = None) -> jax.Array:
        tail = jnp.stack([state.x, state.y, state.vel_x, state.vel_y, state.goal_x, state.goal_y])
        return jnp.concatenate([state.urchin_xys.reshape(-1), tail]).astype(jnp.float32)

    def observation_space(self, params: SwimmerParams | None = None) -> spaces.Box:
        big = float(np.finfo(np.float32).max)
        return spaces.Box(-big, big, (2 * self.num_urchins + 6,), jnp.float32)

    def action_space(self, params: SwimmerParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def render(self, state: SwimmerState, params: SwimmerParams | None = None) -> jax.Array:
        """Urchins (red), goal (yellow), swimmer (blue) with its velocity; view ``[-1.5, 1.5]^2``.

        Shape ``(240, 240, 3)`` uint8.
        """
        size = 240
        scale = size / 3.0
        centre = size / 2.0

        def px(x: Any, y: Any) -> tuple[Any, Any]:
            return centre + x * scale, centre - y * scale

        frame = rendering.canvas(size, size, (215, 235, 250))
        frame = rendering.fill_circle(frame, *px(state.goal_x, state.goal_y), 0.1 * scale, _common.GOAL)
        for u in range(self.num_urchins):
            frame = rendering.fill_circle(
                frame, *px(state.urchin_xys[u, 0], state.urchin_xys[u, 1]), 0.08 * scale, _common.BAD
            )
        sx, sy = px(state.x, state.y)
        tx, ty = px(state.x + state.vel_x, state.y + state.vel_y)
        frame = rendering.draw_segment(frame, sx, sy, tx, ty, 2.0, _common.INK)
        return rendering.fill_circle(frame, sx, sy, 0.06 * scale, _common.AGENT)
