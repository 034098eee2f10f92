"""AMaze: minimax's maze as a MiniGrid gridworld, on lamella's level-based contract."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces
from lamella.envs.environment import Environment, StepOutput, Wrapper, episode_done
from lamella.envs.maze import render as maze_render
from lamella.envs.maze.levels import check_level_fits, check_params, sample_dr_level
from lamella.envs.maze.types import AMazeParams, AMazeState, MazeLevel

__all__ = [
    "ACTION_NAMES",
    "COLOR_GREEN",
    "COLOR_GREY",
    "NUM_ACTIONS",
    "OBJECT_EMPTY",
    "OBJECT_GOAL",
    "OBJECT_UNSEEN",
    "OBJECT_WALL",
    "AMaze",
    "AutoReplay",
]

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)
NUM_ACTIONS = 7
ACTION_NAMES = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
# MiniGrid's cell encoding [object, colour, state].
OBJECT_UNSEEN, OBJECT_EMPTY, OBJECT_WALL, OBJECT_GOAL = 0, 1, 2, 8
COLOR_GREEN, COLOR_GREY = 1, 5


def _direction_vectors(direction: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(dx, dy)`` of MiniGrid's directions (0 right, 1 down, 2 left, 3 up), without a gather."""
    dx = (direction == 0).astype(jnp.int32) - (direction == 2).astype(jnp.int32)
    dy = (direction == 1).astype(jnp.int32) - (direction == 3).astype(jnp.int32)
    return dx, dy


def _visibility(see_behind: list[list[jax.Array]], view: int) -> list[list[jax.Array]]:
    """MiniGrid's ``Grid.process_vis`` on a ``view x view`` grid indexed ``[i][j]`` (i across, j ahead).

    The agent is at ``(view // 2, view - 1)``. Unrolled at trace time: ``view**2`` cells, a few
    boolean operations each.
    """
    false = jnp.zeros((), jnp.bool_)
    mask = [[false for _ in range(view)] for _ in range(view)]
    mask[view // 2][view - 1] = jnp.ones((), jnp.bool_)
    for j in reversed(range(view)):
        for i in range(view - 1):
            spread = mask[i][j] & see_behind[i][j]
            mask[i + 1][j] = mask[i + 1][j] | spread
            if j > 0:
                mask[i + 1][j - 1] = mask[i + 1][j - 1] | spread
                mask[i][j - 1] = mask[i][j - 1] | spread
        for i in reversed(range(1, view)):
            spread = mask[i][j] & see_behind[i][j]
            mask[i - 1][j] = mask[i - 1][j] | spread
            if j > 0:
                mask[i - 1][j - 1] = mask[i - 1][j - 1] | spread
                mask[i][j - 1] = mask[i][j - 1] | spread
    return mask


class AMaze(Environment[AMazeState, AMazeParams]):
    """AMaze: reach the goal in a walled gridworld seen through a small egocentric window.

    minimax's AMaze (Jiang et al. 2023) with MiniGrid's dynamics, checked step by step against
    ``minigrid==3.2.0`` (``tests/test_maze.py``). The grid is the level's interior
    (:class:`~lamella.envs.maze.MazeLevel`), with an implicit border wall around it.

    Action: int32 ``()``, ``Discrete(7)``: 0 turn left, 1 turn right, 2 forward, 3 pick up,
    4 drop, 5 toggle, 6 done (3-6 do nothing, as in a MiniGrid maze with no objects). Forward
    into a wall or the border leaves the agent where it is; forward onto the goal moves the agent
    onto it and ends the episode.

    Observation: dict.

    * ``image``: uint8 ``(V, V, 3)``, MiniGrid's ``obs["image"]`` exactly: the ``V x V`` cells in
      front of the agent (``V = agent_view_size``), indexed ``[i, j]`` with ``i`` across the view
      (0 = the agent's far left) and ``j`` ahead (``j = V - 1`` is the agent's own row, ``j = 0``
      the farthest), each cell ``[object, colour, state]``: empty ``[1, 0, 0]``, wall ``[2, 5, 0]``
      (also beyond the border), goal ``[8, 1, 0]``, unseen ``[0, 0, 0]`` (only with
      ``see_through_walls=False``). The agent's own cell ``[V // 2, V - 1]`` reads empty.
      (minimax's image is this one transposed.)
    * ``agent_dir``: int32 ``()``, ``Discrete(4)``, the agent's direction.

    Reward: float32, ``1 - 0.9 * t / max_episode_steps`` on the step that reaches the goal,
    ``t`` counting this step (the first step is ``t = 1``); 0 otherwise.

    Terminated: the step reached the goal. Truncated: ``time >= max_episode_steps`` on a step
    that did not reach the goal. A bare ``step`` never resets and never computes a reset (the
    reset is the wrapper's job: :class:`~lamella.envs.wrappers.AutoReset` draws a new random
    level, :class:`AutoReplay` restarts the same level).

    State: :class:`~lamella.envs.maze.AMazeState`. Params: :class:`~lamella.envs.maze.AMazeParams`.

    ``reset(key, params)`` starts on a random level (:func:`~lamella.envs.maze.sample_dr_level`);
    ``reset_to_level(key, level, params)`` starts on a given one. The step is deterministic.

    Differences from minimax's AMaze (all deliberate): reaching the goal moves the agent onto it
    (minimax leaves it in front; reward and episode end are the same); ``terminated`` and
    ``truncated`` are separate; ``see_through_walls=False`` is honoured; the step computes no
    reset; ``sample_n_walls`` draws ``0 .. n_walls`` walls (minimax: ``1 .. n_walls - 1``).

    Args:
        level_sampler: ``sample(key) -> MazeLevel`` that ``reset`` draws its level from instead
            of :func:`~lamella.envs.maze.sample_dr_level` (the named-maze ids use
            :func:`~lamella.envs.maze.named_maze_sampler`); its levels must fit the params.
        **defaults: fields of :class:`~lamella.envs.maze.AMazeParams`, the defaults of
            :attr:`default_params`.
    """

    stochastic_step = False

    def __init__(self, level_sampler: Callable[[jax.Array], MazeLevel] | None = None, **defaults: Any):
        self.level_sampler = level_sampler
        names = {f.name for f in dataclasses.fields(AMazeParams)}
        unknown = sorted(set(defaults) - names)
        if unknown:
            raise TypeError(f"AMaze: unknown setting(s) {unknown}; valid: {sorted(names)}.")
        self._defaults = AMazeParams(**defaults)
        check_params(self._defaults)

    @property
    def default_params(self) -> AMazeParams:
        return self._defaults

    # Spaces --------------------------------------------------------------------------------

    def action_space(self, params: AMazeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params: AMazeParams | None = None) -> spaces.Dict:
        params = self.default_params if params is None else params
        view = params.agent_view_size
        return spaces.Dict(
            {
                "image": spaces.Box(0, 255, (view, view, 3), jnp.uint8),
                "agent_dir": spaces.Discrete(4),
            }
        )

    # Reset ---------------------------------------------------------------------------------

    def reset_env(self, key: jax.Array, params: AMazeParams) -> tuple[dict[str, jax.Array], AMazeState]:
        level = sample_dr_level(key, params) if self.level_sampler is None else self.level_sampler(key)
        return self.reset_to_level(key, level, params)

    def reset_to_level(
        self, key: jax.Array, level: MazeLevel, params: AMazeParams | None = None
    ) -> tuple[dict[str, jax.Array], AMazeState]:
        """Start an episode on ``level``: ``(obs, state)``. ``key`` is unused (kept for the contract).

        Raises:
            MazeError: the level's wall map is not ``(params.height, params.width)`` (a level of
                another size or another env), or a position has the wrong shape.
        """
        params = self.default_params if params is None else params
        check_params(params)
        check_level_fits(level, params)
        level = MazeLevel(
            wall_map=jnp.asarray(level.wall_map, jnp.bool_),
            goal_pos=jnp.asarray(level.goal_pos, jnp.int32),
            agent_pos=jnp.asarray(level.agent_pos, jnp.int32),
            agent_dir=jnp.asarray(level.agent_dir, jnp.int32),
        )
        state = AMazeState(
            level=level, agent_pos=level.agent_pos, agent_dir=level.agent_dir, time=jnp.zeros((), jnp.int32)
        )
        return self.observation_of(state, params), state

    # Step ----------------------------------------------------------------------------------

    def step_env(self, key: jax.Array, state: AMazeState, action: Any, params: AMazeParams) -> StepOutput:
        check_params(params)
        action = jnp.asarray(action, jnp.int32)
        level = state.level
        dx, dy = _direction_vectors(state.agent_dir)
        x, y = state.agent_pos[0], state.agent_pos[1]
        tx, ty = x + dx, y + dy
        inside = (tx >= 0) & (tx < params.width) & (ty >= 0) & (ty < params.height)
        wall = level.wall_map[jnp.clip(ty, 0, params.height - 1), jnp.clip(tx, 0, params.width - 1)]
        moved = (action == FORWARD) & inside & ~wall
        reached = moved & (tx == level.goal_pos[0]) & (ty == level.goal_pos[1])
        agent_pos = jnp.where(moved, jnp.stack([tx, ty]), state.agent_pos)
        turn = (action == RIGHT).astype(jnp.int32) + 3 * (action == LEFT).astype(jnp.int32)
        agent_dir = (state.agent_dir + turn) % 4
        time = state.time + 1
        max_steps = jnp.asarray(params.max_episode_steps)
        reward = jnp.where(reached, 1.0 - 0.9 * time.astype(jnp.float32) / max_steps, 0.0).astype(jnp.float32)
        truncated = (time >= max_steps) & ~reached
        new_state = state.replace(agent_pos=agent_pos, agent_dir=agent_dir, time=time)
        return self.observation_of(new_state, params), new_state, reward, reached, truncated, {}

    # Observation ---------------------------------------------------------------------------

    def observation_of(self, state: AMazeState, params: AMazeParams) -> dict[str, jax.Array]:
        """The observation of ``state`` (what ``reset``/``step`` return with it)."""
        view = params.agent_view_size
        level = state.level
        dx, dy = _direction_vectors(state.agent_dir)
        # View cell [i, j]: `ahead` cells forward, `across` cells to the agent's right; the
        # right of direction (dx, dy) is (-dy, dx) in a y-down grid.
        i_idx, j_idx = np.meshgrid(np.arange(view), np.arange(view), indexing="ij")
        ahead = jnp.asarray(view - 1 - j_idx, jnp.int32)
        across = jnp.asarray(i_idx - view // 2, jnp.int32)
        wx = state.agent_pos[0] + ahead * dx - across * dy
        wy = state.agent_pos[1] + ahead * dy + across * dx
        inside = (wx >= 0) & (wx < params.width) & (wy >= 0) & (wy < params.height)
        flat = jnp.clip(wy, 0, params.height - 1) * params.width + jnp.clip(wx, 0, params.width - 1)
        wall = jnp.where(inside, level.wall_map.reshape(-1)[flat], True)
        agent_cell = jnp.asarray((i_idx == view // 2) & (j_idx == view - 1))
        goal = (wx == level.goal_pos[0]) & (wy == level.goal_pos[1]) & ~agent_cell
        obj = jnp.where(wall, OBJECT_WALL, jnp.where(goal, OBJECT_GOAL, OBJECT_EMPTY))
        color = jnp.where(wall, COLOR_GREY, jnp.where(goal, COLOR_GREEN, 0))
        if not params.see_through_walls:
            see_behind = [[~wall[i, j] for j in range(view)] for i in range(view)]
            visible_rows = _visibility(see_behind, view)
            visible = jnp.stack([jnp.stack(row) for row in visible_rows])
            obj = jnp.where(visible, obj, OBJECT_UNSEEN)
            color = jnp.where(visible, color, 0)
        image = jnp.stack([obj, color, jnp.zeros_like(obj)], axis=-1).astype(jnp.uint8)
        return {"image": image, "agent_dir": state.agent_dir.astype(jnp.int32)}

    # Rendering -----------------------------------------------------------------------------

    def render(self, state: AMazeState, params: AMazeParams | None = None) -> jax.Array:
        """RGB uint8 frame of the maze with its border, the agent's view highlighted."""
        params = self.default_params if params is None else params
        level = state.level.replace(agent_pos=state.agent_pos, agent_dir=state.agent_dir)
        return maze_render.render_level(level, params, highlight_view=True)


class AutoReplay(Wrapper):
    """Restart the *same* level when an episode ends (PLR/ACCEL rollouts on buffer levels).

    The episode's level is in the state (``state.level``), so a restart only resets the agent's
    pose and the clock: no level is drawn. ``info["final_observation"]`` is the observation that
    ended the episode, as with :class:`~lamella.envs.wrappers.AutoReset`. Wraps a bare
    :class:`AMaze` (``make(..., autoreset=False)``).
    """

    def __init__(self, env: Environment[Any, Any]):
        if not isinstance(env, AMaze):
            raise TypeError(
                f"AutoReplay wraps a bare AMaze, got {env!r}; build it with "
                "lamella.envs.make('AMaze-13x13-v0', autoreset=False) or AMaze(...)."
            )
        super().__init__(env)

    def step_env(self, key: jax.Array, state: AMazeState, action: Any, params: AMazeParams) -> StepOutput:
        obs, next_state, reward, terminated, truncated, info = self.env.step_env(key, state, action, params)
        done = episode_done(terminated, truncated)
        level = next_state.level
        restarted = next_state.replace(
            agent_pos=jnp.where(done, level.agent_pos, next_state.agent_pos),
            agent_dir=jnp.where(done, level.agent_dir, next_state.agent_dir),
            time=jnp.where(done, 0, next_state.time),
        )
        info = {**info, "final_observation": obs}
        return self.env.observation_of(restarted, params), restarted, reward, terminated, truncated, info
