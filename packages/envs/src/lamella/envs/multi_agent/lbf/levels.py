"""Level-Based Foraging as a level-based env (UED): levels, generator, mutator, comparator, replay.

A level is the layout an episode starts from (:class:`ForagingLevel`): where the agents stand
and their levels, where the food lies and its levels. The env's methods
(:meth:`~lamella.envs.multi_agent.lbf.LevelBasedForaging.reset_to_level`, ``sample_level``,
``mutate_level``, ``levels_equal``, ``render_level``) call the functions here, which take the
env for its static sizes::

    env, params = lamella.envs.make("Foraging-5x5-2p-1f-v3", autoreset=False)
    level = env.sample_level(key, params)              # the env's own reset distribution
    level = env.mutate_level(key, level, params, 3)    # 3 edits
    obs, state = env.reset_to_level(key, level, params)
    replay = AutoReplay(env)                           # an ended episode restarts its level

Edits (:func:`mutate_level`, one drawn uniformly per edit):

- move an agent to a cell that holds no other agent and no food (the whole grid, as reset);
- move a food to an interior cell reset could have put it on: no agent, and clear of the
  other foods by the spacing rule of the env's ``rules`` (lbforaging: not in another food's
  3x3 block nor 2 cells along its row or column; Jumanji: not on or 4-adjacent to one);
- raise or lower an agent's level by 1 within ``[min_player_level, max_player_level]``;
- raise or lower a food's level by 1 within ``[min_food_level, cap]``, the cap of reset (the
  env's ``max_food_level``, or the sum of the three lowest agent levels); with
  ``force_coop`` a food's level is the cap.

After every edit each food's level is clipped to ``[min_food_level, cap]`` again (an agent-level
edit moves the cap). An edit that has nothing to act on (no free cell, no food left) changes
nothing. So a mutated level always keeps reset's rules: agents on distinct cells, food on
interior cells without agents and spaced as reset spaces it, levels in reset's ranges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _inputs, struct
from lamella.envs.environment import EnvInputError, StepOutput, Wrapper, episode_done
from lamella.envs.multi_agent.lbf.types import LevelBasedForagingParams, LevelBasedForagingState

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from lamella.envs.multi_agent.lbf.env import LevelBasedForaging

__all__ = [
    "AutoReplay",
    "AutoReplayState",
    "ForagingLevel",
    "check_level_fits",
    "is_valid_level",
    "level_of",
    "levels_equal",
    "mutate_level",
    "sample_level",
    "state_of_level",
]

MOVE_AGENT, MOVE_FOOD, AGENT_LEVEL, FOOD_LEVEL = range(4)


class ForagingLevel(struct.PyTreeNode):
    """One Level-Based Foraging layout (``n`` agents, ``F`` food slots; ``(row, column)``).

    Attributes:
        agent_positions: int32 ``(n, 2)``, each agent's start cell.
        agent_levels: int32 ``(n,)``, each agent's level.
        food_positions: int32 ``(F, 2)``, each food slot's cell (ignored where its level is 0).
        food_levels: int32 ``(F,)``, each food's level; 0 for an empty slot.
    """

    agent_positions: jax.Array
    agent_levels: jax.Array
    food_positions: jax.Array
    food_levels: jax.Array

    @classmethod
    def create(
        cls,
        agent_positions: ArrayLike,
        agent_levels: ArrayLike,
        food_positions: ArrayLike,
        food_levels: ArrayLike,
    ) -> ForagingLevel:
        """A level from nested lists or arrays, each field cast to int32 (what the env expects).

        ``ForagingLevel.create([[0, 0], [4, 4]], [1, 1], [[2, 2]], [2])``: two level-1 agents in
        opposite corners, one level-2 food in the middle of a 5x5 grid.
        """
        return cls(
            agent_positions=jnp.asarray(agent_positions, jnp.int32),
            agent_levels=jnp.asarray(agent_levels, jnp.int32),
            food_positions=jnp.asarray(food_positions, jnp.int32),
            food_levels=jnp.asarray(food_levels, jnp.int32),
        )


def check_level_fits(env: LevelBasedForaging, level: Any) -> None:
    """Raise :class:`~lamella.envs.EnvInputError` naming the fix when ``level`` is not a
    :class:`ForagingLevel` of ``env``'s agent and food counts (shapes only: checked while
    tracing, free in compiled code)."""
    if not isinstance(level, ForagingLevel):
        raise EnvInputError(
            f"{env.name}: a level must be a ForagingLevel (lamella.envs.multi_agent.lbf.ForagingLevel), "
            f"got {type(level).__name__}; build one with env.sample_level(key, params)."
        )
    n, food = env.num_agents, env.max_num_food
    expected = {
        "agent_positions": (n, 2),
        "agent_levels": (n,),
        "food_positions": (food, 2),
        "food_levels": (food,),
    }
    for name, shape in expected.items():
        got = jnp.shape(getattr(level, name))
        if got != shape:
            raise EnvInputError(
                f"{env.name}: ForagingLevel.{name} has shape {got}, but this env has {n} agents and "
                f"{food} food slots, so it must be {shape}; make the level for this env "
                "(env.sample_level) or build the env with the level's players / max_num_food."
            )


def level_of(state: LevelBasedForagingState) -> ForagingLevel:
    """The level of a state: its agents and its food (uneaten) where they are now."""
    return ForagingLevel(
        agent_positions=state.agent_positions,
        agent_levels=state.agent_levels,
        food_positions=state.food_positions,
        food_levels=state.food_levels,
    )


def state_of_level(level: ForagingLevel) -> LevelBasedForagingState:
    """The state an episode on ``level`` starts in (time 0; the reward normaliser is the sum
    of its food levels, as at reset)."""
    food_levels = jnp.asarray(level.food_levels, jnp.int32)
    return LevelBasedForagingState(
        agent_positions=jnp.asarray(level.agent_positions, jnp.int32),
        agent_levels=jnp.asarray(level.agent_levels, jnp.int32),
        food_positions=jnp.asarray(level.food_positions, jnp.int32),
        food_levels=food_levels,
        food_spawned=jnp.sum(food_levels).astype(jnp.float32),
        time=jnp.zeros((), jnp.int32),
    )


def sample_level(env: LevelBasedForaging, key: jax.Array, params: LevelBasedForagingParams) -> ForagingLevel:
    """A random level from the env's own reset distribution (DR)."""
    return level_of(env.reset_env(key, params)[1])


def levels_equal(a: ForagingLevel, b: ForagingLevel) -> jax.Array:
    """bool ``()``: the same agents (cells and levels, in order) and the same food; an empty
    food slot (level 0) matches any empty slot, wherever its stale position says it lies."""
    present = a.food_levels > 0
    same_food = jnp.all(a.food_levels == b.food_levels) & jnp.all(
        jnp.where(present[:, None], a.food_positions == b.food_positions, True)
    )
    same_agents = jnp.all(a.agent_positions == b.agent_positions) & jnp.all(a.agent_levels == b.agent_levels)
    return same_agents & same_food


def is_valid_level(env: LevelBasedForaging, level: ForagingLevel) -> jax.Array:
    """bool ``()``: ``level`` keeps the rules of ``env``'s reset (vmappable; the check that
    generated levels, edited levels and the teacher's levels are levels reset could draw).

    Agents on distinct cells of the grid, their levels in ``[min_player_level,
    max_player_level]``; every food present (level > 0) on an interior cell without an agent,
    clear of the other foods by the spacing rule of the env's ``rules``, its level in reset's
    ``[low, cap]`` (the cap: ``max_food_level``, or the sum of the three lowest agent levels;
    ``force_coop``: exactly the cap). Where an empty slot (level 0) lies is not checked.
    """
    from lamella.envs.multi_agent.lbf.env import _adjacent_food, _near_food

    check_level_fits(env, level)
    agents = jnp.asarray(level.agent_positions, jnp.int32)
    agent_levels = jnp.asarray(level.agent_levels, jnp.int32)
    foods = jnp.asarray(level.food_positions, jnp.int32)
    food_levels = jnp.asarray(level.food_levels, jnp.int32)
    n, num_food = env.num_agents, env.max_num_food
    on_grid = jnp.all((agents >= 0) & (agents < jnp.asarray([env.rows, env.cols])))
    same_cell = jnp.all(agents[:, None, :] == agents[None, :, :], -1) & ~jnp.eye(n, dtype=jnp.bool_)
    agent_levels_ok = jnp.all((agent_levels >= env.min_player_level) & (agent_levels <= env.max_player_level))
    present = food_levels > 0
    interior = (foods >= 1) & (foods <= jnp.asarray([env.rows - 2, env.cols - 2]))
    under_agent = jnp.any(jnp.all(foods[:, None, :] == agents[None, :, :], -1), -1)
    near = _adjacent_food if env.jumanji else _near_food
    crowded = near(foods[:, None, 0], foods[:, None, 1], foods[None, :, 0], foods[None, :, 1])
    crowded &= present[:, None] & present[None, :] & ~jnp.eye(num_food, dtype=jnp.bool_)
    cap = _food_cap(env, agent_levels)
    low = cap if env.force_coop else jnp.minimum(jnp.asarray(env.min_food_level, jnp.int32), cap)
    food_ok = jnp.all(interior, -1) & ~under_agent & (food_levels >= low) & (food_levels <= cap)
    return (
        on_grid
        & ~jnp.any(same_cell)
        & agent_levels_ok
        & jnp.all(jnp.where(present, food_ok, True))
        & ~jnp.any(crowded)
        & jnp.all(food_levels >= 0)
    )


def _choose(u: jax.Array, allowed: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(index, any)``: a uniform index among the True entries of a flat ``allowed``."""
    count = jnp.sum(allowed.astype(jnp.int32))
    k = jnp.minimum(jnp.floor(u * count.astype(jnp.float32)).astype(jnp.int32), jnp.maximum(count - 1, 0))
    return jnp.argmax(jnp.cumsum(allowed.astype(jnp.int32)) > k), count > 0


def _food_cap(env: LevelBasedForaging, agent_levels: jax.Array) -> jax.Array:
    if env.max_food_level is not None:
        return jnp.asarray(env.max_food_level, jnp.int32)
    return jnp.sum(jnp.sort(agent_levels)[: min(3, env.num_agents)]).astype(jnp.int32)


def _one_edit(env: LevelBasedForaging, key: jax.Array, level: ForagingLevel) -> ForagingLevel:
    from lamella.envs.multi_agent.lbf.env import _adjacent_food, _near_food

    rows, cols, n = env.rows, env.cols, env.num_agents
    u = jax.random.uniform(key, (4,))
    kind = jnp.minimum(jnp.floor(u[0] * 4).astype(jnp.int32), 3)
    agent = jnp.minimum(jnp.floor(u[1] * n).astype(jnp.int32), n - 1)
    present = level.food_levels > 0
    food, has_food = _choose(u[1], present)
    step = jnp.where(u[3] < 0.5, -1, 1).astype(jnp.int32)
    cell_row = jnp.asarray(np.arange(rows * cols) // cols, jnp.int32)
    cell_col = jnp.asarray(np.arange(rows * cols) % cols, jnp.int32)
    on_agent = jnp.any(
        (cell_row[:, None] == level.agent_positions[None, :, 0])
        & (cell_col[:, None] == level.agent_positions[None, :, 1]),
        -1,
    )

    # Move an agent: a cell without another agent and without food.
    others = jnp.arange(n) != agent
    on_other = jnp.any(
        (cell_row[:, None] == level.agent_positions[None, :, 0])
        & (cell_col[:, None] == level.agent_positions[None, :, 1])
        & others[None, :],
        -1,
    )
    on_food = jnp.any(
        (cell_row[:, None] == level.food_positions[None, :, 0])
        & (cell_col[:, None] == level.food_positions[None, :, 1])
        & present[None, :],
        -1,
    )
    cell, free = _choose(u[2], ~on_other & ~on_food)
    moved_agent = jnp.where(free, jnp.stack([cell_row[cell], cell_col[cell]]), level.agent_positions[agent])
    agent_positions = level.agent_positions.at[agent].set(
        jnp.where(kind == MOVE_AGENT, moved_agent, level.agent_positions[agent])
    )

    # Move a food: an interior cell without an agent, clear of the other foods (reset's rule).
    near = _adjacent_food if env.jumanji else _near_food
    interior = (cell_row >= 1) & (cell_row <= rows - 2) & (cell_col >= 1) & (cell_col <= cols - 2)
    other_food = present & (jnp.arange(env.max_num_food) != food)
    crowded = jnp.any(
        near(
            cell_row[:, None],
            cell_col[:, None],
            level.food_positions[None, :, 0],
            level.food_positions[None, :, 1],
        )
        & other_food[None, :],
        -1,
    )
    spot, room = _choose(u[2], interior & ~on_agent & ~crowded)
    moved_food = jnp.where(
        room & has_food, jnp.stack([cell_row[spot], cell_col[spot]]), level.food_positions[food]
    )
    food_positions = level.food_positions.at[food].set(
        jnp.where(kind == MOVE_FOOD, moved_food, level.food_positions[food])
    )

    # Agent level +-1 within the env's range.
    new_agent_level = jnp.clip(level.agent_levels[agent] + step, env.min_player_level, env.max_player_level)
    agent_levels = level.agent_levels.at[agent].set(
        jnp.where(kind == AGENT_LEVEL, new_agent_level, level.agent_levels[agent])
    )

    # Food level +-1 within [min_food_level, cap] (force_coop: the cap).
    cap = _food_cap(env, agent_levels)
    low = cap if env.force_coop else jnp.minimum(jnp.asarray(env.min_food_level, jnp.int32), cap)
    new_food_level = jnp.clip(level.food_levels[food] + step, low, cap)
    food_levels = level.food_levels.at[food].set(
        jnp.where((kind == FOOD_LEVEL) & has_food, new_food_level, level.food_levels[food])
    )
    # An agent-level edit moves the cap: every food stays in [low, cap], as reset draws it.
    food_levels = jnp.where(present, jnp.clip(food_levels, low, cap), 0).astype(jnp.int32)
    return ForagingLevel(agent_positions, agent_levels, food_positions, food_levels)


def mutate_level(
    env: LevelBasedForaging,
    key: jax.Array,
    level: ForagingLevel,
    params: LevelBasedForagingParams | None = None,
    num_edits: Any = 1,
) -> ForagingLevel:
    """``level`` after ``num_edits`` random edits (see the module docs; ACCEL's mutator).

    ``num_edits`` may be traced (an integer); ``params`` is accepted for the level-family signature
    ``mutate_level(key, level, params, num_edits)`` (no edit depends on it).

    Raises:
        EnvInputError: ``level`` does not fit ``env``, or ``num_edits`` is not a whole number >= 0
            (a float such as 2.5 or a bool, which would be cut to an int silently).
    """
    check_level_fits(env, level)
    try:
        num_edits = _inputs.count_argument(num_edits, "num_edits", f"{_inputs.env_label(env)}.mutate_level")
    except ValueError as error:
        raise EnvInputError(str(error)) from None

    def body(i: jax.Array, current: ForagingLevel) -> ForagingLevel:
        return _one_edit(env, jax.random.fold_in(key, i), current)

    return jax.lax.fori_loop(0, jnp.asarray(num_edits, jnp.int32), body, level)


class AutoReplayState(struct.PyTreeNode):
    """State of :class:`AutoReplay`: the env's state and the level the episode started from.

    Attributes:
        env_state: the wrapped env's state.
        level: the :class:`ForagingLevel` an ended episode restarts.
    """

    env_state: Any
    level: ForagingLevel


class AutoReplay(Wrapper):
    """Restart the *same* level when an episode ends (PLR / ACCEL rollouts on buffer levels).

    The level is kept beside the env's state; ``info["final_observation"]`` is the observation
    that ended the episode, as with :class:`~lamella.envs.wrappers.AutoReset`. ``reset`` starts
    on a random level (the env's reset), ``reset_to_level`` on a given one. Wraps a bare
    :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging` (``make(..., autoreset=False)``).
    """

    wraps_state = True

    def __init__(self, env: Any):
        from lamella.envs.multi_agent.lbf.env import LevelBasedForaging

        if not isinstance(env, LevelBasedForaging):
            raise TypeError(
                f"lbf.AutoReplay wraps a bare LevelBasedForaging, got {env!r}; build it with "
                "lamella.envs.make('Foraging-8x8-2p-2f-v3', autoreset=False)."
            )
        super().__init__(env)

    def reset_env(
        self, key: jax.Array, params: LevelBasedForagingParams
    ) -> tuple[jax.Array, AutoReplayState]:
        obs, state = self.env.reset_env(key, params)
        return obs, AutoReplayState(state, level_of(state))

    def reset_to_level(
        self, key: jax.Array, level: ForagingLevel, params: LevelBasedForagingParams
    ) -> tuple[jax.Array, AutoReplayState]:
        inner: Any = self.env  # a LevelBasedForaging (checked in __init__)
        obs, state = inner.reset_to_level(key, level, params)
        return obs, AutoReplayState(state, level)

    def step_env(
        self, key: jax.Array, state: AutoReplayState, action: Any, params: LevelBasedForagingParams
    ) -> StepOutput:
        obs, next_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        done = episode_done(terminated, truncated)
        start = state_of_level(state.level)
        restarted = jax.tree.map(lambda s, x: jnp.where(done, s, x), start, next_state)
        info = {**info, "final_observation": obs}
        inner: Any = self.env
        return (
            inner.get_obs(restarted, params),
            AutoReplayState(restarted, state.level),
            reward,
            terminated,
            truncated,
            info,
        )
