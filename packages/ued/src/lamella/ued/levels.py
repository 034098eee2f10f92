"""Levels as env params: how a runner hands each env its own level, and the level family of an env.

A level-based env (``env.reset_to_level(key, level, params)``) is trained on given levels by
passing them as env params: :class:`OnLevel` wraps the env so that its params are
:class:`LevelParams` ``(level, env_params)``, and ``reset`` starts on ``level``. With
lamella-agents' ``make_rollout(..., params_axis=0)`` each env gets its own level, and a runner
hands new levels every iteration without rebuilding anything::

    env = OnLevel(AutoReplay(AMaze()))             # restart the same level after each episode
    rollout = make_rollout(env, num_steps, num_envs, params_axis=0)
    state = rollout.init(key, LevelParams(levels, tiled_params))

A :class:`LevelFamily` bundles what an autocurriculum needs from an env: a random level
generator (DR), a mutator (ACCEL), a comparator (the buffer's de-duplication), the wrapper that
replays a level, the named test levels, and the teacher's MDP that builds a level step by step
(PAIRED). :func:`level_family` builds it for the envs that
have one: AMaze, and Level-Based Foraging (multi-agent; :func:`foraging_family`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from lamella.envs.environment import Environment, StepOutput, Wrapper

__all__ = [
    "LevelFamily",
    "LevelParams",
    "OnLevel",
    "foraging_family",
    "level_family",
    "maze_solvable",
    "tile_params",
]


class LevelParams(struct.PyTreeNode):
    """Env params of an :class:`OnLevel` env: the level to start on and the inner env's params.

    Attributes:
        level: the level (a pytree of the env's level type).
        env_params: the inner env's params.
    """

    level: Any
    env_params: Any


class OnLevel(Wrapper):
    """Params are :class:`LevelParams`; ``reset`` starts on ``params.level``.

    Wrap an env that has ``reset_to_level(key, level, params)``; what happens when an episode
    ends is the inner wrapper's choice (a wrapper that replays the level, or ``AutoReset`` for a
    fresh random level as DR wants). The inner wrappers must keep the bare env's state.
    """

    def __init__(self, env: Environment[Any, Any]):
        super().__init__(env)
        if not hasattr(env, "reset_to_level"):
            raise TypeError(
                f"OnLevel: {env.name} has no reset_to_level(key, level, params); it needs a level-based env."
            )

    def reset_env(self, key: jax.Array, params: LevelParams) -> tuple[Any, Any]:
        _check(params)
        inner: Any = self.env  # checked in __init__: it has reset_to_level
        return inner.reset_to_level(key, params.level, params.env_params)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: LevelParams) -> StepOutput:
        _check(params)
        return self.env.step_env(key, state, action, params.env_params)

    def observation_space(self, params: Any = None) -> Any:
        return self.env.observation_space(params.env_params if isinstance(params, LevelParams) else params)

    def action_space(self, params: Any = None) -> Any:
        return self.env.action_space(params.env_params if isinstance(params, LevelParams) else params)

    def render(self, state: Any, params: Any = None) -> jax.Array:
        return self.env.render(state, params.env_params if isinstance(params, LevelParams) else params)


def _check(params: Any) -> None:
    if not isinstance(params, LevelParams):
        raise TypeError(
            f"OnLevel envs take LevelParams(level, env_params) as params, got {type(params).__name__}; "
            "build them with lamella.ued.levels.LevelParams."
        )


def tile_params(env_params: Any, num: int) -> Any:
    """``env_params`` with a leading axis of ``num`` on every traced leaf (for ``params_axis=0``)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (num, *jnp.shape(x))), env_params)


class LevelFamily(NamedTuple):
    """What an autocurriculum needs from a level-based env.

    Attributes:
        env: the bare env (with ``reset_to_level``).
        env_params: its params.
        sample_level: ``sample_level(key, env_params) -> level``: a random (DR) level.
        mutate_level: ``mutate_level(key, level, env_params, num_edits) -> level`` (ACCEL).
        levels_equal: ``levels_equal(a, b) -> bool ()``.
        replay_wrapper: wraps the bare env so that an ended episode restarts the same level.
        named_level: ``named_level(name) -> (level, env_params)``: a named test level.
        level_stats: ``level_stats(level) -> {name: float32 ()}``: numbers to log per level
            (AMaze: ``walls``, ``solvable`` (1 where a path leads from the start to the goal,
            :func:`maze_solvable`) and ``goal_distance`` (Manhattan, start to goal)).
        named_levels: the names ``named_level`` takes.
        network: the student network the runners build: ``"gridworld"`` (minimax's student,
            on AMaze's image-and-direction observation) or ``"mlp"`` (lamella-agents'
            ``FeedForwardActorCriticNet`` on a vector observation). On a multi-agent env
            (``env.num_agents > 1``) the network maps the last axis of each agent's
            observation, so every agent acts with the same parameters (parameter sharing).
        solved_above: an episode is solved when its return (a multi-agent env: the team's,
            summed over agents) is above this (AMaze: 0, any goal reached; LBF: 1 - 1e-3,
            every food eaten).
        level_image: ``image(level, tile) -> RGB uint8 (h, w, 3)``, a NumPy drawer of one
            level (host arrays) for the screenshots (:mod:`lamella.ued.screenshots`); None: the
            runners refuse ``screenshot_every > 0``.
        teacher: ``teacher(noise_dim) -> (env, params)``: the teacher's MDP that builds this
            family's levels (PAIRED and the minimax adversary, :mod:`lamella.ued.paired`): an env
            with ``num_steps(params)`` and ``level_of(state)`` whose episode builds one level,
            observed as ``{"image", "time"[, "noise"]}`` (AMaze:
            :class:`lamella.envs.maze.AMazeTeacher`; LBF:
            :class:`lamella.envs.multi_agent.lbf.ForagingTeacher`). None: PAIRED needs
            ``teacher=`` passed to its runner.
    """

    env: Environment[Any, Any]
    env_params: Any
    sample_level: Callable[[jax.Array, Any], Any]
    mutate_level: Callable[[jax.Array, Any, Any, Any], Any]
    levels_equal: Callable[[Any, Any], jax.Array]
    replay_wrapper: Callable[[Environment[Any, Any]], Environment[Any, Any]]
    named_level: Callable[[str], tuple[Any, Any]]
    level_stats: Callable[[Any], dict[str, jax.Array]]
    named_levels: Sequence[str] = ()
    network: str = "gridworld"
    solved_above: float = 0.0
    level_image: Callable[[Any, int], Any] | None = None
    teacher: Callable[[int], tuple[Environment[Any, Any], Any]] | None = None


def level_family(env: Environment[Any, Any], env_params: Any) -> LevelFamily:
    """The :class:`LevelFamily` of ``env`` (a bare AMaze, or any wrapper of one).

    Raises:
        TypeError: the env has no level family here, naming the envs that do.
    """
    from lamella.envs import check_env_object, maze
    from lamella.ued.screenshots import maze_level_image

    check_env_object(env, env_params, "level_family", takes_id=False)
    bare = env.unwrapped
    if isinstance(bare, maze.AMaze):

        def stats(level: Any) -> dict[str, jax.Array]:
            distance = jnp.abs(level.goal_pos - level.agent_pos).sum()
            return {
                "walls": jnp.sum(level.wall_map).astype(jnp.float32),
                "solvable": maze_solvable(level).astype(jnp.float32),
                "goal_distance": distance.astype(jnp.float32),
            }

        return LevelFamily(
            env=bare,
            env_params=env_params,
            sample_level=maze.sample_dr_level,
            mutate_level=maze.mutate_level,
            levels_equal=maze.levels_equal,
            replay_wrapper=maze.AutoReplay,
            named_level=maze.named_maze,
            level_stats=stats,
            named_levels=tuple(maze.NAMED_MAZES),
            level_image=maze_level_image,
            # The teacher builds levels of the students' size (their params: height, width).
            teacher=lambda noise_dim: (maze.AMazeTeacher(noise_dim=noise_dim), env_params),
        )
    from lamella.envs.multi_agent import lbf

    if isinstance(bare, lbf.LevelBasedForaging):
        return foraging_family(bare, env_params)
    raise TypeError(
        f"lamella.ued has no level family for {bare.name}; level-based envs with one: AMaze "
        "(lamella.envs.maze: AMaze-13x13-v0, AMaze-15x15-v0) and Level-Based Foraging "
        "(lamella.envs.multi_agent.lbf: Foraging-8x8-2p-2f-coop-v3 and the other Foraging ids). "
        "Train on one of those, or build a LevelFamily for your env and pass it to the runner."
    )


def foraging_family(env: Any, env_params: Any) -> LevelFamily:
    """The :class:`LevelFamily` of a bare Level-Based Foraging env (multi-agent): levels are
    start layouts (:class:`lamella.envs.multi_agent.lbf.ForagingLevel`), DR levels the env's
    reset distribution, ACCEL's edits move agents and food and change their levels; the
    student is an MLP shared by the agents; an episode is solved when the team eats every food
    (normalised rewards sum to 1). The named levels are those of
    :data:`lamella.envs.multi_agent.lbf.NAMED_LEVELS` that fit the env (its grid, agents and
    food), played at the env's horizon.

    Logged per level: ``food`` (foods placed), ``food_level`` (their summed levels),
    ``coop_food`` (the fraction of foods above every single agent's level: they need a group),
    ``solvable`` (1 when the agents together reach every food's level) and ``agent_level``
    (the agents' summed levels).

    The teacher (PAIRED, the minimax adversary) is
    :class:`lamella.envs.multi_agent.lbf.ForagingTeacher`: agents, then foods, one per step,
    each with its level, always within reset's rules.
    """
    from lamella.envs.multi_agent import lbf
    from lamella.ued.screenshots import foraging_level_image

    if not isinstance(env, lbf.LevelBasedForaging):
        raise TypeError(f"foraging_family takes a bare LevelBasedForaging, got {env!r}.")
    if not bool(env.default_params.normalize_reward):
        raise ValueError(
            "foraging_family: the env's rewards must be normalised (normalize_reward=True), so that "
            "eating every food pays the team 1 and 'solved' means that."
        )

    def stats(level: Any) -> dict[str, jax.Array]:
        present = level.food_levels > 0
        count = jnp.sum(present)
        team = jnp.sum(level.agent_levels)
        coop = present & (level.food_levels > jnp.max(level.agent_levels))
        return {
            "food": count.astype(jnp.float32),
            "food_level": jnp.sum(level.food_levels).astype(jnp.float32),
            "coop_food": (jnp.sum(coop) / jnp.maximum(count, 1)).astype(jnp.float32),
            "solvable": jnp.all(level.food_levels <= team).astype(jnp.float32),
            "agent_level": team.astype(jnp.float32),
        }

    def named_level(name: str) -> tuple[Any, Any]:
        level = lbf.named_level(name, env)  # checked to fit the env, as its reset would draw it
        return level, env_params

    return LevelFamily(
        env=env,
        env_params=env_params,
        sample_level=env.sample_level,
        mutate_level=env.mutate_level,
        levels_equal=env.levels_equal,
        replay_wrapper=lbf.AutoReplay,
        named_level=named_level,
        level_stats=stats,
        named_levels=lbf.named_levels_for(env),
        network="mlp",
        solved_above=1.0 - 1e-3,
        level_image=functools.partial(
            foraging_level_image, shape=(env.rows, env.cols), food_level_bound=env.food_level_bound
        ),
        teacher=lambda noise_dim: (lbf.ForagingTeacher(env, noise_dim=noise_dim), env_params),
    )


def maze_solvable(level: Any) -> jax.Array:
    """bool ``()``: a path of free cells leads from an AMaze level's start to its goal
    (4-neighbour flood fill from the start; vmappable)."""
    free = ~jnp.asarray(level.wall_map, bool)
    start = jnp.zeros_like(free).at[level.agent_pos[1], level.agent_pos[0]].set(True)

    def grow(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        reach, _ = carry
        padded = jnp.pad(reach, 1)
        around = padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:]
        grown = reach | (around & free)
        return grown, jnp.any(grown != reach)

    reach, _ = jax.lax.while_loop(lambda carry: carry[1], grow, (start, jnp.asarray(True)))
    return reach[level.goal_pos[1], level.goal_pos[0]]
