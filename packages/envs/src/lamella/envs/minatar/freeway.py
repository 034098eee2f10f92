"""Freeway-MinAtar: cross eight lanes of traffic, again and again, before time runs out."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lamella.envs import random as fast_random
from lamella.envs import struct
from lamella.envs.environment import StepOutput
from lamella.envs.minatar._common import (
    DOWN,
    NOOP,
    UP,
    MinAtarEnv,
    cell_row,
    column_per_row,
    grid,
    sticky_action,
)

__all__ = ["Freeway", "FreewayDraws", "FreewayParams", "FreewayState"]

PLAYER_SPEED = 3  # the chicken moves at most once every 3 steps
TIME_LIMIT = 2500
NUM_CARS = 8


class FreewayState(struct.PyTreeNode):
    pos: jax.Array  # int32 (): chicken row, 0-9 (column 4); 9 is the start
    car_x: jax.Array  # int32 (8,): column of the car in row i + 1
    car_timer: jax.Array  # int32 (8,): steps until the car moves (it moves when 0)
    car_speed: jax.Array  # int32 (8,): +-1..5; sign = direction (+ right), size = steps per move
    move_timer: jax.Array  # int32 (): steps until the chicken may move again
    terminate_timer: jax.Array  # int32 (): game clock; the game ends when it drops below 0
    last_action: jax.Array  # int32 (): last action taken, in the full set (sticky actions repeat it)
    time: jax.Array  # int32 (): steps taken in this episode


class FreewayParams(struct.PyTreeNode):
    sticky_action_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    max_steps_in_episode: int = struct.field(default=2500, bounds=(1, None))


class FreewayDraws(struct.PyTreeNode):
    sticky: jax.Array  # float32 (): the action sticks when below sticky_action_prob
    speeds: jax.Array  # int32 (8,): new car speeds 1-5 if the chicken crosses this step
    right: jax.Array  # bool (8,): new car directions if the chicken crosses this step


def _wrap(x: jax.Array) -> jax.Array:
    """Columns -1 and 10 wrap around to 9 and 0 (selects, cheaper than an integer remainder)."""
    return jnp.where(x < 0, 9, jnp.where(x > 9, 0, x))


def _random_cars(key: jax.Array, words: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Eight (speed 1-5, direction) pairs from four uint32 words: 16 bits per car."""
    halves = jnp.concatenate([words, words << 16])  # the top 16 bits of each matter
    right = (halves >> 31) != 0
    fifteen = ((halves << 1) >> 17).astype(jnp.float32) / 32768.0
    speeds = 1 + jnp.minimum(jnp.floor(fifteen * 5.0).astype(jnp.int32), 4)
    return speeds, right


class Freeway(MinAtarEnv):
    """Freeway on MinAtar's 10 x 10 grid (the ``minatar`` package's rules).

    The chicken walks up and down column 4 and may move only once every 3
    steps. Reaching row 0 scores and puts it back in row 9, and gives every car
    a new random speed and direction. A car (one per row 1-8, moving
    horizontally and wrapping around) that meets the chicken sends it back to
    row 9. No difficulty ramping.

    Observation: bool ``(10, 10, 7)``: 0 chicken, 1 car, 2-6 trail of a car
    moving once every 1-5 steps (the cell behind the car: its direction).
    Action: Discrete(3) int32 ``()`` = ``n u d`` with the minimal action set
    (default); Discrete(6) ``n l u r d f`` with ``use_minimal_action_set=False``.
    Sticky actions: with probability ``params.sticky_action_prob`` (0.1) the
    previous action is taken instead of the chosen one.
    Reward: +1.0 each time the chicken reaches the top row.
    Terminated: when the game clock runs out, on the 2501st step (as minatar,
    whose clock starts at 2500 and ends the game when it drops below 0).
    Truncated: after ``params.max_steps_in_episode`` (2500, gymnax's episode
    length) steps; with the defaults an episode is truncated one step before
    the clock would end it.
    Reset: chicken in row 9; cars in column 0 with random speeds 1-5 and
    directions; the chicken's move timer at 3.
    State: :class:`FreewayState` (fields above, with dtype and shape).
    Randomness: the step draws the sticky action and the speeds and
    directions used if the chicken crosses; ``stochastic_step`` is True.
    """

    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_actions = (NOOP, UP, DOWN)

    @property
    def default_params(self) -> FreewayParams:
        return FreewayParams()

    def start(self, key: jax.Array, params: FreewayParams) -> tuple[jax.Array, FreewayState]:
        speeds, right = _random_cars(key, fast_random.bits(key, (4,)))
        zero = jnp.zeros((), jnp.int32)
        state = FreewayState(
            pos=zero + 9,
            car_x=jnp.zeros((NUM_CARS,), jnp.int32),
            car_timer=speeds,
            car_speed=jnp.where(right, speeds, -speeds),
            move_timer=zero + PLAYER_SPEED,
            terminate_timer=zero + TIME_LIMIT,
            last_action=zero,
            time=zero,
        )
        return self.get_obs(state), state

    def draw(self, key: jax.Array, params: FreewayParams) -> FreewayDraws:
        words = fast_random.bits(key, (5,))
        speeds, right = _random_cars(key, words[1:])
        return FreewayDraws(sticky=fast_random.uniform(key), speeds=speeds, right=right)

    def transition(
        self, state: FreewayState, action: Any, draws: FreewayDraws, params: FreewayParams
    ) -> StepOutput:
        a = sticky_action(action, state.last_action, draws.sticky, params.sticky_action_prob, self.action_set)
        can_move = state.move_timer == 0
        up, down = (a == UP) & can_move, (a == DOWN) & can_move
        pos = jnp.where(up, jnp.maximum(state.pos - 1, 0), state.pos)
        pos = jnp.where(down, jnp.minimum(pos + 1, 9), pos)
        move_timer = jnp.where(up | down, PLAYER_SPEED, state.move_timer)
        crossed = pos == 0
        pos = jnp.where(crossed, 9, pos)
        car_timer = jnp.where(crossed, draws.speeds, state.car_timer)
        car_speed = jnp.where(crossed, jnp.where(draws.right, draws.speeds, -draws.speeds), state.car_speed)

        # The chicken is in at most one car's row and only ever goes back to row 9 (no car), so
        # minatar's car-by-car loop is the same as testing every car at once.
        moves = car_timer == 0
        car_x = jnp.where(moves, _wrap(state.car_x + jnp.where(car_speed > 0, 1, -1)), state.car_x)
        in_row = jnp.arange(1, NUM_CARS + 1) == pos
        hit = in_row & ((state.car_x == 4) | (moves & (car_x == 4)))
        pos = jnp.where(jnp.any(hit), 9, pos)
        car_timer = jnp.where(moves, jnp.abs(car_speed), car_timer - 1)

        terminate_timer = state.terminate_timer - 1
        time = state.time + 1
        state = FreewayState(
            pos=pos,
            car_x=car_x,
            car_timer=car_timer,
            car_speed=car_speed,
            move_timer=move_timer - (move_timer > 0),
            terminate_timer=terminate_timer,
            last_action=a,
            time=time,
        )
        terminated = terminate_timer < 0
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, crossed.astype(jnp.float32), terminated, truncated, {}

    def get_obs(self, state: FreewayState) -> jax.Array:
        trail_x = _wrap(state.car_x + jnp.where(state.car_speed > 0, -1, 1))
        size = jnp.abs(state.car_speed)
        trails = [column_per_row(jnp.where(size == k, trail_x, -1)) for k in range(1, 6)]
        return grid([cell_row(state.pos, 4), column_per_row(state.car_x), *trails])
