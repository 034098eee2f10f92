"""Multi-Robot Warehouse (``rware==2.0.0`` rules and ids).

Registered ids (:func:`register_all`), rware 2.0's:
``rware-{size}-{N}ag{-easy|-hard}-v2`` for size tiny, small, medium or large,
``N`` in 1..19 agents and a request queue of ``int(N * 2)`` (``-easy``),
``N`` (no suffix) or ``int(N / 2)`` (``-hard``) shelves; every id has column
height 8, sensor range 1, individual rewards, a 500-step limit and no
inactivity limit, as rware registers them. rware also registers
``rware-tiny-{16..19}ag-easy-v2``, whose queue (32 to 38 shelves) is as large
as or larger than tiny's 32 shelves, so rware fails at reset or at the first
delivery; lamella leaves those four out (224 ids).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from lamella.envs.multi_agent.rware.env import (
    ACTION_NAMES,
    COLLISIONS,
    DIFFICULTIES,
    DIRECTION_NAMES,
    NUM_ACTIONS,
    REWARD_TYPES,
    SIZES,
    RobotWarehouse,
    is_highway,
)
from lamella.envs.multi_agent.rware.types import RobotWarehouseParams, RobotWarehouseState

__all__ = [
    "ACTION_NAMES",
    "COLLISIONS",
    "DIFFICULTIES",
    "DIRECTION_NAMES",
    "MAIN_IDS",
    "NUM_ACTIONS",
    "REWARD_TYPES",
    "SIZES",
    "RobotWarehouse",
    "RobotWarehouseParams",
    "RobotWarehouseState",
    "env_ids",
    "is_highway",
    "register_all",
]

AGENTS = range(1, 20)
_SUFFIXES = {"easy": "-easy", "normal": "", "hard": "-hard"}


@functools.cache
def _id_and_kwargs() -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    # rware's registration order: size, then difficulty, then agents.
    for size, difficulty, agents in itertools.product(SIZES, _SUFFIXES, AGENTS):
        queue = int(agents * DIFFICULTIES[difficulty])
        if size == "tiny" and queue >= _tiny_shelves():
            continue
        env_id = f"rware-{size}-{agents}ag{_SUFFIXES[difficulty]}-v2"
        out.append((env_id, {"size": size, "n_agents": agents, "difficulty": difficulty}))
    return tuple(out)


def _tiny_shelves() -> int:
    return RobotWarehouse("tiny", 1).num_shelves


@functools.cache
def _factories() -> dict[str, Callable[..., RobotWarehouse]]:
    # One factory object per id, so registering twice is a no-op rather than a clash.
    return {env_id: functools.partial(RobotWarehouse, **kwargs) for env_id, kwargs in _id_and_kwargs()}


def env_ids() -> list[str]:
    """The 224 registered ids, in rware's registration order."""
    return [env_id for env_id, _ in _id_and_kwargs()]


# Tasks EPyMARL and Mava report on; every other id is registered as a variant, so `lamella demo`
# and `lamella animate` walk these few instead of all 224.
MAIN_IDS = ("rware-tiny-2ag-v2", "rware-tiny-4ag-v2", "rware-small-4ag-v2", "rware-medium-6ag-v2")


def register_all(register: Callable[..., Any]) -> None:
    """Register every ``rware-...-v2`` id with ``register`` (``lamella.envs.register``).

    The ids of :data:`MAIN_IDS` are registered as main ids, the others as variants
    (``lamella.envs.registered(variants=False)`` leaves them out).
    """
    for env_id, factory in _factories().items():
        register(env_id, factory, variant=env_id not in MAIN_IDS)
