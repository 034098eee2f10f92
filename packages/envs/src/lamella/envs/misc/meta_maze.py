"""MetaMaze-misc: a grid maze with a hidden goal; reaching it teleports the agent (Miconi et al. 2019)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.misc import _common

__all__ = ["MetaMaze", "MetaMazeParams", "MetaMazeState", "maze_layout"]


class MetaMazeState(struct.PyTreeNode):
    row: jax.Array  # int32 (): agent row (0 at the top)
    col: jax.Array  # int32 (): agent column
    goal_row: jax.Array  # int32 (): goal row
    goal_col: jax.Array  # int32 (): goal column
    last_action: jax.Array  # int32 (): action of the last step (0 after a reset)
    last_reward: jax.Array  # float32 (): reward of the last step (0 after a reset)
    time: jax.Array  # int32 (): steps taken in this episode


class MetaMazeParams(struct.PyTreeNode):
    reward: float = 10.0  # reward for reaching the goal
    punishment: float = 0.0  # reward added for bumping into a wall
    normalize_time: bool = False  # time entry as 2 * t / 100 - 1 instead of t
    max_steps_in_episode: int = struct.field(default=200, bounds=(1, None))


def maze_layout(maze_size: int, rf_size: int) -> np.ndarray:
    """Boolean ``(maze_size + rf_size - 1,) * 2`` map, True on floor.

    Every even maze row is open; every odd one has a wall on every other
    cell; ``(rf_size - 1) / 2`` wall cells pad the border so the receptive
    field never leaves the map.
    """
    pad = (rf_size - 1) // 2
    side = maze_size + 2 * pad
    rows = [side * "x"] * pad
    for r in range(maze_size):
        if r % 2 == 0:
            rows.append(pad * "x" + maze_size * " " + pad * "x")
        else:
            rows.append(pad * "x" + ((maze_size + 1) // 2) * " x" + (pad - 1) * "x")
    rows += [side * "x"] * pad
    return np.array([[c == " " for c in row] for row in rows])


class MetaMaze(Environment[MetaMazeState, MetaMazeParams]):
    """Find a goal cell, over and over: each time it is reached the agent is teleported.

    Follows gymnax's ``MetaMaze-misc``. The goal is drawn once per episode and
    is not observed; the agent sees only the walls around it, its last action
    and reward, and the time, so finding the goal again after each teleport is
    a meta-learning problem.

    Observation: float32 ``(rf_size ** 2 + 6,)`` = the ``rf_size x rf_size``
    window of the wall map centred on the agent (1.0 for a wall, row-major),
    one-hot last action (4), last reward, and time (``t``, or ``2 * t / 100 - 1``
    with ``params.normalize_time``).
    Action: Discrete(4), int32 ``()``: 0 up, 1 right, 2 down, 3 left; a move
    into a wall leaves the agent in place.
    Reward: ``params.reward`` on the step that lands on the goal, plus
    ``params.punishment`` on a step that bumps into a wall.
    After the goal is reached the agent moves to a cell drawn uniformly from
    all free cells (the goal included), from the step key.
    Terminated: only when that teleport lands on the goal itself (gymnax checks
    "agent on goal" after the teleport; probability 1 / number of free cells
    per goal reached).
    Truncated: after ``max_steps_in_episode`` (200) steps.
    Reset: agent at the maze's centre cell, goal uniform over the free cells.
    State: :class:`MetaMazeState`.

    Args:
        maze_size: side of the maze without padding (odd).
        rf_size: side of the observed window (odd, >= 3).
    """

    def __init__(self, maze_size: int = 9, rf_size: int = 3):
        if int(maze_size) % 2 == 0 or int(maze_size) < 1:
            raise ValueError(f"MetaMaze(maze_size={maze_size}): must be odd and positive.")
        if int(rf_size) % 2 == 0 or int(rf_size) < 3:
            raise ValueError(f"MetaMaze(rf_size={rf_size}): must be odd and >= 3.")
        self.maze_size, self.rf_size = int(maze_size), int(rf_size)
        self.walkable = maze_layout(self.maze_size, self.rf_size)
        self.side = self.walkable.shape[0]
        pad = (self.rf_size - 1) // 2
        # gymnax's centre cell: int((side - 1) / 2 + pad - 1).
        self.center = int((self.side - 1) / 2 + pad - 1)
        self.free_cells = np.flatnonzero(self.walkable.ravel()).astype(np.int32)
        # The observed wall window of every cell, indexed by row * side + col.
        walls = np.pad((~self.walkable).astype(np.float32), pad, constant_values=1.0)
        self.windows = np.stack(
            [
                walls[r : r + self.rf_size, c : c + self.rf_size].ravel()
                for r in range(self.side)
                for c in range(self.side)
            ]
        )

    @property
    def default_params(self) -> MetaMazeParams:
        return MetaMazeParams()

    def reset_env(self, key: jax.Array, params: MetaMazeParams) -> tuple[jax.Array, MetaMazeState]:
        goal = self._random_free_cell(fast_random.uniform16(key))
        state = MetaMazeState(
            row=jnp.full((), self.center, jnp.int32),
            col=jnp.full((), self.center, jnp.int32),
            goal_row=goal // self.side,
            goal_col=goal % self.side,
            last_action=jnp.zeros((), jnp.int32),
            last_reward=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state, params), state

    def _random_free_cell(self, u: jax.Array) -> jax.Array:
        n = self.free_cells.shape[0]
        return jnp.asarray(self.free_cells)[jnp.minimum(jnp.floor(u * n).astype(jnp.int32), n - 1)]

    def step_env(
        self, key: jax.Array, state: MetaMazeState, action: Any, params: MetaMazeParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        row = state.row + (action == 2).astype(jnp.int32) - (action == 0).astype(jnp.int32)
        col = state.col + (action == 1).astype(jnp.int32) - (action == 3).astype(jnp.int32)
        free = jnp.asarray(self.walkable.ravel())[row * self.side + col]
        row = jnp.where(free, row, state.row)
        col = jnp.where(free, col, state.col)
        goal_reached = (row == state.goal_row) & (col == state.goal_col)
        reward = jnp.where(goal_reached, params.reward, 0.0) + jnp.where(free, 0.0, params.punishment)
        reward = jnp.asarray(reward, jnp.float32)
        teleport = self._random_free_cell(fast_random.uniform16(key))
        row = jnp.where(goal_reached, teleport // self.side, row)
        col = jnp.where(goal_reached, teleport % self.side, col)
        time = state.time + 1
        state = dataclasses.replace(
            state, row=row, col=col, last_action=action, last_reward=reward, time=time
        )
        terminated = (row == state.goal_row) & (col == state.goal_col)
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state, params), state, reward, terminated, truncated, {}

    def get_obs(self, state: MetaMazeState, params: MetaMazeParams) -> jax.Array:
        window = jnp.asarray(self.windows)[state.row * self.side + state.col]
        one_hot = (jnp.arange(4) == state.last_action).astype(jnp.float32)
        time = _common.time_feature(state.time, params.normalize_time)
        return jnp.concatenate([window, one_hot, jnp.stack([state.last_reward, time])])

    def observation_space(self, params: MetaMazeParams | None = None) -> spaces.Box:
        params = self.default_params if params is None else params
        rewards = [0.0, float(params.reward), float(params.punishment)]
        max_steps = float(params.max_steps_in_episode)
        if bool(params.normalize_time):
            time_low, time_high = -1.0, max(1.0, 2.0 * max_steps / 100 - 1.0)
        else:
            time_low, time_high = 0.0, max_steps
        k = self.rf_size**2 + 4
        low = np.array(k * [0.0] + [min(rewards), time_low], np.float32)
        high = np.array(k * [1.0] + [max(rewards), time_high], np.float32)
        return spaces.Box(low, high, (k + 2,), jnp.float32)

    def action_space(self, params: MetaMazeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def render(self, state: MetaMazeState, params: MetaMazeParams | None = None) -> jax.Array:
        """The maze: walls dark, goal yellow, agent blue, the observed window shaded.

        Shape ``(16 * side, 16 * side, 3)`` uint8 with ``side = maze_size + rf_size - 1``.
        """
        rows = jnp.arange(self.side)[:, None]
        cols = jnp.arange(self.side)[None, :]
        pad = (self.rf_size - 1) // 2
        seen = (jnp.abs(rows - state.row) <= pad) & (jnp.abs(cols - state.col) <= pad)
        agent = (rows == state.row) & (cols == state.col)
        goal = (rows == state.goal_row) & (cols == state.goal_col)
        base = jnp.asarray(self.walkable, jnp.int32) + 2 * seen.astype(jnp.int32)  # 0..3
        labels = jnp.where(agent & goal, 6, jnp.where(agent, 5, jnp.where(goal, 4, base)))
        colors = [
            _common.WALL,
            _common.FLOOR,
            (70, 70, 96),
            (205, 220, 245),
            _common.GOAL,
            _common.AGENT,
            _common.GOOD,
        ]
        return _common.grid_frame(labels, colors, 16)
