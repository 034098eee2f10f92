"""Reacher-misc: a planar arm of unit links whose tip must reach a goal (gymnax's version of ivy_gym's reacher)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["Reacher", "ReacherParams", "ReacherState"]


class ReacherState(struct.PyTreeNode):
    angles: jax.Array  # float32 (num_joints,): absolute angle of each link, radians
    angle_vels: jax.Array  # float32 (num_joints,): angular velocities
    goal_x: jax.Array  # float32 (): goal position, x
    goal_y: jax.Array  # float32 (): goal position, y
    time: jax.Array  # int32 (): steps taken in this episode


class ReacherParams(struct.PyTreeNode):
    # angular acceleration per unit of action
    torque_scale: float = struct.field(default=1.0, finite=True)
    dt: float = struct.field(default=0.05, above=0.0, finite=True)  # seconds per step
    max_steps_in_episode: int = struct.field(default=100, bounds=(1, None))


class Reacher(Environment[ReacherState, ReacherParams]):
    """Accelerate the joints of a planar arm so that its tip stays near a goal.

    Follows gymnax's ``Reacher-misc``. Each link has length 1 and its angle is
    measured from the x axis (not from the previous link), so the tip is at
    ``(sum(cos(angles)), sum(sin(angles)))``.

    Observation: float32 ``(3 * num_joints + 2,)`` = cos of the angles, sin of
    the angles, angular velocities, goal (x, y).
    Action: Box ``[-1, 1]^num_joints`` float32: angular accelerations divided by
    ``torque_scale`` (used as given, not clipped, as in gymnax).
    Dynamics: semi-implicit Euler, ``vel += dt * torque_scale * action``,
    ``angle += dt * vel``.
    Reward: ``exp(-|tip - goal|^2)`` after the move, in (0, 1].
    Terminated: never.
    Truncated: after ``max_steps_in_episode`` (100) steps.
    Reset: angles U(-pi, pi), angular velocities U(-1, 1), goal x and y
    U(-num_joints, num_joints).
    State: :class:`ReacherState`. The step ignores its key.

    Args:
        num_joints: number of links (static), >= 1.
    """

    stochastic_step = False

    def __init__(self, num_joints: int = 2):
        if int(num_joints) < 1:
            raise ValueError(f"Reacher(num_joints={num_joints}): need at least one joint.")
        self.num_joints = int(num_joints)

    @property
    def default_params(self) -> ReacherParams:
        return ReacherParams()

    def reset_env(self, key: jax.Array, params: ReacherParams) -> tuple[jax.Array, ReacherState]:
        j = self.num_joints
        u = fast_random.uniform16(key, (2 * j + 2,))
        state = ReacherState(
            angles=(u[:j] * 2.0 - 1.0) * jnp.pi,
            angle_vels=u[j : 2 * j] * 2.0 - 1.0,
            goal_x=(u[2 * j] * 2.0 - 1.0) * j,
            goal_y=(u[2 * j + 1] * 2.0 - 1.0) * j,
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: ReacherState, action: Any, params: ReacherParams) -> StepOutput:
        action = jnp.asarray(action, jnp.float32)
        angle_vels = state.angle_vels + params.dt * (params.torque_scale * action)
        angles = state.angles + params.dt * angle_vels
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        tip_x, tip_y = jnp.sum(cos), jnp.sum(sin)
        reward = jnp.exp(-(jnp.square(tip_x - state.goal_x) + jnp.square(tip_y - state.goal_y)))
        time = state.time + 1
        state = ReacherState(angles, angle_vels, state.goal_x, state.goal_y, time)
        obs = jnp.concatenate([cos, sin, angle_vels, jnp.stack([state.goal_x, state.goal_y])])
        truncated = time >= params.max_steps_in_episode
        return obs, state, reward.astype(jnp.float32), jnp.zeros((), jnp.bool_), truncated, {}

    def get_obs(self, state: ReacherState, params: ReacherParams | None = None) -> jax.Array:
        return jnp.concatenate(
            [
                jnp.cos(state.angles),
                jnp.sin(state.angles),
                state.angle_vels,
                jnp.stack([state.goal_x, state.goal_y]),
            ]
        ).astype(jnp.float32)

    def observation_space(self, params: ReacherParams | None = None) -> spaces.Box:
        big = float(np.finfo(np.float32).max)
        return spaces.Box(-big, big, (3 * self.num_joints + 2,), jnp.float32)

    def action_space(self, params: ReacherParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.num_joints,), jnp.float32)

    def render(self, state: ReacherState, params: ReacherParams | None = None) -> jax.Array:
        """The arm (links dark, joints blue) and the goal (yellow), view ``[-J - 0.5, J + 0.5]^2``.

        Shape ``(256, 256, 3)`` uint8.
        """
        size = 256
        scale = size / (2 * self.num_joints + 1.0)
        centre = size / 2.0
        frame = rendering.canvas(size, size, _common.BACKGROUND)
        frame = rendering.fill_circle(
            frame, centre + state.goal_x * scale, centre - state.goal_y * scale, 0.2 * scale, _common.GOAL
        )
        x = y = jnp.zeros((), jnp.float32)
        for j in range(self.num_joints):
            nx, ny = x + jnp.cos(state.angles[j]), y + jnp.sin(state.angles[j])
            frame = rendering.draw_segment(
                frame,
                centre + x * scale,
                centre - y * scale,
                centre + nx * scale,
                centre - ny * scale,
                0.12 * scale,
                _common.INK,
            )
            frame = rendering.fill_circle(
                frame, centre + x * scale, centre - y * scale, 0.08 * scale, _common.AGENT
            )
            x, y = nx, ny
        return rendering.fill_circle(frame, centre + x * scale, centre - y * scale, 0.08 * scale, _common.BAD)
