"""The teacher's MDP of the AMaze family: a level built one cell per step (PAIRED's adversary)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _teacher, spaces, struct
from lamella.envs import random as fast_random
from lamella.envs._inputs import integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.maze.env import COLOR_GREEN, COLOR_GREY, OBJECT_EMPTY, OBJECT_GOAL, OBJECT_WALL
from lamella.envs.maze.levels import check_params, choose_cell
from lamella.envs.maze.types import AMazeParams, MazeLevel

__all__ = ["AMazeTeacher", "AMazeTeacherState"]

OBJECT_AGENT, COLOR_RED = 10, 0


class AMazeTeacherState(struct.PyTreeNode):
    """State of :class:`AMazeTeacher`.

    Attributes:
        wall_map: bool ``(H, W)``, the walls placed so far.
        goal_pos: int32 ``(2,)``, the goal's ``(x, y)`` once placed (``(-1, -1)`` before).
        agent_pos: int32 ``(2,)``, the agent's ``(x, y)`` once placed (``(-1, -1)`` before).
        agent_dir: int32 ``()``, the student's start direction, drawn uniformly at reset.
        time: int32 ``()``, steps taken (cells placed).
        noise: float32 ``(noise_dim,)``, this step's random input of the teacher.
    """

    wall_map: jax.Array
    goal_pos: jax.Array
    agent_pos: jax.Array
    agent_dir: jax.Array
    time: jax.Array
    noise: jax.Array


class AMazeTeacher(Environment[AMazeTeacherState, AMazeParams]):
    """The teacher (adversary) MDP: build a maze level one cell per step (minimax's ``UEDMaze``).

    Takes the student's :class:`~lamella.envs.maze.AMazeParams` (``height``, ``width``,
    ``n_walls``). An episode has ``n_walls + 2`` steps: ``n_walls`` steps each put a wall on the
    chosen cell (choosing a wall again changes nothing, so a level has at most ``n_walls`` walls:
    minimax's PAIRED setting, walls "with replacement"), then one step puts the goal on the chosen
    cell, then one step puts the agent there (removing a wall under either). If the agent's cell
    is the goal's, the agent goes to a uniform free cell instead. The student's start direction
    is drawn uniformly at reset (the teacher does not choose it).

    Action: int32 ``()``, ``Discrete(H * W)``, the cell ``y * W + x``.

    Observation: dict.

    * ``image``: uint8 ``(H + 2, W + 2, 3)``, the level so far with its border wall, indexed
      ``[row, column]`` (not MiniGrid's transposed layout), MiniGrid's encoding: empty
      ``[1, 0, 0]``, wall ``[2, 5, 0]``, goal ``[8, 1, 0]``, agent ``[10, 0, direction]``.
    * ``time``: int32 ``()``, steps taken.
    * ``noise``: float32 ``(noise_dim,)``, uniform in [0, 1), redrawn every step (only with
      ``noise_dim > 0``).

    Reward: always 0 (a UED runner sets the teacher's return, e.g. the student's regret).
    Terminated: after the agent is placed (step ``n_walls + 2``). Truncated: never.
    :meth:`level_of` turns a state into the :class:`~lamella.envs.maze.MazeLevel` the student
    plays (meaningful once the episode is over).

    Args:
        noise_dim: size of the random input in the observation (minimax's PAIRED: 50).
    """

    def __init__(self, noise_dim: int = 0, **defaults: Any):
        self.noise_dim = integer_setting(noise_dim, "noise_dim", "AMazeTeacher")
        self._defaults = AMazeParams(**defaults)
        check_params(self._defaults)

    @property
    def default_params(self) -> AMazeParams:
        return self._defaults

    def num_steps(self, params: AMazeParams | None = None) -> int:
        """Steps in a teacher episode: ``n_walls + 2``."""
        params = self.default_params if params is None else params
        return params.n_walls + 2

    def action_space(self, params: AMazeParams | None = None) -> spaces.Discrete:
        params = self.default_params if params is None else params
        return spaces.Discrete(params.height * params.width)

    def observation_space(self, params: AMazeParams | None = None) -> spaces.Dict:
        params = self.default_params if params is None else params
        image = spaces.Box(0, 255, (params.height + 2, params.width + 2, 3), jnp.uint8)
        return _teacher.observation_space(image, params.n_walls + 2, self.noise_dim)

    def _noise(self, key: jax.Array) -> jax.Array:
        return _teacher.noise(key, self.noise_dim)

    def reset_env(
        self, key: jax.Array, params: AMazeParams
    ) -> tuple[dict[str, jax.Array], AMazeTeacherState]:
        check_params(params)
        state = AMazeTeacherState(
            wall_map=jnp.zeros((params.height, params.width), jnp.bool_),
            goal_pos=jnp.full((2,), -1, jnp.int32),
            agent_pos=jnp.full((2,), -1, jnp.int32),
            agent_dir=fast_random.randint(key, (), 0, 4, stream=5),
            time=jnp.zeros((), jnp.int32),
            noise=self._noise(key),
        )
        return self.observation_of(state, params), state

    def step_env(
        self, key: jax.Array, state: AMazeTeacherState, action: Any, params: AMazeParams
    ) -> StepOutput:
        check_params(params)
        width, n = params.width, params.n_walls
        cell = jnp.clip(jnp.asarray(action, jnp.int32), 0, params.height * width - 1)
        pos = jnp.stack([cell % width, cell // width]).astype(jnp.int32)
        walls = state.wall_map.reshape(-1)
        is_wall_step, is_goal_step, is_agent_step = state.time < n, state.time == n, state.time == n + 1
        goal_cell = state.goal_pos[1] * width + state.goal_pos[0]
        # The agent's cell: the chosen one, or a uniform free cell when it is the goal's.
        free = ~walls.at[cell].set(False) & (jnp.arange(walls.shape[0]) != goal_cell)
        fallback = choose_cell(fast_random.uniform(key, (), stream=6), free)
        agent_cell = jnp.where(cell == goal_cell, fallback, cell)
        walls = jnp.where(is_wall_step, walls.at[cell].set(True), walls)
        walls = jnp.where(is_goal_step, walls.at[cell].set(False), walls)
        walls = jnp.where(is_agent_step, walls.at[agent_cell].set(False), walls)
        agent_pos = jnp.stack([agent_cell % width, agent_cell // width]).astype(jnp.int32)
        time = state.time + 1
        new_state = state.replace(
            wall_map=walls.reshape(state.wall_map.shape),
            goal_pos=jnp.where(is_goal_step, pos, state.goal_pos),
            agent_pos=jnp.where(is_agent_step, agent_pos, state.agent_pos),
            time=time,
            noise=self._noise(key),
        )
        terminated = time >= n + 2
        return (
            self.observation_of(new_state, params),
            new_state,
            jnp.zeros((), jnp.float32),
            terminated,
            jnp.zeros((), jnp.bool_),
            {},
        )

    def observation_of(self, state: AMazeTeacherState, params: AMazeParams) -> dict[str, jax.Array]:
        """The observation of ``state``."""
        height, width = params.height, params.width
        ys, xs = np.meshgrid(np.arange(height + 2) - 1, np.arange(width + 2) - 1, indexing="ij")
        walls = jnp.pad(state.wall_map, 1, constant_values=True)
        goal = (xs == state.goal_pos[0]) & (ys == state.goal_pos[1])
        agent = (xs == state.agent_pos[0]) & (ys == state.agent_pos[1])
        obj = jnp.where(
            agent, OBJECT_AGENT, jnp.where(goal, OBJECT_GOAL, jnp.where(walls, OBJECT_WALL, OBJECT_EMPTY))
        )
        color = jnp.where(agent, COLOR_RED, jnp.where(goal, COLOR_GREEN, jnp.where(walls, COLOR_GREY, 0)))
        status = jnp.where(agent, state.agent_dir, 0)
        image = jnp.stack([obj, color, status], axis=-1).astype(jnp.uint8)
        obs = {"image": image, "time": state.time}
        if self.noise_dim:
            obs["noise"] = state.noise
        return obs

    def level_of(self, state: AMazeTeacherState) -> MazeLevel:
        """The level a finished teacher episode built (vmappable)."""
        return MazeLevel(
            wall_map=state.wall_map,
            goal_pos=state.goal_pos,
            agent_pos=state.agent_pos,
            agent_dir=state.agent_dir,
        )

    def render(self, state: AMazeTeacherState, params: AMazeParams | None = None) -> jax.Array:
        """RGB uint8 frame of the level so far (goal and agent drawn once placed)."""
        from lamella.envs.maze.render import render_level

        params = self.default_params if params is None else params
        # Unplaced goal/agent sit outside the grid, where the renderer draws nothing of them.
        return render_level(self.level_of(state), params)
