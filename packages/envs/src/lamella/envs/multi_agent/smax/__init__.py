"""SMAX: StarCraft-like micromanagement with JaxMARL 0.2.0's rules and its heuristic enemy.

Registered ids (:func:`register_all`): ``SMAX-<scenario>-v0`` for every scenario of
:data:`SCENARIOS` (the SMAC maps JaxMARL's SMAX defines)::

    SMAX-3m-v0      SMAX-2s3z-v0        SMAX-3s_vs_5z-v0
    SMAX-8m-v0      SMAX-3s5z-v0        SMAX-6h_vs_8z-v0
    SMAX-25m-v0     SMAX-3s5z_vs_3s6z-v0
    SMAX-5m_vs_6m-v0  SMAX-10m_vs_11m-v0  SMAX-27m_vs_30m-v0

Every id takes the params fields (``max_episode_steps``, ``won_battle_bonus``,
``walls_cause_death``, ``see_enemy_actions``, ``enemy_shoots``) and the constructor's
``attack_mode``, ``map_width``, ``map_height``, ``world_steps_per_env_step`` and
``time_per_step`` as ``make`` overrides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lamella.envs.multi_agent.smax.env import (
    NUM_MOVE_ACTIONS,
    SCENARIOS,
    SMAX,
    STOP,
    UNIT_SHORTHANDS,
    UNIT_STATS,
    UNIT_TYPES,
)
from lamella.envs.multi_agent.smax.types import SMAXNoise, SMAXParams, SMAXState

__all__ = [
    "NUM_MOVE_ACTIONS",
    "SCENARIOS",
    "SMAX",
    "STOP",
    "UNIT_SHORTHANDS",
    "UNIT_STATS",
    "UNIT_TYPES",
    "SMAXNoise",
    "SMAXParams",
    "SMAXState",
    "env_ids",
    "register_all",
]

# The scenarios Mava and the JaxMARL paper report on; the other sizes are registered as variants.
MAIN_SCENARIOS = ("3m", "2s3z", "3s5z", "6h_vs_8z", "3s5z_vs_3s6z", "5m_vs_6m")


def _factory(scenario: str) -> Callable[..., SMAX]:
    def factory(
        attack_mode: str = "closest",
        map_width: float = 32.0,
        map_height: float = 32.0,
        world_steps_per_env_step: int = 8,
        time_per_step: float = 1.0 / 16,
    ) -> SMAX:
        return SMAX(
            scenario,
            attack_mode=attack_mode,
            map_width=map_width,
            map_height=map_height,
            world_steps_per_env_step=world_steps_per_env_step,
            time_per_step=time_per_step,
        )

    factory.__name__ = f"smax_{scenario}"
    return factory


@functools.cache
def _factories() -> dict[str, Callable[..., SMAX]]:
    return {f"SMAX-{scenario}-v0": _factory(scenario) for scenario in SCENARIOS}


def env_ids() -> list[str]:
    """The ``SMAX-...-v0`` ids, in the order of :data:`SCENARIOS`."""
    return list(_factories())


def register_all(register: Callable[..., Any]) -> None:
    """Register every ``SMAX-...-v0`` id with ``register`` (``lamella.envs.register``)."""
    for scenario, factory in zip(SCENARIOS, _factories().values()):
        register(f"SMAX-{scenario}-v0", factory, variant=scenario not in MAIN_SCENARIOS)
