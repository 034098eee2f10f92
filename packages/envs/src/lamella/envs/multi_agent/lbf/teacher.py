"""The teacher's MDP of Level-Based Foraging: a level built one agent or food per step (PAIRED)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _teacher, spaces, struct
from lamella.envs import random as fast_random
from lamella.envs._inputs import integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.lbf.env import LevelBasedForaging, _adjacent_food, _near_food
from lamella.envs.multi_agent.lbf.levels import ForagingLevel, _choose, _food_cap, state_of_level
from lamella.envs.multi_agent.lbf.types import LevelBasedForagingParams

__all__ = ["ForagingTeacher", "ForagingTeacherState"]


class ForagingTeacherState(struct.PyTreeNode):
    """State of :class:`ForagingTeacher` (``n`` agents, ``F`` food slots; ``(row, column)``).

    Attributes:
        agent_positions: int32 ``(n, 2)``, the agents placed so far (``(-1, -1)`` before).
        agent_levels: int32 ``(n,)``, their levels (0 before an agent is placed).
        food_positions: int32 ``(F, 2)``, the foods placed so far (``(0, 0)`` for an empty slot).
        food_levels: int32 ``(F,)``, their levels (0 before, or for a slot left empty).
        time: int32 ``()``, steps taken (things placed).
        noise: float32 ``(noise_dim,)``, this step's random input of the teacher.
    """

    agent_positions: jax.Array
    agent_levels: jax.Array
    food_positions: jax.Array
    food_levels: jax.Array
    time: jax.Array
    noise: jax.Array


class ForagingTeacher(Environment[ForagingTeacherState, LevelBasedForagingParams]):
    """The teacher (adversary) MDP of Level-Based Foraging: build a start layout step by step.

    The LBF counterpart of :class:`lamella.envs.maze.AMazeTeacher`, with the same contract
    (``num_steps(params)``, ``level_of(state)``, a dict observation with ``image``, ``time`` and
    ``noise``), so PAIRED's runner trains a teacher on either. It takes the student's env (a
    bare :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging`, whose static settings fix the
    grid, the counts and the level ranges) and its params. An episode has ``n + F`` steps: step
    ``i < n`` places agent ``i`` with its level, then step ``n + f`` places food ``f`` with its
    level. Every level it builds keeps the rules of the env's reset
    (:func:`~lamella.envs.multi_agent.lbf.levels.is_valid_level`):

    - an agent goes on the chosen cell unless another agent stands there; then on a uniform cell
      without an agent (the whole grid, border included, as reset);
    - a food goes on the chosen cell if reset could have put it there: an interior cell without an
      agent, clear of the foods placed so far by the spacing rule of the env's ``rules``
      (lbforaging: not in another food's 3x3 block nor 2 cells along its row or column; Jumanji:
      not on or 4-adjacent to one); else on a uniform such cell; if there is none the slot stays
      empty (level 0), as when reset runs out of room;
    - levels: the action's level choice ``k`` gives an agent level ``min_player_level + k mod
      span`` (``span`` the number of agent levels) and a food level ``low + k mod (cap - low +
      1)``, reset's range for the agents placed (``cap``: ``max_food_level``, or the sum of the
      three lowest agent levels; ``low``: ``min_food_level`` at most ``cap``; ``force_coop``:
      ``low = cap``).

    Action: int32 ``()``, ``Discrete(rows * columns * K)``: ``k * rows * columns + cell``, the cell
    ``row * columns + column`` and the level choice ``k < K``, where ``K`` (:attr:`num_level_choices`)
    is the larger of the agent levels' and the food levels' counts (``K = 1``: the action is the
    cell).

    Observation: dict.

    * ``image``: uint8 ``(rows, columns, 3)``, the level so far, indexed ``[row, column]``:
      channel 0 the level of the agent on the cell (0: none), channel 1 the level of the food on
      it (0: none), channel 2 1 where this step's thing would go as chosen (the cells allowed by
      the rules above; all 0 once the level is built).
    * ``time``: int32 ``()``, steps taken (``0 .. n + F``; which thing is placed next).
    * ``noise``: float32 ``(noise_dim,)``, uniform in [0, 1), redrawn every step (only with
      ``noise_dim > 0``).

    Reward: always 0 (a UED runner sets the teacher's return, e.g. the students' regret).
    Terminated: after the last food is placed (step ``n + F``). Truncated: never.
    :meth:`level_of` turns a state into the :class:`~lamella.envs.multi_agent.lbf.ForagingLevel`
    the students play (meaningful once the episode is over).

    Args:
        env: the students' env, a bare ``LevelBasedForaging`` (or a wrapper of one).
        noise_dim: size of the random input in the observation (minimax's PAIRED: 50).
    """

    def __init__(self, env: Any, noise_dim: int = 0):
        bare = env.unwrapped if hasattr(env, "unwrapped") else env
        if not isinstance(bare, LevelBasedForaging):
            raise TypeError(
                f"ForagingTeacher builds levels of a LevelBasedForaging env, got {env!r}; build it with "
                "ForagingTeacher(lamella.envs.make('Foraging-5x5-2p-1f-v3', autoreset=False)[0])."
            )
        integer_setting(noise_dim, "noise_dim", "ForagingTeacher")
        self.env = bare
        self.noise_dim = int(noise_dim)
        self.rows, self.cols = bare.rows, bare.cols
        self.num_players, self.max_num_food = bare.num_agents, bare.max_num_food
        agent_choices = bare.max_player_level - bare.min_player_level + 1
        food_choices = 1 if bare.force_coop else bare.food_level_bound - bare.min_food_level + 1
        self.num_level_choices = max(agent_choices, food_choices, 1)
        # Static cell coordinates, row-major.
        self._cell_row = np.arange(self.rows * self.cols) // self.cols
        self._cell_col = np.arange(self.rows * self.cols) % self.cols

    @property
    def default_params(self) -> LevelBasedForagingParams:
        return self.env.default_params

    def num_steps(self, params: LevelBasedForagingParams | None = None) -> int:
        """Steps in a teacher episode: ``n + F`` (agents, then foods)."""
        return self.num_players + self.max_num_food

    def action_space(self, params: LevelBasedForagingParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.rows * self.cols * self.num_level_choices)

    def observation_space(self, params: LevelBasedForagingParams | None = None) -> spaces.Dict:
        high = max(self.env.max_player_level, self.env.food_level_bound, 1)
        image = spaces.Box(0, high, (self.rows, self.cols, 3), jnp.uint8)
        return _teacher.observation_space(image, self.num_steps(), self.noise_dim)

    def _noise(self, key: jax.Array) -> jax.Array:
        return _teacher.noise(key, self.noise_dim)

    def reset_env(
        self, key: jax.Array, params: LevelBasedForagingParams
    ) -> tuple[dict[str, jax.Array], ForagingTeacherState]:
        n, food = self.num_players, self.max_num_food
        state = ForagingTeacherState(
            agent_positions=jnp.full((n, 2), -1, jnp.int32),
            agent_levels=jnp.zeros((n,), jnp.int32),
            food_positions=jnp.zeros((food, 2), jnp.int32),
            food_levels=jnp.zeros((food,), jnp.int32),
            time=jnp.zeros((), jnp.int32),
            noise=self._noise(key),
        )
        return self.observation_of(state, params), state

    def allowed_cells(self, state: ForagingTeacherState) -> jax.Array:
        """bool ``(rows * columns,)``: the cells where this step's agent or food goes as chosen."""
        row, col = jnp.asarray(self._cell_row), jnp.asarray(self._cell_col)
        placed = state.agent_levels > 0
        on_agent = jnp.any(
            (row[:, None] == state.agent_positions[None, :, 0])
            & (col[:, None] == state.agent_positions[None, :, 1])
            & placed[None, :],
            -1,
        )
        near = _adjacent_food if self.env.jumanji else _near_food
        crowded = jnp.any(
            near(
                row[:, None], col[:, None], state.food_positions[None, :, 0], state.food_positions[None, :, 1]
            )
            & (state.food_levels > 0)[None, :],
            -1,
        )
        interior = (row >= 1) & (row <= self.rows - 2) & (col >= 1) & (col <= self.cols - 2)
        n, steps = self.num_players, self.num_steps()
        return jnp.where(
            state.time < n,
            ~on_agent,
            jnp.where(state.time < steps, interior & ~on_agent & ~crowded, False),
        )

    def step_env(
        self, key: jax.Array, state: ForagingTeacherState, action: Any, params: LevelBasedForagingParams
    ) -> StepOutput:
        env, n, num_food, cells = self.env, self.num_players, self.max_num_food, self.rows * self.cols
        action = jnp.clip(jnp.asarray(action, jnp.int32), 0, cells * self.num_level_choices - 1)
        cell, choice = action % cells, action // cells
        allowed = self.allowed_cells(state)
        fallback, any_allowed = _choose(fast_random.uniform(key, (), stream=6), allowed)
        chosen = jnp.where(allowed[cell], cell, fallback)
        position = jnp.stack([chosen // self.cols, chosen % self.cols]).astype(jnp.int32)
        is_agent_step = state.time < n
        is_food_step = (state.time >= n) & (state.time < n + num_food)
        agent, food = jnp.clip(state.time, 0, n - 1), jnp.clip(state.time - n, 0, num_food - 1)

        agent_span = env.max_player_level - env.min_player_level + 1
        agent_level = (env.min_player_level + choice % agent_span).astype(jnp.int32)
        agent_positions = jnp.where(
            is_agent_step, state.agent_positions.at[agent].set(position), state.agent_positions
        )
        agent_levels = jnp.where(
            is_agent_step, state.agent_levels.at[agent].set(agent_level), state.agent_levels
        )

        # Foods come after every agent, so reset's level range for them is known.
        cap = _food_cap(env, agent_levels)
        low = cap if env.force_coop else jnp.minimum(jnp.asarray(env.min_food_level, jnp.int32), cap)
        food_level = jnp.where(any_allowed, low + choice % (cap - low + 1), 0).astype(jnp.int32)
        food_position = jnp.where(any_allowed, position, 0)
        food_positions = jnp.where(
            is_food_step, state.food_positions.at[food].set(food_position), state.food_positions
        )
        food_levels = jnp.where(is_food_step, state.food_levels.at[food].set(food_level), state.food_levels)

        time = state.time + 1
        new_state = ForagingTeacherState(
            agent_positions=agent_positions,
            agent_levels=agent_levels,
            food_positions=food_positions,
            food_levels=food_levels,
            time=time,
            noise=self._noise(key),
        )
        return (
            self.observation_of(new_state, params),
            new_state,
            jnp.zeros((), jnp.float32),
            time >= n + num_food,
            jnp.zeros((), jnp.bool_),
            {},
        )

    def observation_of(
        self, state: ForagingTeacherState, params: LevelBasedForagingParams | None = None
    ) -> dict[str, jax.Array]:
        """The observation of ``state``."""
        row, col = jnp.asarray(self._cell_row), jnp.asarray(self._cell_col)

        def level_map(positions: jax.Array, levels: jax.Array) -> jax.Array:
            here = (row[:, None] == positions[None, :, 0]) & (col[:, None] == positions[None, :, 1])
            return jnp.max(jnp.where(here & (levels > 0)[None, :], levels[None, :], 0), -1)

        planes = [
            level_map(state.agent_positions, state.agent_levels),
            level_map(state.food_positions, state.food_levels),
            self.allowed_cells(state).astype(jnp.int32),
        ]
        image = jnp.stack(planes, -1).reshape(self.rows, self.cols, 3).astype(jnp.uint8)
        obs = {"image": image, "time": state.time}
        if self.noise_dim:
            obs["noise"] = state.noise
        return obs

    def level_of(self, state: ForagingTeacherState) -> ForagingLevel:
        """The level a finished teacher episode built (vmappable)."""
        return ForagingLevel(
            agent_positions=state.agent_positions,
            agent_levels=state.agent_levels,
            food_positions=state.food_positions,
            food_levels=state.food_levels,
        )

    def render(
        self, state: ForagingTeacherState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """RGB uint8 frame of the level so far, as the env draws a start state (agents not
        placed yet sit off the grid, where nothing of them is drawn)."""
        return self.env.render(state_of_level(self.level_of(state)), params)

    def __repr__(self) -> str:
        return f"ForagingTeacher({self.env!r}, noise_dim={self.noise_dim})"
