"""Acrobot-v1: swing a two-link chain above a line (Sutton & Barto's "book" dynamics, as gymnasium)."""

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

__all__ = ["Acrobot", "AcrobotParams", "AcrobotState"]

_TWO_PI = 2.0 * math.pi


class AcrobotState(struct.PyTreeNode):
    theta1: jax.Array  # float32 (): first joint angle, 0 = hanging down, wrapped to [-pi, pi]
    theta2: jax.Array  # float32 (): second joint angle relative to the first link, wrapped to [-pi, pi]
    theta1_dot: jax.Array  # float32 (): in [-max_vel_1, max_vel_1]
    theta2_dot: jax.Array  # float32 (): in [-max_vel_2, max_vel_2]
    time: jax.Array  # int32 (): steps taken in this episode


class AcrobotParams(struct.PyTreeNode):
    dt: float = struct.field(default=0.2, above=0.0, finite=True)  # seconds per step (one RK4 step)
    link_length_1: float = struct.field(default=1.0, finite=True)
    link_length_2: float = 1.0  # only used for rendering, as in gymnasium
    link_mass_1: float = struct.field(default=1.0, bounds=(0.0, None), finite=True)
    link_mass_2: float = struct.field(default=1.0, bounds=(0.0, None), finite=True)
    # centre of mass of link 1, from its joint
    link_com_pos_1: float = struct.field(default=0.5, finite=True)
    link_com_pos_2: float = struct.field(default=0.5, finite=True)
    link_moi: float = struct.field(default=1.0, above=0.0, finite=True)  # moment of inertia of both links
    gravity: float = struct.field(default=9.8, finite=True)
    max_vel_1: float = struct.field(default=4 * math.pi, bounds=(0.0, None))
    max_vel_2: float = struct.field(default=9 * math.pi, bounds=(0.0, None))
    max_steps_in_episode: int = struct.field(default=500, bounds=(1, None))


def _wrap(angle: jax.Array) -> jax.Array:
    return angle - _TWO_PI * jnp.round(angle * (1.0 / _TWO_PI))


class Acrobot(Environment[AcrobotState, AcrobotParams]):
    """Apply a torque at the elbow of a two-link chain to swing its tip above a line.

    Observation: float32 ``(6,)`` = cos(theta1), sin(theta1), cos(theta2),
    sin(theta2), theta1_dot (in [-4 pi, 4 pi]), theta2_dot (in [-9 pi, 9 pi]).
    Action: Discrete(3), int32 ``()``: torque -1, 0 or +1 on the second joint.
    Reward: -1.0 on every step, 0.0 on the step that reaches the goal.
    Terminated: the tip is higher than one link length above the pivot,
    ``-cos(theta1) - cos(theta1 + theta2) > 1``.
    Truncated: after ``max_steps_in_episode`` (500) steps.
    Reset: all four state variables uniform in [-0.1, 0.1] (16 random bits each, see
    :func:`lamella.envs.random.uniform16`).
    State: :class:`AcrobotState`:

    * ``theta1``: float32 ``()``, first joint angle (0 = hanging down), in [-pi, pi].
    * ``theta2``: float32 ``()``, second joint angle relative to the first link, in [-pi, pi].
    * ``theta1_dot``: float32 ``()``, clipped to [-max_vel_1, max_vel_1].
    * ``theta2_dot``: float32 ``()``, clipped to [-max_vel_2, max_vel_2].
    * ``time``: int32 ``()``, steps taken in this episode.

    Dynamics: the "book" equations of motion (Sutton & Barto), one fourth-order
    Runge-Kutta step of ``dt`` with the torque held constant, then angles
    wrapped and velocities clipped, as gymnasium's Acrobot-v1 (without torque
    noise, which gymnasium also leaves at 0).
    """

    stochastic_step = False

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    def reset_env(self, key: jax.Array, params: AcrobotParams) -> tuple[jax.Array, AcrobotState]:
        theta1, theta2, theta1_dot, theta2_dot = fast_random.uniform16(key, (4,), -0.1, 0.1)
        state = AcrobotState(theta1, theta2, theta1_dot, theta2_dot, jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: AcrobotState, action: Any, params: AcrobotParams) -> StepOutput:
        torque = (jnp.asarray(action) - 1).astype(jnp.float32)
        m1, m2 = params.link_mass_1, params.link_mass_2
        l1, lc1, lc2 = params.link_length_1, params.link_com_pos_1, params.link_com_pos_2
        inertia, g = params.link_moi, params.gravity
        # Constants of the equations of motion, computed once per step (scalars under vmap).
        d1_const = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2) + 2.0 * inertia
        d2_const = m2 * lc2 * lc2 + inertia
        coupling = m2 * l1 * lc2
        gravity_1 = (m1 * lc1 + m2 * l1) * g
        gravity_2 = m2 * lc2 * g
        time = state.time

        def accelerations(
            theta1: jax.Array, theta2: jax.Array, dtheta1: jax.Array, dtheta2: jax.Array
        ) -> tuple[jax.Array, jax.Array]:
            # Every later value of the stage reads these; computed once, not once per reader (_once.py).
            cos2, sin2, sin12, sin1 = computed_once(
                time, jnp.cos(theta2), jnp.sin(theta2), jnp.sin(theta1 + theta2), jnp.sin(theta1)
            )
            d1 = d1_const + 2.0 * coupling * cos2
            d2 = d2_const + coupling * cos2
            phi2 = gravity_2 * sin12  # cos(theta1 + theta2 - pi/2)
            phi1 = (
                -coupling * sin2 * dtheta2 * (dtheta2 + 2.0 * dtheta1)
                + gravity_1 * sin1  # cos(theta1 - pi/2)
                + phi2
            )
            inv_d1 = 1.0 / d1
            ddtheta2 = (torque + d2 * inv_d1 * phi1 - coupling * dtheta1 * dtheta1 * sin2 - phi2) / (
                d2_const - d2 * d2 * inv_d1
            )
            ddtheta1 = -(d2 * ddtheta2 + phi1) * inv_d1
            return ddtheta1, ddtheta2

        dt = params.dt
        half = 0.5 * dt
        y = (state.theta1, state.theta2, state.theta1_dot, state.theta2_dot)

        def derivative(y: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            return (y[2], y[3], *accelerations(y[0], y[1], y[2], y[3]))

        def advance(y: tuple[jax.Array, ...], k: tuple[jax.Array, ...], h: Any) -> tuple[jax.Array, ...]:
            return tuple(yi + h * ki for yi, ki in zip(y, k))

        k1 = derivative(y)
        k2 = derivative(advance(y, k1, half))
        k3 = derivative(advance(y, k2, half))
        k4 = derivative(advance(y, k3, dt))
        theta1, theta2, theta1_dot, theta2_dot = (
            yi + (dt / 6.0) * (a + 2.0 * (b + c) + d) for yi, a, b, c, d in zip(y, k1, k2, k3, k4)
        )
        theta1, theta2, theta1_dot, theta2_dot = computed_once(
            time,
            _wrap(theta1),
            _wrap(theta2),
            jnp.clip(theta1_dot, -params.max_vel_1, params.max_vel_1),
            jnp.clip(theta2_dot, -params.max_vel_2, params.max_vel_2),
        )
        state = AcrobotState(theta1, theta2, theta1_dot, theta2_dot, time + 1)
        cos1, sin1, cos2, sin2 = computed_once(
            time, jnp.cos(state.theta1), jnp.sin(state.theta1), jnp.cos(state.theta2), jnp.sin(state.theta2)
        )
        terminated = -cos1 - (cos1 * cos2 - sin1 * sin2) > 1.0  # -cos(t1) - cos(t1 + t2) > 1
        reward = terminated.astype(jnp.float32) - 1.0
        truncated = state.time >= params.max_steps_in_episode
        obs = jnp.stack([cos1, sin1, cos2, sin2, state.theta1_dot, state.theta2_dot]).astype(jnp.float32)
        return obs, state, reward, terminated, truncated, {}

    def get_obs(self, state: AcrobotState) -> jax.Array:
        return jnp.stack(
            [
                jnp.cos(state.theta1),
                jnp.sin(state.theta1),
                jnp.cos(state.theta2),
                jnp.sin(state.theta2),
                state.theta1_dot,
                state.theta2_dot,
            ]
        ).astype(jnp.float32)

    def observation_space(self, params: AcrobotParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        high = np.array([1.0, 1.0, 1.0, 1.0, params.max_vel_1, params.max_vel_2], np.float32)
        return spaces.Box(-high, high, (6,), jnp.float32)

    def action_space(self, params: AcrobotParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def render(self, state: AcrobotState, params: AcrobotParams | None = None) -> jax.Array:
        """A 250 x 250 frame: gymnasium's picture at half its size.

        The pivot is at the centre, the links are cyan bars with yellow joints,
        and the black line marks the goal height.
        """
        params = self.default_params if params is None else params
        size = 250
        bound = params.link_length_1 + params.link_length_2 + 0.2
        scale = size / (bound * 2)
        centre = size / 2.0
        frame = rendering.canvas(size, size)
        line_y = centre - 1.0 * scale
        frame = rendering.fill_rect(
            frame, centre - 2.2 * scale, line_y - 0.5, centre + 2.2 * scale, line_y + 0.5, (0, 0, 0)
        )
        half_width = 0.1 * scale
        angle2 = state.theta1 + state.theta2
        # Screen coordinates, y down: a link at angle a points along (sin a, cos a).
        x0, y0 = jnp.asarray(centre), jnp.asarray(centre)
        x1 = x0 + params.link_length_1 * scale * jnp.sin(state.theta1)
        y1 = y0 + params.link_length_1 * scale * jnp.cos(state.theta1)
        for (xa, ya), angle, length in (
            ((x0, y0), state.theta1, params.link_length_1 * scale),
            ((x1, y1), angle2, params.link_length_2 * scale),
        ):
            along = jnp.stack([jnp.sin(angle), jnp.cos(angle)])
            across = jnp.stack([-along[1], along[0]]) * half_width
            start = jnp.stack([xa, ya])
            end = start + along * length
            corners = jnp.stack([start - across, start + across, end + across, end - across])
            frame = rendering.fill_polygon(frame, corners, (0, 204, 204))
            frame = rendering.fill_circle(frame, xa, ya, half_width, (204, 204, 0))
        return frame
