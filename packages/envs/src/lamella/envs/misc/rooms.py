"""FourRooms-misc: reach a goal cell in Sutton, Precup & Singh's (1999) four-room grid (gymnax's version)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["FOUR_ROOMS_MAP", "FourRooms", "FourRoomsParams", "FourRoomsState"]

# "x" is a wall, " " is floor; 13 x 13 cells.
FOUR_ROOMS_MAP = (
    "xxxxxxxxxxxxx",
    "x     x     x",
    "x     x     x",
    "x           x",
    "x     x     x",
    "x     x     x",
    "xx xxxx     x",
    "x     xxx xxx",
    "x     x     x",
    "x     x     x",
    "x           x",
    "x     x     x",
    "xxxxxxxxxxxxx",
)


class FourRoomsState(struct.PyTreeNode):
    row: jax.Array  # int32 (): agent row (0 at the top)
    col: jax.Array  # int32 (): agent column
    goal_row: jax.Array  # int32 (): goal row
    goal_col: jax.Array  # int32 (): goal column
    time: jax.Array  # int32 (): steps taken in this episode


class FourRoomsParams(struct.PyTreeNode):
    fail_prob: float = struct.field(
        default=1.0 / 3, bounds=(0.0, 1.0)
    )  # probability that the move goes in a uniformly random direction
    resample_init_pos: bool = False  # start cell uniform over free cells (else the fixed start)
    resample_goal_pos: bool = False  # goal uniform over free cells (else the fixed goal)
    max_steps_in_episode: int = struct.field(default=500, bounds=(1, None))


class FourRooms(Environment[FourRoomsState, FourRoomsParams]):
    """Walk through four rooms joined by doorways to a goal cell.

    Follows gymnax's ``FourRooms-misc`` (default, non-visual observation).

    Observation: float32 ``(4,)`` = agent row, agent column, goal row, goal
    column (grid coordinates, 1 .. 11).
    Action: Discrete(4), int32 ``()``: 0 up (row - 1), 1 right (col + 1),
    2 down (row + 1), 3 left (col - 1). With probability
    ``fail_prob * 4 / 3`` the action is replaced by a uniformly random one (so
    a different direction is taken with probability ``fail_prob``). A move into
    a wall leaves the agent in place.
    Reward: 1.0 on the step that lands on the goal, else 0.0.
    Terminated: the agent is on the goal.
    Truncated: after ``max_steps_in_episode`` (500) steps.
    Reset: agent at ``pos_fixed`` (row 4, column 1) and goal at ``goal_fixed``
    (row 8, column 9); with ``params.resample_goal_pos`` the goal is uniform over
    the free cells, and with ``params.resample_init_pos`` the start is uniform
    over the free cells other than the goal.
    State: :class:`FourRoomsState` (``row``, ``col``, ``goal_row``, ``goal_col``,
    ``time``; int32 scalars).

    Args:
        goal_fixed: ``(row, column)`` of the goal when it is not resampled.
        pos_fixed: ``(row, column)`` of the start when it is not resampled.
    """

    def __init__(self, goal_fixed: Sequence[int] = (8, 9), pos_fixed: Sequence[int] = (4, 1)):
        walkable = np.array([[c == " " for c in row] for row in FOUR_ROOMS_MAP])
        self.walkable = walkable
        self.height, self.width = walkable.shape
        for name, cell in (("goal_fixed", goal_fixed), ("pos_fixed", pos_fixed)):
            r, c = (int(v) for v in cell)
            if not (0 <= r < self.height and 0 <= c < self.width and walkable[r, c]):
                raise ValueError(
                    f"FourRooms({name}={tuple(cell)}): must be a free cell (row, column) of the map."
                )
        self.goal_fixed = tuple(int(v) for v in goal_fixed)
        self.pos_fixed = tuple(int(v) for v in pos_fixed)
        # Free cells in row-major order, as flat indices row * width + col.
        self.free_cells = np.flatnonzero(walkable.ravel()).astype(np.int32)

    @property
    def default_params(self) -> FourRoomsParams:
        return FourRoomsParams()

    def reset_env(self, key: jax.Array, params: FourRoomsParams) -> tuple[jax.Array, FourRoomsState]:
        u_goal, u_pos = fast_random.uniform16(key, (2,))
        n = self.free_cells.shape[0]
        free = jnp.asarray(self.free_cells)
        goal_index = jnp.minimum(jnp.floor(u_goal * n).astype(jnp.int32), n - 1)
        sampled_goal = free[goal_index]
        goal = jnp.where(
            params.resample_goal_pos, sampled_goal, self.goal_fixed[0] * self.width + self.goal_fixed[1]
        )
        # Uniform over the other free cells: draw from the first n - 1 and map the goal to the last one.
        pos_index = jnp.minimum(jnp.floor(u_pos * (n - 1)).astype(jnp.int32), n - 2)
        sampled_pos = free[pos_index]
        sampled_pos = jnp.where(sampled_pos == goal, free[n - 1], sampled_pos)
        pos = jnp.where(
            params.resample_init_pos, sampled_pos, self.pos_fixed[0] * self.width + self.pos_fixed[1]
        )
        state = FourRoomsState(
            row=pos // self.width,
            col=pos % self.width,
            goal_row=goal // self.width,
            goal_col=goal % self.width,
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: FourRoomsState, action: Any, params: FourRoomsParams
    ) -> StepOutput:
        u_fail, u_action = fast_random.uniform16(key, (2,))
        random_action = jnp.floor(u_action * 4).astype(jnp.int32)
        action = jnp.where(u_fail < params.fail_prob * 4 / 3, random_action, jnp.asarray(action, jnp.int32))
        row = state.row + (action == 2).astype(jnp.int32) - (action == 0).astype(jnp.int32)
        col = state.col + (action == 1).astype(jnp.int32) - (action == 3).astype(jnp.int32)
        free = jnp.asarray(self.walkable.ravel())[row * self.width + col]
        row = jnp.where(free, row, state.row)
        col = jnp.where(free, col, state.col)
        at_goal = (row == state.goal_row) & (col == state.goal_col)
        time = state.time + 1
        state = dataclasses.replace(state, row=row, col=col, time=time)
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, at_goal.astype(jnp.float32), at_goal, truncated, {}

    def get_obs(self, state: FourRoomsState, params: FourRoomsParams | None = None) -> jax.Array:
        return jnp.stack([state.row, state.col, state.goal_row, state.goal_col]).astype(jnp.float32)

    def observation_space(self, params: FourRoomsParams | None = None) -> spaces.Box:
        return spaces.Box(1.0, float(max(self.height, self.width) - 2), (4,), jnp.float32)

    def action_space(self, params: FourRoomsParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def render(self, state: FourRoomsState, params: FourRoomsParams | None = None) -> jax.Array:
        """The grid: walls dark, goal yellow, agent blue (green when on the goal).

        Shape ``(16 * 13, 16 * 13, 3)`` uint8.
        """
        rows = jnp.arange(self.height)[:, None]
        cols = jnp.arange(self.width)[None, :]
        agent = (rows == state.row) & (cols == state.col)
        goal = (rows == state.goal_row) & (cols == state.goal_col)
        labels = jnp.where(
            agent & goal, 4, jnp.where(agent, 3, jnp.where(goal, 2, jnp.asarray(self.walkable, jnp.int32)))
        )
        colors = [_common.WALL, _common.FLOOR, _common.GOAL, _common.AGENT, _common.GOOD]
        return _common.grid_frame(labels, colors, 16)
