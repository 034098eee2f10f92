"""CartPole-v1: balance a pole on a cart (Barto, Sutton & Anderson 1983; gymnasium's dynamics)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.classic_control._once import computed_once
from lamella.envs.environment import Environment, StepOutput

__all__ = ["CartPole", "CartPoleParams", "CartPoleState"]


class CartPoleState(struct.PyTreeNode):
    x: jax.Array  # float32 (): cart position
    x_dot: jax.Array  # float32 (): cart velocity
    theta: jax.Array  # float32 (): pole angle from vertical, radians
    theta_dot: jax.Array  # float32 (): pole angular velocity
    time: jax.Array  # int32 (): steps taken in this episode


class CartPoleParams(struct.PyTreeNode):
    gravity: float = struct.field(default=9.8, finite=True)
    masscart: float = struct.field(default=1.0, above=0.0)
    masspole: float = struct.field(default=0.1, bounds=(0.0, None), finite=True)
    length: float = struct.field(default=0.5, above=0.0, finite=True)  # half the pole's length
    force_mag: float = struct.field(default=10.0, finite=True)
    tau: float = struct.field(default=0.02, above=0.0, finite=True)  # seconds per step
    theta_threshold_radians: float = struct.field(default=12 * 2 * 3.141592653589793 / 360, above=0.0)
    x_threshold: float = struct.field(default=2.4, above=0.0)
    max_steps_in_episode: int = struct.field(default=500, bounds=(1, None))


class CartPole(Environment[CartPoleState, CartPoleParams]):
    """Push a cart left or right to keep the pole upright.

    Observation: float32 ``(4,)`` = cart position, cart velocity, pole angle
    (radians), pole angular velocity.
    Action: Discrete(2), int32 ``()``: 0 pushes left, 1 pushes right with ``force_mag``.
    Reward: 1.0 on every step, including the one that terminates.
    Terminated: |x| > ``x_threshold`` (2.4) or |theta| > ``theta_threshold_radians`` (12 degrees).
    Truncated: after ``max_steps_in_episode`` (500) steps.
    Reset: all four state variables uniform in [-0.05, 0.05] (16 random bits each, see
    :func:`lamella.envs.random.uniform16`).
    State: :class:`CartPoleState`, the four variables plus the step count.
    Dynamics: Euler integration of the frictionless cart-pole, as gymnasium's CartPole-v1.
    """

    stochastic_step = False

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def reset_env(self, key: jax.Array, params: CartPoleParams) -> tuple[jax.Array, CartPoleState]:
        x, x_dot, theta, theta_dot = fast_random.uniform16(key, (4,), -0.05, 0.05)
        state = CartPoleState(x, x_dot, theta, theta_dot, jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: CartPoleState, action: Any, params: CartPoleParams
    ) -> StepOutput:
        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        # Computed once per step instead of once per reader of the new state (_once.py).
        costheta, sintheta = computed_once(state.time, jnp.cos(state.theta), jnp.sin(state.theta))
        total_mass = params.masscart + params.masspole
        polemass_length = params.masspole * params.length
        temp = (force + polemass_length * state.theta_dot**2 * sintheta) / total_mass
        thetaacc = (params.gravity * sintheta - costheta * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        state = CartPoleState(
            x=state.x + params.tau * state.x_dot,
            x_dot=state.x_dot + params.tau * xacc,
            theta=state.theta + params.tau * state.theta_dot,
            theta_dot=state.theta_dot + params.tau * thetaacc,
            time=state.time + 1,
        )
        terminated = (jnp.abs(state.x) > params.x_threshold) | (
            jnp.abs(state.theta) > params.theta_threshold_radians
        )
        truncated = state.time >= params.max_steps_in_episode
        return self.get_obs(state), state, jnp.ones((), jnp.float32), terminated, truncated, {}

    def get_obs(self, state: CartPoleState) -> jax.Array:
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)

    def observation_space(self, params: CartPoleParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        try:
            x_bound, theta_bound = float(params.x_threshold) * 2, float(params.theta_threshold_radians) * 2
        except (TypeError, jax.errors.ConcretizationTypeError):
            # Traced params (the space is built inside jit/vmap): bounds of the default params.
            defaults = CartPoleParams()
            x_bound, theta_bound = defaults.x_threshold * 2, defaults.theta_threshold_radians * 2
        big = float(np.finfo(np.float32).max)
        high = np.array([x_bound, big, theta_bound, big], np.float32)
        return spaces.Box(-high, high, (4,), jnp.float32)

    def action_space(self, params: CartPoleParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: CartPoleState, params: CartPoleParams | None = None) -> jax.Array:
        """A 200 x 300 frame: gymnasium's picture at half its size (track, cart, pole, axle)."""
        params = self.default_params if params is None else params
        height, width = 200, 300
        scale = width / (params.x_threshold * 2)
        cart_width, cart_height, pole_width = 25.0, 15.0, 5.0
        cart_x = state.x * scale + width / 2.0
        cart_y = height - 50.0  # the track, and the cart's centre line
        frame = rendering.canvas(height, width)
        frame = rendering.fill_rect(frame, 0, cart_y - 0.5, width, cart_y + 0.5, (0, 0, 0))
        frame = rendering.fill_rect(
            frame,
            cart_x - cart_width / 2,
            cart_y - cart_height / 2,
            cart_x + cart_width / 2,
            cart_y + cart_height / 2,
            (0, 0, 0),
        )
        axle_y = cart_y - cart_height / 4
        # A segment with rounded ends spanning [-pole_width/2, pole_length - pole_width/2] along
        # the pole, like gymnasium's rectangle.
        reach = scale * 2 * params.length - pole_width
        tip_x = cart_x + reach * jnp.sin(state.theta)
        tip_y = axle_y - reach * jnp.cos(state.theta)
        frame = rendering.draw_segment(frame, cart_x, axle_y, tip_x, tip_y, pole_width, (202, 152, 101))
        return rendering.fill_circle(frame, cart_x, axle_y, pole_width / 2, (129, 132, 203))
