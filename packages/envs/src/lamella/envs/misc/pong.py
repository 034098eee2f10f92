"""Pong-misc: a one-player Pong on a small pixel grid (gymnax's version of BlackHC's batch_pong_poc)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lamella.envs import spaces, struct
from lamella.envs.classic_control._once import computed_once as stored_once
from lamella.envs.environment import Environment, StepOutput

__all__ = ["Pong", "PongParams", "PongState"]


class PongState(struct.PyTreeNode):
    left_paddle: jax.Array  # float32 (): row of the agent's paddle centre (column 0)
    right_paddle: jax.Array  # float32 (): row of the opponent's paddle centre (column width - 1)
    ball_row: jax.Array  # float32 (): ball row (0 at the top; may leave the grid at the top)
    ball_col: jax.Array  # float32 (): ball column
    last_ball_row: jax.Array  # float32 (): ball row one step earlier
    last_ball_col: jax.Array  # float32 (): ball column one step earlier
    vel_row: jax.Array  # int32 (): ball rows per step
    vel_col: jax.Array  # int32 (): ball columns per step
    time: jax.Array  # int32 (): steps taken in this episode


class PongParams(struct.PyTreeNode):
    ball_max_y_speed: int = 3  # bound on |vel_row| after a paddle hit
    paddle_y_speed: int = 1  # rows a paddle moves per step
    ball_x_speed: int = 1  # the ball's initial column speed
    use_ai_policy: bool = True  # opponent follows the ball (else it copies the agent's move)
    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


class Pong(Environment[PongState, PongParams]):
    """Keep the ball in play with the left paddle against a ball-following opponent.

    Follows gymnax's ``Pong-misc`` move for move, including its quirks: only the
    bottom border (row ``height``) reflects the ball, so a ball moving to
    smaller rows leaves the grid at the top and stays out until it passes a
    paddle column; the right paddle returns the ball from column
    ``width - 2``, the left one from column 1.

    Observation: float32 ``(height, width, 3)``, 0/1 pixels: channel 0 the
    paddles (``2 * paddle_half_height + 1`` rows in columns 0 and
    ``width - 1``), channel 1 the ball, channel 2 the ball one step earlier
    (positions floored and clipped into the grid).
    Action: Discrete(3), int32 ``()``: 0 stay, 1 paddle up (row - speed), 2
    paddle down (row + speed); paddle centres stay within
    ``[paddle_half_height, height - paddle_half_height - 1]``.
    Opponent: with ``params.use_ai_policy`` it moves one step towards the
    ball's row (down on ties), else it makes the agent's move.
    Ball: moves by its velocity; when it passes the bottom it is reflected
    (``row = 2 (height - 1) - row``, ``vel_row = -vel_row``); a paddle that is
    within reach reverses ``vel_col`` and adds the ball's offset from the paddle
    centre divided by ``paddle_half_height`` to ``vel_row`` (rounded, clipped to
    ``ball_max_y_speed``).
    Reward: 1.0 on every step the ball stays in play, 0.0 on the step it leaves.
    Terminated: the ball's column is below 0 or at least ``width`` (either side
    missed).
    Truncated: after ``max_steps_in_episode`` (1000) steps.
    Reset: paddles at row ``height / 2``, ball at ``(height / 2, width / 2)``
    moving ``(0, ball_x_speed)``. Neither reset nor step uses its key.
    State: :class:`PongState`.

    Args:
        width: grid columns (static).
        height: grid rows (static).
        paddle_half_height: paddles span ``2 * paddle_half_height + 1`` rows.
    """

    stochastic_step = False

    def __init__(self, width: int = 40, height: int = 30, paddle_half_height: int = 2):
        if int(width) < 4 or int(height) < 2 * int(paddle_half_height) + 1 or int(paddle_half_height) < 1:
            raise ValueError(
                f"Pong(width={width}, height={height}, paddle_half_height={paddle_half_height}): need "
                "width >= 4, paddle_half_height >= 1 and height >= 2 * paddle_half_height + 1."
            )
        self.width, self.height, self.paddle_half_height = int(width), int(height), int(paddle_half_height)

    @property
    def default_params(self) -> PongParams:
        return PongParams()

    def reset_env(self, key: jax.Array, params: PongParams) -> tuple[jax.Array, PongState]:
        middle_row = jnp.full((), self.height / 2, jnp.float32)
        middle_col = jnp.full((), self.width / 2, jnp.float32)
        state = PongState(
            left_paddle=middle_row,
            right_paddle=middle_row,
            ball_row=middle_row,
            ball_col=middle_col,
            last_ball_row=middle_row,
            last_ball_col=middle_col,
            vel_row=jnp.zeros((), jnp.int32),
            vel_col=jnp.asarray(params.ball_x_speed, jnp.int32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: PongState, action: Any, params: PongParams) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        half = self.paddle_half_height
        top, bottom = half, self.height - half - 1
        speed = jnp.asarray(params.paddle_y_speed, jnp.int32)
        move = ((action == 2).astype(jnp.int32) - (action == 1).astype(jnp.int32)) * speed

        left = jnp.clip(state.left_paddle.astype(jnp.int32) + move, top, bottom)
        right_copy = jnp.clip(state.right_paddle.astype(jnp.int32) + move, top, bottom)
        # The opponent compares the ball's distance to the paddle centre one step down and one step up.
        down_gap = jnp.abs(state.ball_row - jnp.clip(state.right_paddle + speed, top, bottom))
        up_gap = jnp.abs(state.ball_row - jnp.clip(state.right_paddle - speed, top, bottom))
        ai_move = jnp.where(up_gap < down_gap, -speed, speed)
        right_ai = jnp.clip(state.right_paddle.astype(jnp.int32) + ai_move, top, bottom)
        left_paddle = left.astype(jnp.float32)
        right_paddle = jnp.where(params.use_ai_policy, right_ai, right_copy).astype(jnp.float32)
        # Both paddles are read by the hits, the ball's new column and velocities, and the state's
        # selects; stored once, the opponent's move and the clips behind them are not recomputed
        # in each of those kernels (pattern c of benchmarks/envs_throughput.py on a 2-core Xeon:
        # 1.25-1.29x gymnax -> 9.1-9.6x; a and b unchanged).
        left_paddle, right_paddle = stored_once(state.time, left_paddle, right_paddle)

        row = state.ball_row + state.vel_row
        col = state.ball_col + state.vel_col
        bounce = row >= self.height
        row = jnp.where(bounce, 2.0 * (self.height - 1) - row, row)
        vel_row = jnp.where(bounce, -state.vel_row, state.vel_row)
        vel_col = state.vel_col

        max_speed = params.ball_max_y_speed
        left_offset = row - left_paddle
        right_offset = row - right_paddle
        left_x = 2.0 - col
        right_x = 2.0 * (self.width - 2) - col
        left_hit = (left_x >= 1) & (jnp.abs(left_offset) <= half)
        right_hit = (right_x < self.width - 2) & (jnp.abs(right_offset) < half + 1)
        col_after_left = jnp.where(left_hit, left_x, col)
        vel_col = jnp.where(left_hit, -vel_col, vel_col)
        spun = jnp.round(jnp.clip(vel_row.astype(jnp.float32) + left_offset / half, -max_speed, max_speed))
        vel_row = jnp.where(left_hit, spun.astype(jnp.int32), vel_row)
        col = jnp.where(right_hit, right_x, col_after_left)
        # The ball's column decides `terminated`, so the reward, AutoReset's `done` and its select
        # of the column all read it; stored once, the step behind it (both paddles, both hits) is
        # not recomputed in each of them (pattern c of benchmarks/envs_throughput.py: 1.15-1.35x).
        (col,) = stored_once(state.time, col)
        vel_col = jnp.where(right_hit, -vel_col, vel_col)
        spun = jnp.round(jnp.clip(vel_row.astype(jnp.float32) + right_offset / half, -max_speed, max_speed))
        vel_row = jnp.where(right_hit, spun.astype(jnp.int32), vel_row)

        state = PongState(
            left_paddle=left_paddle,
            right_paddle=right_paddle,
            ball_row=row,
            ball_col=col,
            last_ball_row=state.ball_row,
            last_ball_col=state.ball_col,
            vel_row=vel_row,
            vel_col=vel_col,
            time=state.time + 1,
        )
        terminated = (col < 0) | (col >= self.width)
        reward = 1.0 - terminated.astype(jnp.float32)
        truncated = state.time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward, terminated, truncated, {}

    def _cell(self, row: jax.Array, col: jax.Array) -> tuple[jax.Array, jax.Array]:
        r = jnp.clip(jnp.floor(row), 0, self.height - 1).astype(jnp.int32)
        c = jnp.clip(jnp.floor(col), 0, self.width - 1).astype(jnp.int32)
        return r, c

    def _layers(self, state: PongState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Boolean ``(height, width)`` masks: paddles, ball, last ball."""
        rows = jnp.arange(self.height, dtype=jnp.int32)[:, None]
        cols = jnp.arange(self.width, dtype=jnp.int32)[None, :]
        half = self.paddle_half_height

        def paddle(centre: jax.Array, column: int) -> jax.Array:
            c = jnp.floor(centre).astype(jnp.int32)
            lo = jnp.clip(c - half, 0, self.height - 1)
            hi = jnp.clip(c + half, 0, self.height - 1)
            return (rows >= lo) & (rows <= hi) & (cols == column)

        paddles = paddle(state.left_paddle, 0) | paddle(state.right_paddle, self.width - 1)
        r, c = self._cell(state.ball_row, state.ball_col)
        r_last, c_last = self._cell(state.last_ball_row, state.last_ball_col)
        ball = (rows == r) & (cols == c)
        last_ball = (rows == r_last) & (cols == c_last)
        return paddles, ball, last_ball

    def get_obs(self, state: PongState, params: PongParams | None = None) -> jax.Array:
        # One elementwise pass over the image: each cell compares its row, column and channel with
        # eight integers per env (the paddles' row ranges, the ball's and the last ball's cells),
        # so nothing is loaded per cell but those (storing the eight once gains nothing). Stored
        # row and column masks read through broadcasts (ours before) cost 1.1-1.25x this in the
        # benchmark's patterns a and b; a scatter into zeros (gymnax's way) writes the image once
        # to clear it, then scatters, then selects it with the reset's.
        paddles, ball, last_ball = (layer[..., None] for layer in self._layers(state))
        channel = jnp.arange(3, dtype=jnp.int32)
        return jnp.where(channel == 0, paddles, jnp.where(channel == 1, ball, last_ball)).astype(jnp.float32)

    def observation_of(self, state: PongState, params: PongParams | None = None) -> jax.Array:
        """The observation of ``state`` (``AutoReset`` builds one from the selected state)."""
        return self.get_obs(state, params)

    def observation_space(self, params: PongParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.height, self.width, 3), jnp.float32)

    def action_space(self, params: PongParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def render(self, state: PongState, params: PongParams | None = None) -> jax.Array:
        """The grid at 8 pixels per cell: paddles white, ball orange, last ball dim orange, on dark blue.

        Shape ``(8 * height, 8 * width, 3)`` uint8.
        """
        paddles, ball, last_ball = self._layers(state)
        labels = jnp.where(paddles, 3, jnp.where(ball, 2, jnp.where(last_ball, 1, 0)))
        table = jnp.asarray([(16, 24, 48), (120, 70, 30), (250, 150, 40), (240, 240, 240)], jnp.uint8)
        cells = table[labels]
        return jnp.repeat(jnp.repeat(cells, 8, axis=0), 8, axis=1)
