"""MinAtar's five games in JAX (Young & Tian 2019, the ``minatar`` package).

Each game follows the ``minatar`` package's rules step for step (checked by
parity tests that copy minatar's internal state into lamella's and compare
the next observation, reward and terminal exactly), with sticky actions
(probability 0.1 by default), difficulty ramping where the game has it, bool
``(10, 10, channels)`` observations and the minimal or full action set.
Registered as ``<Name>-MinAtar``; see ``packages/envs/docs/minatar.md``.
"""

from collections.abc import Callable
from typing import Any

from lamella.envs.minatar._common import FULL_ACTION_SET, MinAtarEnv
from lamella.envs.minatar.asterix import Asterix, AsterixDraws, AsterixParams, AsterixState
from lamella.envs.minatar.breakout import Breakout, BreakoutDraws, BreakoutParams, BreakoutState
from lamella.envs.minatar.freeway import Freeway, FreewayDraws, FreewayParams, FreewayState
from lamella.envs.minatar.seaquest import Seaquest, SeaquestDraws, SeaquestParams, SeaquestState
from lamella.envs.minatar.space_invaders import (
    SpaceInvaders,
    SpaceInvadersDraws,
    SpaceInvadersParams,
    SpaceInvadersState,
)

__all__ = [
    "FULL_ACTION_SET",
    "Asterix",
    "AsterixDraws",
    "AsterixParams",
    "AsterixState",
    "Breakout",
    "BreakoutDraws",
    "BreakoutParams",
    "BreakoutState",
    "Freeway",
    "FreewayDraws",
    "FreewayParams",
    "FreewayState",
    "MinAtarEnv",
    "Seaquest",
    "SeaquestDraws",
    "SeaquestParams",
    "SeaquestState",
    "SpaceInvaders",
    "SpaceInvadersDraws",
    "SpaceInvadersParams",
    "SpaceInvadersState",
    "register_all",
]


def register_all(register: Callable[..., Any]) -> None:
    """Register every MinAtar game with ``register(env_id, factory)``."""
    register("Asterix-MinAtar", Asterix)
    register("Breakout-MinAtar", Breakout)
    register("Freeway-MinAtar", Freeway)
    register("Seaquest-MinAtar", Seaquest)
    register("SpaceInvaders-MinAtar", SpaceInvaders)
