"""Level-Based Foraging (``lbforaging==2.0.0`` rules and ids).

Registered ids (:func:`register_all`), exactly lbforaging 2.0's:
``Foraging{-2s}-{s}x{s}-{p}p-{f}f{-coop}-v3`` for grid side ``s`` in 5..19,
``p`` in 2..9 players and ``f`` in 1..4 food (1920 ids). ``-2s`` gives sight 2
(partial view; the full grid otherwise) and ``-coop`` forces cooperation
(every food needs a group). Every id has player levels 1..2, food levels up
to the sum of the three lowest player levels, 50 steps, no penalty and
normalised rewards, as lbforaging registers them.

Levels (UED): every LBF env is level-based. A :class:`ForagingLevel` is a start layout (agents
and food, cells and levels); ``env.reset_to_level``, ``env.sample_level`` (the reset
distribution), ``env.mutate_level``, ``env.levels_equal``, ``env.render_level`` and the
:class:`AutoReplay` wrapper are in :mod:`lamella.envs.multi_agent.lbf.levels`; named test levels
(fixed layouts written out as text: :data:`NAMED_LEVELS`, :func:`named_level`,
:func:`parse_level`) in :mod:`lamella.envs.multi_agent.lbf.named`. :func:`is_valid_level` checks
that a level keeps reset's rules. :class:`ForagingTeacher` is the teacher's MDP (PAIRED's
adversary): a level built one agent or food per step, always valid.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from lamella.envs.multi_agent.lbf.env import ACTION_NAMES, NUM_ACTIONS, LevelBasedForaging
from lamella.envs.multi_agent.lbf.levels import AutoReplay, AutoReplayState, ForagingLevel, is_valid_level
from lamella.envs.multi_agent.lbf.named import NAMED_LEVELS, named_level, named_levels_for, parse_level
from lamella.envs.multi_agent.lbf.teacher import ForagingTeacher, ForagingTeacherState
from lamella.envs.multi_agent.lbf.types import LevelBasedForagingParams, LevelBasedForagingState

__all__ = [
    "ACTION_NAMES",
    "NAMED_LEVELS",
    "NUM_ACTIONS",
    "AutoReplay",
    "AutoReplayState",
    "ForagingLevel",
    "ForagingTeacher",
    "ForagingTeacherState",
    "LevelBasedForaging",
    "LevelBasedForagingParams",
    "LevelBasedForagingState",
    "env_ids",
    "is_valid_level",
    "named_level",
    "named_levels_for",
    "parse_level",
    "register_all",
]

SIZES = range(5, 20)
PLAYERS = range(2, 10)
FOODS = range(1, 5)


@functools.cache
def _id_and_kwargs() -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for size, players, food, coop, partial in itertools.product(
        SIZES, PLAYERS, FOODS, (True, False), (True, False)
    ):
        env_id = (
            f"Foraging{'-2s' if partial else ''}-{size}x{size}-{players}p-{food}f{'-coop' if coop else ''}-v3"
        )
        kwargs = {
            "players": players,
            "field_size": size,
            "max_num_food": food,
            "sight": 2 if partial else size,
            "force_coop": coop,
        }
        out.append((env_id, kwargs))
    return tuple(out)


@functools.cache
def _factories() -> dict[str, Callable[..., LevelBasedForaging]]:
    # One factory object per id, so registering twice is a no-op rather than a clash.
    return {env_id: functools.partial(LevelBasedForaging, **kwargs) for env_id, kwargs in _id_and_kwargs()}


def env_ids() -> list[str]:
    """The 1920 lbforaging 2.0 ids, in lbforaging's registration order."""
    return [env_id for env_id, _ in _id_and_kwargs()]


# The ids Mava and the LBF papers report on; every other size is registered as a variant, so
# `lamella demo` and `lamella animate` walk these few instead of all 1920.
MAIN_IDS = (
    "Foraging-8x8-2p-2f-v3",
    "Foraging-8x8-2p-2f-coop-v3",
    "Foraging-2s-8x8-2p-2f-coop-v3",
    "Foraging-10x10-3p-3f-v3",
    "Foraging-2s-10x10-3p-3f-v3",
    "Foraging-15x15-4p-3f-v3",
)


def register_all(register: Callable[..., Any]) -> None:
    """Register every ``Foraging-...-v3`` id with ``register`` (``lamella.envs.register``).

    The ids of :data:`MAIN_IDS` are registered as main ids, the others as variants
    (``lamella.envs.registered(variants=False)`` leaves them out).
    """
    for env_id, factory in _factories().items():
        register(env_id, factory, variant=env_id not in MAIN_IDS)
