"""PointRobot-misc: a 2-D point robot that must find a goal on a semicircle (Dorfman et al. 2021)."""

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

__all__ = ["PointRobot", "PointRobotParams", "PointRobotState"]


class PointRobotState(struct.PyTreeNode):
    x: jax.Array  # float32 (): robot position, x
    y: jax.Array  # float32 (): robot position, y
    goal_x: jax.Array  # float32 (): goal position, x (on the semicircle)
    goal_y: jax.Array  # float32 (): goal position, y
    last_action: jax.Array  # float32 (2,): action of the last step as given (unclipped); zeros after a reset
    last_reward: jax.Array  # float32 (): reward of the last step (0 after a reset)
    goals_reached: jax.Array  # int32 (): times the goal was reached in this episode
    time: jax.Array  # int32 (): steps taken in this episode


class PointRobotParams(struct.PyTreeNode):
    max_force: float = 0.1  # actions are clipped to [-max_force, max_force] per axis
    # radius of the goal semicircle
    circle_radius: float = struct.field(default=1.0, finite=True)
    dense_reward: bool = False  # reward -distance on every step instead of the sparse 0/1
    goal_radius: float = 0.2  # the goal counts as reached within this distance
    center_init: bool = False  # start (and restart) at the origin instead of a random point
    normalize_time: bool = True  # time entry as 2 * t / 100 - 1 instead of t
    max_steps_in_episode: int = struct.field(default=100, bounds=(1, None))


class PointRobot(Environment[PointRobotState, PointRobotParams]):
    """Move a point in the plane to a goal hidden on the upper unit semicircle.

    Follows gymnax's ``PointRobot-misc`` (the semicircle task of Dorfman, Shenfeld
    & Tamar 2021). The goal is drawn once per episode and is not observed.

    Observation: float32 ``(6,)`` = x, y, last reward, last action (2, as
    given), time (``2 * t / 100 - 1``, or ``t`` without ``params.normalize_time``).
    Action: Box ``[-max_force, max_force]^2`` float32 ``(2,)``: the displacement,
    clipped to the box.
    Reward: computed from the position *before* the move: with
    ``params.dense_reward`` minus the distance to the goal, else 1.0 when that
    distance is at most ``goal_radius`` and 0.0 otherwise.
    When the goal was reached (same test) the robot restarts at a new position
    drawn as at reset (from the step key) instead of moving.
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (100) steps.
    Reset: goal at angle U(0, pi) on the circle of radius ``circle_radius``; robot
    at radius U(0, circle_radius) and angle U(0, pi) (the origin with
    ``params.center_init``).
    State: :class:`PointRobotState`.
    """

    @property
    def default_params(self) -> PointRobotParams:
        return PointRobotParams()

    @staticmethod
    def _sample_position(
        u_radius: jax.Array, u_angle: jax.Array, params: PointRobotParams
    ) -> tuple[Any, Any]:
        radius = u_radius * params.circle_radius
        angle = u_angle * jnp.pi
        x = jnp.where(params.center_init, 0.0, radius * jnp.cos(angle))
        y = jnp.where(params.center_init, 0.0, radius * jnp.sin(angle))
        return x.astype(jnp.float32), y.astype(jnp.float32)

    def reset_env(self, key: jax.Array, params: PointRobotParams) -> tuple[jax.Array, PointRobotState]:
        u_goal, u_radius, u_angle = fast_random.uniform16(key, (3,))
        goal_angle = u_goal * jnp.pi
        x, y = self._sample_position(u_radius, u_angle, params)
        state = PointRobotState(
            x=x,
            y=y,
            goal_x=jnp.asarray(params.circle_radius * jnp.cos(goal_angle), jnp.float32),
            goal_y=jnp.asarray(params.circle_radius * jnp.sin(goal_angle), jnp.float32),
            last_action=jnp.zeros((2,), jnp.float32),
            last_reward=jnp.zeros((), jnp.float32),
            goals_reached=jnp.zeros((), jnp.int32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state, params), state

    def step_env(
        self, key: jax.Array, state: PointRobotState, action: Any, params: PointRobotParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.float32)
        dx = jnp.clip(action[0], -params.max_force, params.max_force)
        dy = jnp.clip(action[1], -params.max_force, params.max_force)
        distance = jnp.sqrt(jnp.square(state.goal_x - state.x) + jnp.square(state.goal_y - state.y))
        goal_reached = distance <= params.goal_radius
        reward = jnp.where(params.dense_reward, -distance, goal_reached.astype(jnp.float32))
        u_radius, u_angle = fast_random.uniform16(key, (2,))
        restart_x, restart_y = self._sample_position(u_radius, u_angle, params)
        time = state.time + 1
        state = dataclasses.replace(
            state,
            x=jnp.where(goal_reached, restart_x, state.x + dx),
            y=jnp.where(goal_reached, restart_y, state.y + dy),
            last_action=action,
            last_reward=reward,
            goals_reached=state.goals_reached + goal_reached.astype(jnp.int32),
            time=time,
        )
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state, params), state, reward, jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: PointRobotState, params: PointRobotParams) -> jax.Array:
        time = _common.time_feature(state.time, params.normalize_time)
        return jnp.stack(
            [state.x, state.y, state.last_reward, state.last_action[0], state.last_action[1], time]
        ).astype(jnp.float32)

    def observation_space(self, params: PointRobotParams | None = None) -> spaces.Box:
        big = float(np.finfo(np.float32).max)
        return spaces.Box(-big, big, (6,), jnp.float32)

    def action_space(self, params: PointRobotParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        force = float(params.max_force)
        return spaces.Box(-force, force, (2,), jnp.float32)

    def render(self, state: PointRobotState, params: PointRobotParams | None = None) -> jax.Array:
        """The semicircle (black), the goal region (light yellow), the robot (red).

        Shape ``(240, 400, 3)`` uint8; the view spans x in [-1.25, 1.25] and y in
        [-0.25, 1.25] times ``circle_radius``.
        """
        params = self.default_params if params is None else params
        height, width = 240, 400
        scale = width / (2.5 * params.circle_radius)
        cx, cy = width / 2.0, height - 0.25 * params.circle_radius * scale

        def to_pixels(x: Any, y: Any) -> tuple[Any, Any]:
            return cx + x * scale, cy - y * scale

        radius = params.circle_radius * scale
        frame = rendering.canvas(height, width)
        frame = rendering.fill_circle(frame, cx, cy, radius + 1.5, _common.INK)
        frame = rendering.fill_circle(frame, cx, cy, radius - 1.5, _common.BACKGROUND)
        frame = rendering.fill_rect(frame, 0, cy + 0.5, width, height, _common.BACKGROUND)
        gx, gy = to_pixels(state.goal_x, state.goal_y)
        frame = rendering.fill_circle(frame, gx, gy, params.goal_radius * scale, (250, 228, 150))
        rx, ry = to_pixels(state.x, state.y)
        return rendering.fill_circle(frame, rx, ry, 0.05 * scale, _common.BAD)
