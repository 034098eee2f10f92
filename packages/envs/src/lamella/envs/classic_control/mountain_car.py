"""MountainCar-v0: drive an under-powered car up a hill (Moore 1990; gymnasium's dynamics)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.classic_control._once import computed_once
from lamella.envs.environment import Environment, StepOutput

__all__ = ["MountainCar", "MountainCarParams", "MountainCarState", "render_mountain_car"]


class MountainCarState(struct.PyTreeNode):
    position: jax.Array  # float32 (): in [min_position, max_position]
    velocity: jax.Array  # float32 (): in [-max_speed, max_speed]
    time: jax.Array  # int32 (): steps taken in this episode


class MountainCarParams(struct.PyTreeNode):
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = struct.field(default=0.001, finite=True)
    gravity: float = 0.0025
    max_steps_in_episode: int = struct.field(default=200, bounds=(1, None))


class MountainCar(Environment[MountainCarState, MountainCarParams]):
    """Accelerate a car left or right to build momentum and reach the flag on the right hill.

    Observation: float32 ``(2,)`` = position (in [-1.2, 0.6]), velocity (in [-0.07, 0.07]).
    Action: Discrete(3), int32 ``()``: 0 accelerates left, 1 does nothing, 2 accelerates right.
    Reward: -1.0 on every step, including the one that reaches the goal.
    Terminated: ``position >= goal_position`` (0.5) and ``velocity >= goal_velocity`` (0).
    Truncated: after ``max_steps_in_episode`` (200) steps.
    Reset: position uniform in [-0.6, -0.4], velocity 0.
    State: :class:`MountainCarState`:

    * ``position``: float32 ``()``, in [min_position, max_position].
    * ``velocity``: float32 ``()``, in [-max_speed, max_speed].
    * ``time``: int32 ``()``, steps taken in this episode.

    Dynamics: ``velocity += (action - 1) force - cos(3 position) gravity``,
    clipped; ``position += velocity``, clipped; the car stops (velocity 0) when
    it hits the left wall moving left, as gymnasium's MountainCar-v0.
    """

    stochastic_step = False

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def reset_env(self, key: jax.Array, params: MountainCarParams) -> tuple[jax.Array, MountainCarState]:
        position = fast_random.uniform(key, (), -0.6, -0.4)
        state = MountainCarState(position, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: MountainCarState, action: Any, params: MountainCarParams
    ) -> StepOutput:
        push = (jnp.asarray(action) - 1).astype(jnp.float32)
        velocity = state.velocity + push * params.force - jnp.cos(3.0 * state.position) * params.gravity
        # The cosine runs once per step instead of once per reader of the new state (_once.py).
        (velocity,) = computed_once(state.time, jnp.clip(velocity, -params.max_speed, params.max_speed))
        position = jnp.clip(state.position + velocity, params.min_position, params.max_position)
        velocity = jnp.where((position == params.min_position) & (velocity < 0.0), 0.0, velocity)
        position, velocity = computed_once(state.time, position, velocity)
        state = MountainCarState(position, velocity, state.time + 1)
        terminated = (position >= params.goal_position) & (velocity >= params.goal_velocity)
        truncated = state.time >= params.max_steps_in_episode
        return self.get_obs(state), state, jnp.full((), -1.0, jnp.float32), terminated, truncated, {}

    def get_obs(self, state: MountainCarState) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def observation_space(self, params: MountainCarParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        low = np.array([params.min_position, -params.max_speed], np.float32)
        high = np.array([params.max_position, params.max_speed], np.float32)
        return spaces.Box(low, high, (2,), jnp.float32)

    def action_space(self, params: MountainCarParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def render(self, state: MountainCarState, params: MountainCarParams | None = None) -> jax.Array:
        """A 200 x 300 frame: gymnasium's picture at half its size (track, car, flag)."""
        params = self.default_params if params is None else params
        return render_mountain_car(
            state.position, params.min_position, params.max_position, params.goal_position
        )


def _height(position: Any) -> Any:
    return jnp.sin(3.0 * position) * 0.45 + 0.55


def render_mountain_car(
    position: jax.Array, min_position: Any, max_position: Any, goal_position: Any
) -> jax.Array:
    """The MountainCar picture (shared by the discrete and continuous versions), 200 x 300 uint8.

    gymnasium's drawing at half its size: the track ``sin(3 x) * 0.45 + 0.55``,
    the car tilted by ``cos(3 x)`` radians with two grey wheels, and the flag
    at ``goal_position``.
    """
    height, width = 200, 300
    scale = width / (max_position - min_position)
    frame = rendering.canvas(height, width)

    def to_screen(x: Any, y: Any) -> jax.Array:  # world-scaled pixels, y up -> screen, y down
        return jnp.stack([x, height - y], axis=-1)

    # The track: a band 1.5 pixels high around the curve, as a polygon.
    xs = jnp.linspace(min_position, max_position, 100)
    curve = to_screen((xs - min_position) * scale, _height(xs) * scale)
    band = jnp.concatenate([curve - jnp.array([0.0, 0.75]), (curve + jnp.array([0.0, 0.75]))[::-1]])
    frame = rendering.fill_polygon(frame, band, (0, 0, 0))

    clearance = 5.0
    car_width, car_height = 20.0, 10.0
    angle = jnp.cos(3.0 * position)
    rotation = jnp.array([[jnp.cos(angle), -jnp.sin(angle)], [jnp.sin(angle), jnp.cos(angle)]])
    base = jnp.stack([(position - min_position) * scale, clearance + _height(position) * scale])

    def place(corners: jax.Array) -> jax.Array:
        world = corners @ rotation.T + base
        return to_screen(world[..., 0], world[..., 1])

    body = np.array(
        [
            [-car_width / 2, 0.0],
            [-car_width / 2, car_height],
            [car_width / 2, car_height],
            [car_width / 2, 0.0],
        ]
    )
    frame = rendering.fill_polygon(frame, place(jnp.asarray(body)), (0, 0, 0))
    wheels = place(jnp.array([[car_width / 4, 0.0], [-car_width / 4, 0.0]]))
    for wheel in wheels:
        frame = rendering.fill_circle(frame, wheel[0], wheel[1], car_height / 2.5, (128, 128, 128))

    flag_x = (goal_position - min_position) * scale
    flag_bottom = height - _height(goal_position) * scale
    flag_top = flag_bottom - 25.0
    frame = rendering.fill_rect(frame, flag_x - 0.5, flag_top, flag_x + 0.5, flag_bottom, (0, 0, 0))
    pennant = jnp.stack(
        [
            jnp.stack([flag_x, flag_top]),
            jnp.stack([flag_x, flag_top + 5.0]),
            jnp.stack([flag_x + 12.5, flag_top + 2.5]),
        ]
    )
    return rendering.fill_polygon(frame, pennant, (204, 204, 0))
