"""Asterix-MinAtar: collect gold and dodge enemies that cross the screen from the sides."""

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
    DOWN,
    LEFT,
    NOOP,
    RIGHT,
    UP,
    MinAtarEnv,
    cell_row,
    column_per_row,
    grid,
    sticky_action,
)

__all__ = ["Asterix", "AsterixDraws", "AsterixParams", "AsterixState"]

RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
NUM_SLOTS = 8  # one entity per row 1-8


class AsterixState(struct.PyTreeNode):
    player_x: jax.Array  # int32 (): player column, 0-9
    player_y: jax.Array  # int32 (): player row, 1-8
    entity_x: jax.Array  # int32 (8,): column of the entity in row i + 1
    entity_right: jax.Array  # bool (8,): it moves right (spawned at column 0) or left (column 9)
    entity_gold: jax.Array  # bool (8,): gold (reward) or enemy (game over)
    entity_alive: jax.Array  # bool (8,): row i + 1 holds an entity
    spawn_speed: jax.Array  # int32 (): steps between spawns (ramps down to 1)
    spawn_timer: jax.Array  # int32 (): steps until the next spawn (spawns at 0)
    move_speed: jax.Array  # int32 (): steps between entity moves (ramps down to 1)
    move_timer: jax.Array  # int32 (): steps until entities move (they move at 0)
    ramp_timer: jax.Array  # int32 (): steps until the next difficulty increase
    ramp_index: jax.Array  # int32 (): difficulty increases so far
    last_action: jax.Array  # int32 (): last action taken, in the full set (sticky actions repeat it)
    time: jax.Array  # int32 (): steps taken in this episode


class AsterixParams(struct.PyTreeNode):
    sticky_action_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    difficulty_ramping: bool = True
    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


class AsterixDraws(struct.PyTreeNode):
    sticky: jax.Array  # float32 (): the action sticks when below sticky_action_prob
    right: jax.Array  # float32 (): a spawned entity moves right when below 1/2
    gold: jax.Array  # float32 (): a spawned entity is gold when below 1/3
    slot: jax.Array  # float32 (): picks the free row: floor(slot * number_free)-th free row


class Asterix(MinAtarEnv):
    """Asterix on MinAtar's 10 x 10 grid (the ``minatar`` package's rules).

    The player moves in four directions (rows 1-8). Every ``spawn_speed``
    steps an entity appears at the left or right edge of a free row (gold with
    probability 1/3, else an enemy) and all entities move one cell every
    ``move_speed`` steps, leaving the grid at the far side. With difficulty
    ramping, every ~100 steps the spawn interval shrinks by one and, every
    other time, the move interval too (both down to 1).

    Observation: bool ``(10, 10, 4)``: 0 player, 1 enemy, 2 trail (the cell
    behind an entity: its direction), 3 gold.
    Action: Discrete(5) int32 ``()`` = ``n l u r d`` with the minimal action
    set (default); Discrete(6) ``n l u r d f`` with ``use_minimal_action_set=False``.
    Sticky actions: with probability ``params.sticky_action_prob`` (0.1) the
    previous action is taken instead of the chosen one.
    Reward: +1.0 per gold collected.
    Terminated: an enemy meets the player.
    Truncated: after ``params.max_steps_in_episode`` (1000, as gymnax) steps.
    Reset: player at (5, 5), no entities, spawn interval 10, move interval 5.
    State: :class:`AsterixState` (fields above, with dtype and shape).
    Params: ``difficulty_ramping`` (True) as minatar's constructor flag.
    Randomness: the step draws the sticky action and the spawn (side, kind,
    row); ``stochastic_step`` is True. The reset is deterministic.
    """

    channels = ("player", "enemy", "trail", "gold")
    minimal_actions = (NOOP, LEFT, UP, RIGHT, DOWN)

    @property
    def default_params(self) -> AsterixParams:
        return AsterixParams()

    def start(self, key: jax.Array, params: AsterixParams) -> tuple[jax.Array, AsterixState]:
        return jnp.asarray(self._start_obs), self._start_state()

    @functools.cached_property
    def _start_obs(self) -> np.ndarray:
        with jax.ensure_compile_time_eval():
            return np.asarray(self.get_obs(self._start_state()))

    def _start_state(self) -> AsterixState:
        zero = jnp.zeros((), jnp.int32)
        none = jnp.zeros((NUM_SLOTS,), bool)
        return AsterixState(
            player_x=zero + 5,
            player_y=zero + 5,
            entity_x=jnp.zeros((NUM_SLOTS,), jnp.int32),
            entity_right=none,
            entity_gold=none,
            entity_alive=none,
            spawn_speed=zero + INIT_SPAWN_SPEED,
            spawn_timer=zero + INIT_SPAWN_SPEED,
            move_speed=zero + INIT_MOVE_INTERVAL,
            move_timer=zero + INIT_MOVE_INTERVAL,
            ramp_timer=zero + RAMP_INTERVAL,
            ramp_index=zero,
            last_action=zero,
            time=zero,
        )

    def draw(self, key: jax.Array, params: AsterixParams) -> AsterixDraws:
        sticky, right, gold, slot = fast_random.uniform(key, (4,))
        return AsterixDraws(sticky=sticky, right=right, gold=gold, slot=slot)

    def transition(
        self, state: AsterixState, action: Any, draws: AsterixDraws, params: AsterixParams
    ) -> StepOutput:
        a = sticky_action(action, state.last_action, draws.sticky, params.sticky_action_prob, self.action_set)
        # Spawn into the floor(u * free)-th free row, if any row is free.
        free = ~state.entity_alive
        number_free = jnp.sum(free, dtype=jnp.int32)
        pick = jnp.minimum(jnp.floor(draws.slot * number_free).astype(jnp.int32), number_free - 1)
        chosen = free & (jnp.cumsum(free, dtype=jnp.int32) - 1 == pick)
        spawn = (state.spawn_timer == 0) & chosen
        spawn_right = draws.right < 0.5
        x = jnp.where(spawn, jnp.where(spawn_right, 0, 9), state.entity_x)
        right = jnp.where(spawn, spawn_right, state.entity_right)
        gold = jnp.where(spawn, draws.gold < 1.0 / 3.0, state.entity_gold)
        alive = state.entity_alive | spawn
        spawn_timer = jnp.where(state.spawn_timer == 0, state.spawn_speed, state.spawn_timer)

        px = jnp.where(a == LEFT, jnp.maximum(state.player_x - 1, 0), state.player_x)
        px = jnp.where(a == RIGHT, jnp.minimum(px + 1, 9), px)
        py = jnp.where(a == UP, jnp.maximum(state.player_y - 1, 1), state.player_y)
        py = jnp.where(a == DOWN, jnp.minimum(py + 1, 8), py)

        in_row = jnp.arange(1, NUM_SLOTS + 1) == py
        meet = alive & in_row & (x == px)
        reward = jnp.sum(meet & gold, dtype=jnp.int32)
        terminated = jnp.any(meet & ~gold)
        alive = alive & ~(meet & gold)
        moves = state.move_timer == 0
        x = jnp.where(moves & alive, x + jnp.where(right, 1, -1), x)
        alive = alive & ((x >= 0) & (x <= 9))
        meet = moves & alive & in_row & (x == px)
        reward = reward + jnp.sum(meet & gold, dtype=jnp.int32)
        terminated = terminated | jnp.any(meet & ~gold)
        alive = alive & ~(meet & gold)
        move_timer = jnp.where(moves, state.move_speed, state.move_timer) - 1
        spawn_timer = spawn_timer - 1

        # Difficulty ramp: count down ramp_timer past 0, then speed up by one notch.
        ramping = params.difficulty_ramping & ((state.spawn_speed > 1) | (state.move_speed > 1))
        counting = state.ramp_timer >= 0
        ramp = ramping & ~counting
        move_speed = jnp.where(
            ramp & (state.move_speed > 1) & (state.ramp_index % 2 == 1),
            state.move_speed - 1,
            state.move_speed,
        )
        spawn_speed = jnp.where(ramp & (state.spawn_speed > 1), state.spawn_speed - 1, state.spawn_speed)
        ramp_timer = jnp.where(
            ramping, jnp.where(counting, state.ramp_timer - 1, RAMP_INTERVAL), state.ramp_timer
        )

        time = state.time + 1
        state = AsterixState(
            player_x=px,
            player_y=py,
            entity_x=x,
            entity_right=right,
            entity_gold=gold,
            entity_alive=alive,
            spawn_speed=spawn_speed,
            spawn_timer=spawn_timer,
            move_speed=move_speed,
            move_timer=move_timer,
            ramp_timer=ramp_timer,
            ramp_index=state.ramp_index + ramp,
            last_action=a,
            time=time,
        )
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward.astype(jnp.float32), terminated, truncated, {}

    def get_obs(self, state: AsterixState) -> jax.Array:
        x = state.entity_x
        back = x + jnp.where(state.entity_right, -1, 1)
        back = jnp.where(state.entity_alive & (back >= 0) & (back <= 9), back, -1)
        return grid(
            [
                cell_row(state.player_y, state.player_x),
                column_per_row(jnp.where(state.entity_alive & ~state.entity_gold, x, -1)),
                column_per_row(back),
                column_per_row(jnp.where(state.entity_alive & state.entity_gold, x, -1)),
            ]
        )
