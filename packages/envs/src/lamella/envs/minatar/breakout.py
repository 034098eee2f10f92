"""Breakout-MinAtar: bounce a ball off a paddle to break three rows of bricks."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import struct
from lamella.envs.environment import StepOutput
from lamella.envs.minatar._common import (
    LEFT,
    NOOP,
    RIGHT,
    MinAtarEnv,
    cell_row,
    grid,
    step_uniform,
    sticky_action,
)

__all__ = ["Breakout", "BreakoutDraws", "BreakoutParams", "BreakoutState"]

# Bricks live in rows 1-3 only, so the brick map is a 30-bit mask: bit (row - 1) * 10 + column.
FULL_BRICKS = (1 << 30) - 1


class BreakoutState(struct.PyTreeNode):
    ball_x: jax.Array  # int32 (): ball column, 0-9
    ball_y: jax.Array  # int32 (): ball row, 0-9
    ball_dir: jax.Array  # int32 (): 0 up-left, 1 up-right, 2 down-right, 3 down-left
    pos: jax.Array  # int32 (): paddle column (the paddle is in row 9)
    bricks: jax.Array  # uint32 (): brick mask, bit (row - 1) * 10 + column for rows 1-3
    strike: jax.Array  # bool (): the ball struck a brick on the previous step
    last_x: jax.Array  # int32 (): ball column before the last step (the trail)
    last_y: jax.Array  # int32 (): ball row before the last step
    last_action: jax.Array  # int32 (): last action taken, in the full set (sticky actions repeat it)
    time: jax.Array  # int32 (): steps taken in this episode


class BreakoutParams(struct.PyTreeNode):
    sticky_action_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


class BreakoutDraws(struct.PyTreeNode):
    sticky: jax.Array  # float32 (): uniform in [0, 1); the action sticks when below sticky_action_prob


class Breakout(MinAtarEnv):
    """Breakout on MinAtar's 10 x 10 grid (the ``minatar`` package's rules).

    The paddle moves along row 9; the ball moves diagonally one cell per step,
    reflects off the walls, the ceiling and bricks, and off the paddle (straight
    back when it comes down onto the paddle's column, sideways when the paddle
    is under its next cell). When every brick is gone, the three rows come back
    as the ball reaches the bottom row. No difficulty ramping.

    Observation: bool ``(10, 10, 4)``, rows x columns x channels: 0 paddle,
    1 ball, 2 trail (the ball's previous cell, which shows its direction),
    3 brick.
    Action: Discrete(3) int32 ``()`` = ``n l r`` (no-op, left, right) with the
    minimal action set (default); Discrete(6) ``n l u r d f`` with
    ``use_minimal_action_set=False`` (``u d f`` do nothing).
    Sticky actions: with probability ``params.sticky_action_prob`` (0.1) the
    previous action is taken instead of the chosen one.
    Reward: +1.0 per brick broken.
    Terminated: the ball reaches the bottom row away from the paddle.
    Truncated: after ``params.max_steps_in_episode`` (1000, as gymnax) steps.
    Reset: the ball starts in row 3 at the left wall moving down-right or at
    the right wall moving down-left (a fair coin), the paddle in column 4.
    State: :class:`BreakoutState` (fields above, with dtype and shape).
    Randomness: the step draws one uniform (the sticky action) from its key,
    so ``stochastic_step`` is True.
    """

    channels = ("paddle", "ball", "trail", "brick")
    minimal_actions = (NOOP, LEFT, RIGHT)

    @property
    def default_params(self) -> BreakoutParams:
        return BreakoutParams()

    def start(self, key: jax.Array, params: BreakoutParams) -> tuple[jax.Array, BreakoutState]:
        right = (fast_random.bits(key) & 1) != 0
        state = self._start_state(right)
        # The two possible first observations are constants: a select is cheaper than drawing.
        first_obs = jnp.where(right, self._start_obs[1], self._start_obs[0])
        return first_obs, state

    def _start_state(self, right: jax.Array) -> BreakoutState:
        ball_x = jnp.where(right, 9, 0).astype(jnp.int32)
        zero = jnp.zeros_like(ball_x)
        return BreakoutState(
            ball_x=ball_x,
            ball_y=zero + 3,
            ball_dir=jnp.where(right, 3, 2).astype(jnp.int32),
            pos=zero + 4,
            bricks=jnp.full(jnp.shape(right), FULL_BRICKS, jnp.uint32),
            strike=jnp.zeros_like(right),
            last_x=ball_x,
            last_y=zero + 3,
            last_action=zero,
            time=zero,
        )

    @functools.cached_property
    def _start_obs(self) -> np.ndarray:
        with jax.ensure_compile_time_eval():
            return np.stack([np.asarray(self.get_obs(self._start_state(jnp.bool_(side)))) for side in (0, 1)])

    def draw(self, key: jax.Array, params: BreakoutParams) -> BreakoutDraws:
        return BreakoutDraws(sticky=step_uniform(key))

    def transition(
        self, state: BreakoutState, action: Any, draws: BreakoutDraws, params: BreakoutParams
    ) -> StepOutput:
        a = sticky_action(action, state.last_action, draws.sticky, params.sticky_action_prob, self.action_set)
        pos = jnp.where(a == LEFT, jnp.maximum(state.pos - 1, 0), state.pos)
        pos = jnp.where(a == RIGHT, jnp.minimum(pos + 1, 9), pos)

        d = state.ball_dir
        new_x = state.ball_x + jnp.where((d == 1) | (d == 2), 1, -1)
        new_y = state.ball_y + jnp.where(d <= 1, -1, 1)
        # Side walls: stay in the edge column, flip the horizontal direction (0<->1, 2<->3).
        side = (new_x < 0) | (new_x > 9)
        new_x = jnp.clip(new_x, 0, 9)
        d = jnp.where(side, d ^ 1, d)
        # Ceiling: stay in row 0, flip the vertical direction (0<->3, 1<->2).
        ceiling = new_y < 0
        new_y = jnp.maximum(new_y, 0)
        d = jnp.where(ceiling, 3 - d, d)
        in_brick_rows = (new_y >= 1) & (new_y <= 3)
        bit = jnp.uint32(1) << jnp.clip((new_y - 1) * 10 + new_x, 0, 29).astype(jnp.uint32)
        on_brick = ~ceiling & in_brick_rows & ((state.bricks & bit) != 0)
        # A brick breaks only if the ball did not strike one on the previous step.
        breaks = on_brick & ~state.strike
        bricks = jnp.where(breaks, state.bricks & ~bit, state.bricks)
        new_y = jnp.where(breaks, state.ball_y, new_y)
        d = jnp.where(breaks, 3 - d, d)
        bottom = ~ceiling & ~on_brick & (new_y == 9)
        bricks = jnp.where(bottom & (bricks == 0), jnp.uint32(FULL_BRICKS), bricks)
        straight_back = bottom & (state.ball_x == pos)
        sideways = bottom & ~straight_back & (new_x == pos)
        d = jnp.where(straight_back, 3 - d, d)
        d = jnp.where(sideways, d ^ 2, d)
        new_y = jnp.where(straight_back | sideways, state.ball_y, new_y)
        terminated = bottom & ~straight_back & ~sideways

        time = state.time + 1
        state = BreakoutState(
            ball_x=new_x,
            ball_y=new_y,
            ball_dir=d,
            pos=pos,
            bricks=bricks,
            strike=on_brick,
            last_x=state.ball_x,
            last_y=state.ball_y,
            last_action=a,
            time=time,
        )
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, breaks.astype(jnp.float32), terminated, truncated, {}

    def get_obs(self, state: BreakoutState) -> jax.Array:
        bricks = state.bricks.astype(jnp.int32)
        brick_rows = [(bricks >> (10 * r)) & 0x3FF for r in range(3)]
        none = jnp.zeros((), jnp.int32)
        return grid(
            [
                cell_row(9, state.pos),
                cell_row(state.ball_y, state.ball_x),
                cell_row(state.last_y, state.last_x),
                jnp.stack([none, *brick_rows, *([none] * 6)]),
            ]
        )
