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
    "COLOR_RED",
    "MEMORY_BOTTOM",
    "MEMORY_CLUE",
    "MEMORY_TOP",
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
COLOR_RED, COLOR_GREEN, COLOR_GREY = 0, 1, 5
# minimax's Memory maze (AMazeParams.memory): (x, y) of the clue and of the two goal cells, and
# the extra codes of its maze_map (lamella's, not MiniGrid's: each is seen as a goal cell).
MEMORY_CLUE, MEMORY_TOP, MEMORY_BOTTOM = (0, 6), (9, 5), (9, 9)
_RED_GOAL, _GREEN_MARK, _RED_MARK = 9, 10, 11


def _direction_vectors(direction: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(dx, dy)`` of MiniGrid's directions (0 right, 1 down, 2 left, 3 up), without a gather."""
    dx = (direction == 0).astype(jnp.int32) - (direction == 2).astype(jnp.int32)
    dy = (direction == 1).astype(jnp.int32) - (direction == 3).astype(jnp.int32)
    return dx, dy


def _visibility(see_behind: jax.Array, view: int) -> jax.Array:
    """MiniGrid's ``Grid.process_vis``: bool ``(view, view)`` visibility from see-through cells.

    ``see_behind`` is bool ``(view, view)`` indexed ``[i, j]`` (i across, j ahead; the agent at
    ``(view // 2, view - 1)``). MiniGrid walks the rows from the agent's outwards; in each row a
    left-to-right pass spreads visibility rightwards through see-through cells, a right-to-left
    pass leftwards, and every spreading cell also lights its two neighbours in the next row.
    Each row is one int here (bit ``i`` = cell ``i``), so a pass is a few shifts repeated
    ``view - 1`` times: elementwise integer operations, which XLA compiles quickly (the same
    rule written per cell took seconds to compile).
    """
    weights = jnp.asarray(1 << np.arange(view), jnp.int32)
    rows_s = jnp.sum(jnp.where(see_behind, weights[:, None], 0), axis=0)  # (view,): row j's bits
    full = (1 << view) - 1
    low, high = full >> 1, full & ~1  # cells that spread right (i < view - 1) / left (i > 0)
    mask = jnp.asarray(1 << (view // 2), jnp.int32)
    rows: list[jax.Array] = [mask] * view  # every entry is set below
    for j in reversed(range(view)):
        spread = rows_s[j]
        for _ in range(view - 1):
            mask = mask | ((mask & spread & low) << 1)
        right = mask & spread & low
        for _ in range(view - 1):
            mask = mask | ((mask & spread & high) >> 1)
        left = mask & spread & high
        rows[j] = mask
        mask = (right | (right << 1) | left | (left >> 1)) & full
    bits = jnp.stack(rows)  # (view,) over j
    return ((bits[None, :] >> jnp.arange(view)[:, None]) & 1).astype(jnp.bool_)


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
            level=level,
            agent_pos=level.agent_pos,
            agent_dir=level.agent_dir,
            time=jnp.zeros((), jnp.int32),
            maze_map=_maze_map(level, params),
        )
        return self.observation_of(state, params), state

    def reset_where(
        self, key: jax.Array, done: jax.Array, state: AMazeState, params: AMazeParams
    ) -> AMazeState:
        """``state`` where ``done`` is False, the state ``reset_env(key, params)`` starts where True.

        What :class:`~lamella.envs.wrappers.AutoReset` selects at episode end (it looks this
        method up on the env's class), bit for bit the same as
        ``jnp.where(done, reset_env(key, params)[1], state)`` leaf by leaf. For one env that is
        how it is computed. Under ``jax.vmap`` (a custom batching rule) only the envs that are
        done draw a level, in chunks of :func:`reset_chunk` envs, instead of every env on every
        step: the random level is most of the cost of an auto-reset step, and few envs finish
        on any one step.
        """
        return _reset_where(self, key, done, state, params)

    # Step ----------------------------------------------------------------------------------

    def step_env(self, key: jax.Array, state: AMazeState, action: Any, params: AMazeParams) -> StepOutput:
        check_params(params)
        return _step(state, jnp.asarray(action, jnp.int32), params)

    # Observation ---------------------------------------------------------------------------

    def observation_of(self, state: AMazeState, params: AMazeParams) -> dict[str, jax.Array]:
        """The observation of ``state`` (what ``reset``/``step`` return with it)."""
        return _observe(state, params)

    # Rendering -----------------------------------------------------------------------------

    def render(self, state: AMazeState, params: AMazeParams | None = None) -> jax.Array:
        """RGB uint8 frame of the maze with its border, the agent's view highlighted."""
        params = self.default_params if params is None else params
        level = state.level.replace(agent_pos=state.agent_pos, agent_dir=state.agent_dir)
        return maze_render.render_level(level, params, highlight_view=True)


# Chunk size of the batched reset_where: a fiftieth of the batch, at least 4 envs.
RESET_CHUNK_MIN = 4
RESET_CHUNK_FRACTION = 50


def reset_chunk(num_envs: int) -> int:
    """Envs per chunk of :meth:`AMaze.reset_where` under a ``vmap`` of ``num_envs`` envs.

    A chunk draws this many levels whether or not as many envs are done, and a step with more
    done envs runs more chunks. A fiftieth of the batch (at least 4): with random actions on
    13x13 mazes with 60 walls and 250-step episodes, about 4.4 of 1024 envs end an episode per
    step in the steady state (at most 7 in 128 steps), so one chunk of 20 covers a step.
    Measured there (1024 envs): chunks of 4 to 20 within noise of each other (5.3e6-5.9e6
    steps/s), 64 and 256 slower (4.8e6, 3.2e6); a trained policy ends more episodes per step,
    and then more small chunks would cost more loop iterations.
    """
    return max(1, min(num_envs, max(RESET_CHUNK_MIN, num_envs // RESET_CHUNK_FRACTION)))


def _reset_where(
    env: AMaze, key: jax.Array, done: jax.Array, state: AMazeState, params: AMazeParams
) -> AMazeState:
    @jax.custom_batching.custom_vmap
    def reset_where(key: jax.Array, done: jax.Array, state: AMazeState, params: AMazeParams) -> AMazeState:
        _, fresh = env.reset_env(key, params)
        return jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, state)

    @reset_where.def_vmap
    def rule(
        axis_size: int, in_batched: list[Any], key: Any, done: Any, state: Any, params: Any
    ) -> tuple[AMazeState, Any]:
        args = (key, done, state, params)
        key, done, state, params = jax.tree.map(
            lambda x, batched: x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
            args,
            tuple(in_batched),
        )
        new_state = _reset_done_envs(env, axis_size, key, done, state, params)
        return new_state, jax.tree.map(lambda _: True, new_state)

    return reset_where(key, done, state, params)


def _reset_done_envs(
    env: AMaze, num_envs: int, key: jax.Array, done: jax.Array, state: AMazeState, params: AMazeParams
) -> AMazeState:
    """The batched :meth:`AMaze.reset_where`: reset states drawn for the done envs only.

    The done envs' indices come first in ``order``; each loop iteration draws the reset states
    of the next ``chunk`` of them and scatters them in (indices past the done ones are
    ``num_envs``, which the scatter drops). No iteration runs on a step where no env is done.
    """
    chunk = reset_chunk(num_envs)
    padded = -(-num_envs // chunk) * chunk
    order = jnp.nonzero(done, size=padded, fill_value=num_envs)[0].astype(jnp.int32)
    count = jnp.sum(done, dtype=jnp.int32)

    def draw(carry: tuple[jax.Array, AMazeState]) -> tuple[jax.Array, AMazeState]:
        start, state = carry
        index = jax.lax.dynamic_slice(order, (start,), (chunk,))
        source = jnp.minimum(index, num_envs - 1)
        keys, chunk_params = jax.tree.map(lambda x: x[source], (key, params))
        _, fresh = jax.vmap(env.reset_env)(keys, chunk_params)
        state = jax.tree.map(lambda old, new: old.at[index].set(new, mode="drop"), state, fresh)
        return start + chunk, state

    _, state = jax.lax.while_loop(lambda carry: carry[0] < count, draw, (jnp.zeros((), jnp.int32), state))
    return state


def _maze_map(level: MazeLevel, params: AMazeParams) -> jax.Array:
    """uint8 MiniGrid object codes of ``level`` padded with ``V - 1`` walls (``AMazeState.maze_map``)."""
    pad = params.agent_view_size - 1
    codes = jnp.where(level.wall_map, OBJECT_WALL, OBJECT_EMPTY).astype(jnp.uint8)
    codes = codes.at[level.goal_pos[1], level.goal_pos[0]].set(OBJECT_GOAL)
    if params.memory:
        # The goal is the top (red) or the bottom (green) cell; the other is a solid distractor
        # of its own colour, and the solid clue shows the goal's colour.
        top = _is_top_goal(level.goal_pos)
        codes = codes.at[MEMORY_TOP[1], MEMORY_TOP[0]].set(
            jnp.where(top, _RED_GOAL, _RED_MARK).astype(jnp.uint8)
        )
        bottom = jnp.where(top, _GREEN_MARK, codes[MEMORY_BOTTOM[1], MEMORY_BOTTOM[0]]).astype(jnp.uint8)
        codes = codes.at[MEMORY_BOTTOM[1], MEMORY_BOTTOM[0]].set(bottom)
        clue = jnp.where(top, _RED_MARK, _GREEN_MARK).astype(jnp.uint8)
        codes = codes.at[MEMORY_CLUE[1], MEMORY_CLUE[0]].set(clue)
    return jnp.pad(codes, pad, constant_values=OBJECT_WALL)


def _is_top_goal(goal_pos: jax.Array) -> jax.Array:
    return (goal_pos[0] == MEMORY_TOP[0]) & (goal_pos[1] == MEMORY_TOP[1])


@jax.jit
def _observe(state: AMazeState, params: AMazeParams) -> dict[str, jax.Array]:
    # Jitted so that an eager call is one program (see levels._sample_dr_level).
    view = params.agent_view_size
    pad, half = view - 1, view // 2
    direction = state.agent_dir
    x, y = state.agent_pos[0] + pad, state.agent_pos[1] + pad
    # The view's box in the padded map (rows y, columns x), by direction: right, down, left, up.
    x0 = jnp.where(direction == 0, x, jnp.where(direction == 2, x - pad, x - half))
    y0 = jnp.where(direction == 1, y, jnp.where(direction == 3, y - pad, y - half))
    box = jax.lax.dynamic_slice(state.maze_map, (y0, x0), (view, view))
    # image[i, j]: i across the view (left to right as the agent sees it), j ahead (agent at j = V-1).
    image = jnp.where(
        direction == 0,
        box[:, ::-1],
        jnp.where(direction == 1, box[::-1, ::-1].T, jnp.where(direction == 2, box[::-1, :], box.T)),
    )
    image = image.at[half, view - 1].set(OBJECT_EMPTY)  # MiniGrid shows the agent's own cell empty
    if not params.see_through_walls:
        visible = _visibility(image != OBJECT_WALL, view)
        image = jnp.where(visible, image, OBJECT_UNSEEN)
    if params.memory:
        red = (image == _RED_GOAL) | (image == _RED_MARK)
        green = (image == OBJECT_GOAL) | (image == _GREEN_MARK)
        image = jnp.where(red | green, OBJECT_GOAL, image)
        color = jnp.where(image == OBJECT_WALL, COLOR_GREY, jnp.where(green, COLOR_GREEN, COLOR_RED))
    else:
        color = jnp.where(image == OBJECT_WALL, COLOR_GREY, jnp.where(image == OBJECT_GOAL, COLOR_GREEN, 0))
    obs = jnp.stack([image, color.astype(jnp.uint8), jnp.zeros_like(image)], axis=-1)
    return {"image": obs, "agent_dir": direction.astype(jnp.int32)}


@jax.jit
def _step(state: AMazeState, action: jax.Array, params: AMazeParams) -> StepOutput:
    pad = params.agent_view_size - 1
    dx, dy = _direction_vectors(state.agent_dir)
    tx, ty = state.agent_pos[0] + dx, state.agent_pos[1] + dy
    ahead = state.maze_map[ty + pad, tx + pad]  # the padding makes the border a wall
    if params.memory:
        moved = (action == FORWARD) & (ahead != OBJECT_WALL) & (ahead != _GREEN_MARK) & (ahead != _RED_MARK)
        reached = moved & ((ahead == OBJECT_GOAL) | (ahead == _RED_GOAL))
        # Walking into the distractor (the goal cell that is not the level's goal) ends the episode.
        top = _is_top_goal(state.level.goal_pos)
        distractor = jnp.where(top, jnp.asarray(MEMORY_BOTTOM), jnp.asarray(MEMORY_TOP))
        misled = (action == FORWARD) & (tx == distractor[0]) & (ty == distractor[1])
    else:
        moved = (action == FORWARD) & (ahead != OBJECT_WALL)
        reached = moved & (ahead == OBJECT_GOAL)
        misled = jnp.zeros((), jnp.bool_)
    agent_pos = jnp.where(moved, jnp.stack([tx, ty]), state.agent_pos)
    turn = (action == RIGHT).astype(jnp.int32) + 3 * (action == LEFT).astype(jnp.int32)
    agent_dir = (state.agent_dir + turn) % 4
    time = state.time + 1
    max_steps = jnp.asarray(params.max_episode_steps)
    reward = jnp.where(reached, 1.0 - 0.9 * time.astype(jnp.float32) / max_steps, 0.0).astype(jnp.float32)
    terminated = reached | misled
    truncated = (time >= max_steps) & ~terminated
    new_state = state.replace(agent_pos=agent_pos, agent_dir=agent_dir, time=time)
    return _observe(new_state, params), new_state, reward, terminated, truncated, {}


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
        observation_of = self.env.observation_of  # type: ignore[attr-defined]
        return observation_of(restarted, params), restarted, reward, terminated, truncated, info
