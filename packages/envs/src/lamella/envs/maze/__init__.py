"""The AMaze family: minimax's maze for unsupervised environment design (UED).

A level (:class:`MazeLevel`) is a pytree: walls, goal, the agent's start. :class:`AMaze` is
the student env (MiniGrid dynamics and observations, checked step by step against
``minigrid==3.2.0``); ``reset`` draws a random level and ``reset_to_level`` starts on a given
one. Beside it: the random level generator :func:`sample_dr_level`, the mutator
:func:`mutate_level`, the comparator :func:`levels_equal`, the text format
(:func:`parse_maze` / :func:`format_maze`), the 16 named test mazes (:data:`NAMED_MAZES`,
:func:`named_maze`, :func:`named_maze_sampler`) and :func:`render_level`.

Registered ids (:func:`register_all`): ``AMaze-{H}x{W}-v0`` is a random-level (DR) maze of
that interior size (the border wall is not counted): ``AMaze-13x13-v0`` is minimax's maze
training setting (60 walls drawn with replacement, 250 steps), ``AMaze-15x15-v0`` the same
with 15x15 and 80 walls (the budget scaled with the area). The named mazes are not registered
ids: :func:`named_env` builds an env that resets to one, :func:`named_maze` gives its level.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from lamella.envs.maze.env import (
    ACTION_NAMES,
    MEMORY_BOTTOM,
    MEMORY_CLUE,
    MEMORY_TOP,
    NUM_ACTIONS,
    AMaze,
    AutoReplay,
)
from lamella.envs.maze.levels import (
    check_level_fits,
    format_maze,
    levels_equal,
    mutate_level,
    parse_maze,
    sample_dr_level,
)
from lamella.envs.maze.named import (
    NAMED_MAZES,
    crossing,
    four_rooms,
    named_maze,
    named_maze_sampler,
    perfect_maze,
)
from lamella.envs.maze.render import render_level
from lamella.envs.maze.teacher import AMazeTeacher, AMazeTeacherState
from lamella.envs.maze.types import AMazeParams, AMazeState, MazeError, MazeLevel

__all__ = [
    "ACTION_NAMES",
    "DR_IDS",
    "MEMORY_BOTTOM",
    "MEMORY_CLUE",
    "MEMORY_TOP",
    "NAMED_MAZES",
    "NUM_ACTIONS",
    "AMaze",
    "AMazeParams",
    "AMazeState",
    "AMazeTeacher",
    "AMazeTeacherState",
    "AutoReplay",
    "MazeError",
    "MazeLevel",
    "check_level_fits",
    "crossing",
    "format_maze",
    "four_rooms",
    "levels_equal",
    "mutate_level",
    "named_env",
    "named_maze",
    "named_maze_sampler",
    "parse_maze",
    "perfect_maze",
    "register_all",
    "render_level",
    "sample_dr_level",
]

# Random-level ids: interior size -> the settings of AMazeParams.
DR_IDS: dict[str, dict[str, Any]] = {
    "AMaze-13x13-v0": {"height": 13, "width": 13, "n_walls": 60, "replace_wall_pos": True},
    "AMaze-15x15-v0": {"height": 15, "width": 15, "n_walls": 80, "replace_wall_pos": True},
}


def named_env(name: str, **overrides: Any) -> tuple[AMaze, AMazeParams]:
    """``(env, params)``: a bare :class:`AMaze` whose ``reset`` draws the named maze ``name``.

    ``params`` are the maze's size and horizon (:func:`named_maze_sampler`), with ``overrides``
    (fields of :class:`AMazeParams`) applied. Wrap the env in ``AutoReset`` or ``AutoReplay``
    as needed; for PerfectMazeXL prefer ``reset_to_level`` in an evaluation loop (a reset there
    generates a 101x101 maze, which ``AutoReset`` would compute on every step).

    Raises:
        MazeError: an unknown name.
    """
    sample, params = named_maze_sampler(name)
    env = AMaze(level_sampler=sample, **{**_settings(params), **overrides})
    return env, env.default_params


def _settings(params: AMazeParams) -> dict[str, Any]:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def register_all(register: Callable[..., Any]) -> None:
    """Register the ``AMaze-...-v0`` ids with ``register`` (``lamella.envs.register``)."""
    for env_id, settings in DR_IDS.items():
        register(env_id, functools.partial(AMaze, **settings))
