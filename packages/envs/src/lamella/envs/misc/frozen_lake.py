"""FrozenLake-misc: cross a frozen lake from start to goal without falling into a hole (gymnasium's FrozenLake)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["FROZEN_LAKE_MAPS", "FrozenLake", "FrozenLakeParams", "FrozenLakeState"]

START, FROZEN, HOLE, GOAL = range(4)

FROZEN_LAKE_MAPS = {
    "4x4": ("SFFF", "FHFH", "FFFH", "HFFG"),
    "8x8": (
        "SFFFFFFF",
        "FFFFFFFF",
        "FFFHFFFF",
        "FFFFFHFF",
        "FFFHFFFF",
        "FHHFFFHF",
        "FHFFHFHF",
        "FFFHFFFG",
    ),
}


class FrozenLakeState(struct.PyTreeNode):
    position: jax.Array  # int32 (): agent cell, row * ncol + col
    time: jax.Array  # int32 (): steps taken in this episode


class FrozenLakeParams(struct.PyTreeNode):
    # 100 for 4x4 maps, 200 for 8x8 (gymnasium's limits)
    max_steps_in_episode: int = struct.field(default=100, bounds=(1, None))


class FrozenLake(Environment[FrozenLakeState, FrozenLakeParams]):
    """Walk on a grid of frozen tiles (F) from the start (S) to the goal (G); holes (H) end the episode.

    Follows gymnax's ``FrozenLake-misc``, which follows gymnasium's
    ``FrozenLake-v1`` (maps, dynamics, rewards and time limits).

    Observation: int32 ``()``, the agent's cell ``row * ncol + col``
    (Discrete(nrow * ncol)).
    Action: Discrete(4), int32 ``()``: 0 left, 1 down, 2 right, 3 up; moves
    off the grid leave the agent in place.
    Slippery (default): the intended move is taken with probability
    ``success_rate`` (1/3); otherwise one of the two perpendicular moves,
    each with probability ``(1 - success_rate) / 2`` (drawn from the step key).
    Reward: ``reward_schedule`` = (goal, hole, frozen) = (1, 0, 0) by default,
    for the tile landed on.
    Terminated: on landing on a hole or the goal.
    Truncated: after ``max_steps_in_episode`` steps (100 for 4x4, 200 for 8x8).
    Reset: the agent on the start tile (deterministic).
    Info: ``"p"``, float32 ``()``: the probability of the move that was taken.
    State: :class:`FrozenLakeState`.

    Args:
        desc: the map as rows of S/F/H/G characters (one S, one G); overrides
            ``map_name``.
        map_name: ``"4x4"`` or ``"8x8"`` when ``desc`` is None.
        is_slippery: whether moves slip (static; a non-slippery step ignores its key).
        success_rate: probability of the intended move when slippery, in [0, 1].
        reward_schedule: rewards for landing on (goal, hole, frozen or start).
    """

    def __init__(
        self,
        desc: Sequence[str] | None = None,
        map_name: str = "4x4",
        is_slippery: bool = True,
        success_rate: float = 1.0 / 3.0,
        reward_schedule: Sequence[float] = (1.0, 0.0, 0.0),
    ):
        if desc is None:
            if map_name not in FROZEN_LAKE_MAPS:
                raise ValueError(f"FrozenLake(map_name={map_name!r}): use '4x4' or '8x8', or pass desc.")
            desc = FROZEN_LAKE_MAPS[map_name]
        rows = tuple(desc)
        if not rows or not rows[0] or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError(
                f"FrozenLake(desc={rows!r}): the map must be a non-empty rectangle of equal rows."
            )
        tiles = {"S": START, "F": FROZEN, "H": HOLE, "G": GOAL}
        if any(c not in tiles for r in rows for c in r):
            raise ValueError(f"FrozenLake(desc={rows!r}): only S, F, H and G tiles are allowed.")
        text = "".join(rows)
        if text.count("S") != 1 or text.count("G") != 1:
            raise ValueError(f"FrozenLake(desc={rows!r}): the map needs exactly one S and one G.")
        if not 0.0 <= float(success_rate) <= 1.0:
            raise ValueError(f"FrozenLake(success_rate={success_rate}): must be in [0, 1].")
        if len(tuple(reward_schedule)) != 3:
            raise ValueError(
                f"FrozenLake(reward_schedule={reward_schedule}): give three rewards (goal, hole, frozen)."
            )
        self.desc = np.array([[tiles[c] for c in r] for r in rows], np.int32)
        self.nrow, self.ncol = self.desc.shape
        self.n_states = self.nrow * self.ncol
        self.start = int(text.index("S"))
        self.is_slippery = bool(is_slippery)
        self.stochastic_step = self.is_slippery  # type: ignore[misc]
        self.success_rate = float(success_rate)
        self.reward_schedule = tuple(float(r) for r in reward_schedule)
        goal_reward, hole_reward, frozen_reward = self.reward_schedule
        flat = self.desc.ravel()
        self._tile_reward = np.where(
            flat == GOAL, goal_reward, np.where(flat == HOLE, hole_reward, frozen_reward)
        )
        self._tile_reward = self._tile_reward.astype(np.float32)
        self._tile_ends = (flat == GOAL) | (flat == HOLE)
        # next cell for every (cell, move): index cell * 4 + move.
        moves = ((0, -1), (1, 0), (0, 1), (-1, 0))
        self._next = np.array(
            [
                min(max(r + dr, 0), self.nrow - 1) * self.ncol + min(max(c + dc, 0), self.ncol - 1)
                for r in range(self.nrow)
                for c in range(self.ncol)
                for dr, dc in moves
            ],
            np.int32,
        )

    @property
    def default_params(self) -> FrozenLakeParams:
        return FrozenLakeParams(max_steps_in_episode=200 if self.desc.shape == (8, 8) else 100)

    def reset_env(self, key: jax.Array, params: FrozenLakeParams) -> tuple[jax.Array, FrozenLakeState]:
        state = FrozenLakeState(jnp.full((), self.start, jnp.int32), jnp.zeros((), jnp.int32))
        return state.position, state

    def step_env(
        self, key: jax.Array, state: FrozenLakeState, action: Any, params: FrozenLakeParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        if self.is_slippery:
            u_success, u_side = fast_random.uniform16(key, (2,))
            side = jnp.where(u_side < 0.5, 3, 1)  # (action - 1) % 4 or (action + 1) % 4
            success = u_success < self.success_rate
            move = jnp.where(success, action, (action + side) % 4)
            slip_p = (1.0 - self.success_rate) / 2.0
            prob = jnp.where(move == action, self.success_rate, slip_p).astype(jnp.float32)
        else:
            move = action
            prob = jnp.ones((), jnp.float32)
        position = jnp.asarray(self._next)[state.position * 4 + move]
        reward = jnp.asarray(self._tile_reward)[position]
        terminated = jnp.asarray(self._tile_ends)[position]
        time = state.time + 1
        truncated = time >= params.max_steps_in_episode
        return position, FrozenLakeState(position, time), reward, terminated, truncated, {"p": prob}

    def observation_space(self, params: FrozenLakeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.n_states)

    def action_space(self, params: FrozenLakeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def render(self, state: FrozenLakeState, params: FrozenLakeParams | None = None) -> jax.Array:
        """The lake: frozen light blue, holes dark blue, start grey, goal green, agent red.

        Shape ``(32 * nrow, 32 * ncol, 3)`` uint8.
        """
        cells = jnp.arange(self.n_states).reshape(self.nrow, self.ncol)
        labels = jnp.where(cells == state.position, 4, jnp.asarray(self.desc))
        colors = [(190, 190, 200), (200, 230, 250), (30, 60, 120), _common.GOOD, _common.BAD]
        return _common.grid_frame(labels, colors, 32)
