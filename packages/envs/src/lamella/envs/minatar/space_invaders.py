"""SpaceInvaders-MinAtar: shoot down a descending block of aliens that shoot back."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import struct
from lamella.envs.environment import StepOutput
from lamella.envs.minatar._common import (
    FIRE,
    LEFT,
    NOOP,
    RIGHT,
    MinAtarEnv,
    cell_row,
    grid,
    step_uniform,
    sticky_action,
)

__all__ = ["SpaceInvaders", "SpaceInvadersDraws", "SpaceInvadersParams", "SpaceInvadersState"]

SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
FULL_ROW = (1 << 10) - 1
# A fresh wave: rows 0-3, columns 2-7.
WAVE = np.array([0b0011111100] * 4 + [0] * 6, np.int32)
_COLUMNS = np.arange(10, dtype=np.int32)


class SpaceInvadersState(struct.PyTreeNode):
    pos: jax.Array  # int32 (): cannon column (the cannon is in row 9)
    aliens: jax.Array  # int32 (10,): alien rows as 10-bit masks, bit c = column c
    friendly_bullets: jax.Array  # int32 (10,): the cannon's bullets, row masks
    enemy_bullets: jax.Array  # int32 (10,): the aliens' bullets, row masks
    alien_dir: jax.Array  # int32 (): -1 moving left, +1 moving right
    enemy_move_interval: jax.Array  # int32 (): steps between alien moves for a full wave (ramps 12 -> 6)
    alien_move_timer: jax.Array  # int32 (): steps until the aliens move (at 0)
    alien_shot_timer: jax.Array  # int32 (): steps until the nearest alien shoots (at 0)
    shot_timer: jax.Array  # int32 (): steps until the cannon can fire again
    ramp_index: jax.Array  # int32 (): waves cleared with ramping so far
    last_action: jax.Array  # int32 (): last action taken, in the full set (sticky actions repeat it)
    time: jax.Array  # int32 (): steps taken in this episode


class SpaceInvadersParams(struct.PyTreeNode):
    sticky_action_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    difficulty_ramping: bool = True
    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


class SpaceInvadersDraws(struct.PyTreeNode):
    sticky: jax.Array  # float32 (): the action sticks when below sticky_action_prob


def _popcount(rows: jax.Array) -> jax.Array:
    return jnp.sum(jax.lax.population_count(rows), dtype=jnp.int32)


def _bit(rows: jax.Array, row: int, column: jax.Array) -> jax.Array:
    return ((rows[row] >> column) & 1) != 0


class SpaceInvaders(MinAtarEnv):
    """Space Invaders on MinAtar's 10 x 10 grid (the ``minatar`` package's rules).

    The cannon moves along row 9 and fires upward (once every 5 steps). A 4 x 6
    block of aliens moves sideways, and down one row (reversing) when it meets
    a wall; it moves every ``min(aliens left, interval)`` steps, so it speeds
    up as it thins. Every 10 steps the alien nearest the cannon's column
    shoots down. A cleared wave is replaced by a fresh one; with difficulty
    ramping each new wave's interval is one step shorter (12 down to 6).

    Observation: bool ``(10, 10, 6)``: 0 cannon, 1 alien, 2 alien moving left,
    3 alien moving right, 4 friendly bullet, 5 enemy bullet.
    Action: Discrete(4) int32 ``()`` = ``n l r f`` with the minimal action set
    (default); Discrete(6) ``n l u r d f`` with ``use_minimal_action_set=False``.
    Sticky actions: with probability ``params.sticky_action_prob`` (0.1) the
    previous action is taken instead of the chosen one.
    Reward: +1.0 per alien shot.
    Terminated: an alien or an enemy bullet reaches the cannon, or the aliens
    reach the bottom row and must move down.
    Truncated: after ``params.max_steps_in_episode`` (1000, as gymnax) steps.
    Reset: cannon in column 5, aliens in rows 0-3 and columns 2-7 moving left.
    State: :class:`SpaceInvadersState` (fields above, with dtype and shape).
    Params: ``difficulty_ramping`` (True) as minatar's constructor flag.
    Randomness: only the sticky action (the game itself is deterministic);
    ``stochastic_step`` is True.
    """

    channels = ("cannon", "alien", "alien_left", "alien_right", "friendly_bullet", "enemy_bullet")
    minimal_actions = (NOOP, LEFT, RIGHT, FIRE)
    # Measured (benchmarks/envs_throughput.py, interleaved): storing the new state and the row
    # masks once costs SpaceInvaders more than XLA's recomputation: its masks are state fields
    # read as they are, and its step is short. Without both stores: pattern a 5.8x gymnax instead
    # of 4.6x, b 3.6x instead of 3.2x, c 17x instead of 9.6x.
    store_state_once = False

    @property
    def default_params(self) -> SpaceInvadersParams:
        return SpaceInvadersParams()

    def start(self, key: jax.Array, params: SpaceInvadersParams) -> tuple[jax.Array, SpaceInvadersState]:
        return jnp.asarray(self._start_obs), self._start_state()

    @functools.cached_property
    def _start_obs(self) -> np.ndarray:
        with jax.ensure_compile_time_eval():
            return np.asarray(self.get_obs(self._start_state()))

    def _start_state(self) -> SpaceInvadersState:
        zero = jnp.zeros((), jnp.int32)
        empty = jnp.zeros((10,), jnp.int32)
        return SpaceInvadersState(
            pos=zero + 5,
            aliens=jnp.asarray(WAVE),
            friendly_bullets=empty,
            enemy_bullets=empty,
            alien_dir=zero - 1,
            enemy_move_interval=zero + ENEMY_MOVE_INTERVAL,
            alien_move_timer=zero + ENEMY_MOVE_INTERVAL,
            alien_shot_timer=zero + ENEMY_SHOT_INTERVAL,
            shot_timer=zero,
            ramp_index=zero,
            last_action=zero,
            time=zero,
        )

    def draw(self, key: jax.Array, params: SpaceInvadersParams) -> SpaceInvadersDraws:
        return SpaceInvadersDraws(sticky=step_uniform(key))

    def transition(
        self, state: SpaceInvadersState, action: Any, draws: SpaceInvadersDraws, params: SpaceInvadersParams
    ) -> StepOutput:
        a = sticky_action(action, state.last_action, draws.sticky, params.sticky_action_prob, self.action_set)
        fire = (a == FIRE) & (state.shot_timer == 0)
        pos = jnp.where(a == LEFT, jnp.maximum(state.pos - 1, 0), state.pos)
        pos = jnp.where(a == RIGHT, jnp.minimum(pos + 1, 9), pos)
        shot_timer = jnp.where(fire, SHOT_COOL_DOWN, state.shot_timer)
        cannon_bit = jnp.int32(1) << pos
        # A new bullet enters row 9 and everything moves up one row (row 0 leaves the grid).
        bottom = state.friendly_bullets[9] | jnp.where(fire, cannon_bit, 0)
        friendly = jnp.concatenate([state.friendly_bullets[1:9], bottom[None], jnp.zeros((1,), jnp.int32)])
        enemy = jnp.concatenate([jnp.zeros((1,), jnp.int32), state.enemy_bullets[:9]])
        terminated = (enemy[9] & cannon_bit) != 0
        aliens = state.aliens
        terminated |= (aliens[9] & cannon_bit) != 0

        moves = state.alien_move_timer == 0
        count = _popcount(aliens)
        occupied = jnp.bitwise_or.reduce(aliens)
        left_wall = ((occupied & 1) != 0) & (state.alien_dir < 0)
        right_wall = (((occupied >> 9) & 1) != 0) & (state.alien_dir > 0)
        at_wall = left_wall | right_wall
        down = moves & at_wall
        sideways = moves & ~at_wall
        terminated |= down & (aliens[9] != 0)
        shifted_down = jnp.roll(aliens, 1)
        shifted_side = jnp.where(
            state.alien_dir > 0,
            ((aliens << 1) | (aliens >> 9)) & FULL_ROW,
            ((aliens >> 1) | (aliens << 9)) & FULL_ROW,
        )
        aliens = jnp.where(down, shifted_down, jnp.where(sideways, shifted_side, aliens))
        alien_dir = jnp.where(down, -state.alien_dir, state.alien_dir)
        alien_move_timer = jnp.where(
            moves, jnp.minimum(count, state.enemy_move_interval), state.alien_move_timer
        )
        terminated |= moves & ((aliens[9] & cannon_bit) != 0)

        # The alien nearest the cannon's column (ties: the left column) shoots from its lowest cell.
        shoots = state.alien_shot_timer == 0
        occupied = jnp.bitwise_or.reduce(aliens)
        has = ((occupied >> _COLUMNS) & 1) != 0
        order = jnp.abs(_COLUMNS - pos) * 16 + _COLUMNS
        column = jnp.argmin(jnp.where(has, order, 1 << 20))
        in_column = ((aliens >> column) & 1) != 0
        row = 9 - jnp.argmax(in_column[::-1])
        enemy = enemy | jnp.where(shoots & (jnp.arange(10) == row), jnp.int32(1) << column, 0)
        alien_shot_timer = jnp.where(shoots, ENEMY_SHOT_INTERVAL, state.alien_shot_timer)

        kills = aliens & friendly
        reward = _popcount(kills)
        aliens = aliens & ~kills
        friendly = friendly & ~kills

        cleared = jnp.all(aliens == 0)
        ramp = cleared & (state.enemy_move_interval > 6) & params.difficulty_ramping
        aliens = jnp.where(cleared, jnp.asarray(WAVE), aliens)
        time = state.time + 1
        state = SpaceInvadersState(
            pos=pos,
            aliens=aliens,
            friendly_bullets=friendly,
            enemy_bullets=enemy,
            alien_dir=alien_dir,
            enemy_move_interval=state.enemy_move_interval - ramp,
            alien_move_timer=alien_move_timer - 1,
            alien_shot_timer=alien_shot_timer - 1,
            shot_timer=shot_timer - (shot_timer > 0),
            ramp_index=state.ramp_index + ramp,
            last_action=a,
            time=time,
        )
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward.astype(jnp.float32), terminated, truncated, {}

    def get_obs(self, state: SpaceInvadersState) -> jax.Array:
        left = state.alien_dir < 0
        return grid(
            [
                cell_row(9, state.pos),
                state.aliens,
                jnp.where(left, state.aliens, 0),
                jnp.where(left, 0, state.aliens),
                state.friendly_bullets,
                state.enemy_bullets,
            ],
            store_masks=False,
        )
