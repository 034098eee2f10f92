"""MountainCarContinuous-v0: MountainCar with a continuous throttle (gymnasium's dynamics)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.classic_control._once import computed_once
from lamella.envs.classic_control.mountain_car import render_mountain_car
from lamella.envs.environment import Environment, StepOutput

__all__ = ["MountainCarContinuous", "MountainCarContinuousParams", "MountainCarContinuousState"]


class MountainCarContinuousState(struct.PyTreeNode):
    position: jax.Array  # float32 (): in [min_position, max_position]
    velocity: jax.Array  # float32 (): in [-max_speed, max_speed]
    time: jax.Array  # int32 (): steps taken in this episode


class MountainCarContinuousParams(struct.PyTreeNode):
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    gravity: float = 0.0025
    max_steps_in_episode: int = struct.field(default=999, bounds=(1, None))


class MountainCarContinuous(Environment[MountainCarContinuousState, MountainCarContinuousParams]):
    """Apply a continuous force to drive a car up the right hill, spending as little energy as possible.

    Observation: float32 ``(2,)`` = position (in [-1.2, 0.6]), velocity (in [-0.07, 0.07]).
    Action: Box float32 ``(1,)`` in [-1, 1]: the force. Out-of-range forces are
    clipped for the dynamics, but the energy penalty uses the action as given
    (as gymnasium does).
    Reward: ``-0.1 * action**2`` on every step, plus 100.0 on the step that reaches the goal.
    Terminated: ``position >= goal_position`` (0.45) and ``velocity >= goal_velocity`` (0).
    Truncated: after ``max_steps_in_episode`` (999) steps.
    Reset: position uniform in [-0.6, -0.4], velocity 0.
    State: :class:`MountainCarContinuousState`:

    * ``position``: float32 ``()``, in [min_position, max_position].
    * ``velocity``: float32 ``()``, in [-max_speed, max_speed].
    * ``time``: int32 ``()``, steps taken in this episode.

    Dynamics: ``velocity += clip(action) power - gravity cos(3 position)``,
    clipped; ``position += velocity``, clipped; the car stops (velocity 0) when
    it hits the left wall moving left, as gymnasium's MountainCarContinuous-v0.
    """

    stochastic_step = False

    @property
    def default_params(self) -> MountainCarContinuousParams:
        return MountainCarContinuousParams()

    def reset_env(
        self, key: jax.Array, params: MountainCarContinuousParams
    ) -> tuple[jax.Array, MountainCarContinuousState]:
        position = fast_random.uniform(key, (), -0.6, -0.4)
        state = MountainCarContinuousState(position, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self,
        key: jax.Array,
        state: MountainCarContinuousState,
        action: Any,
        params: MountainCarContinuousParams,
    ) -> StepOutput:
        action = jnp.reshape(action, ()).astype(jnp.float32)
        force = jnp.clip(action, params.min_action, params.max_action)
        velocity = state.velocity + force * params.power - params.gravity * jnp.cos(3.0 * state.position)
        # The cosine runs once per step instead of once per reader of the new state (_once.py).
        (velocity,) = computed_once(state.time, jnp.clip(velocity, -params.max_speed, params.max_speed))
        position = jnp.clip(state.position + velocity, params.min_position, params.max_position)
        velocity = jnp.where((position == params.min_position) & (velocity < 0.0), 0.0, velocity)
        position, velocity = computed_once(state.time, position, velocity)
        state = MountainCarContinuousState(position, velocity, state.time + 1)
        terminated = (position >= params.goal_position) & (velocity >= params.goal_velocity)
        reward = jnp.where(terminated, 100.0, 0.0) - 0.1 * jnp.square(action)
        truncated = state.time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward, terminated, truncated, {}

    def get_obs(self, state: MountainCarContinuousState) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def observation_space(self, params: MountainCarContinuousParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        low = np.array([params.min_position, -params.max_speed], np.float32)
        high = np.array([params.max_position, params.max_speed], np.float32)
        return spaces.Box(low, high, (2,), jnp.float32)

    def action_space(self, params: MountainCarContinuousParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        return spaces.Box(params.min_action, params.max_action, (1,), jnp.float32)

    def render(
        self, state: MountainCarContinuousState, params: MountainCarContinuousParams | None = None
    ) -> jax.Array:
        """A 200 x 300 frame: gymnasium's picture at half its size (track, car, flag)."""
        params = self.default_params if params is None else params
        return render_mountain_car(
            state.position, params.min_position, params.max_position, params.goal_position
        )
