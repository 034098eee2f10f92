"""Multi-agent environments: a leading agent axis of size ``num_agents`` on everything.

Registered ids (see :func:`register_all`):

==================================  ==============================================================
id                                  env
==================================  ==============================================================
``IteratedPrisonersDilemma-v0``     :class:`IteratedMatrixGame`, prisoner's dilemma payoffs
``IteratedMatchingPennies-v0``      :class:`IteratedMatrixGame`, matching pennies
``IteratedStagHunt-v0``             :class:`IteratedMatrixGame`, stag hunt
``IteratedChicken-v0``              :class:`IteratedMatrixGame`, chicken
``IteratedBattleOfTheSexes-v0``     :class:`IteratedMatrixGame`, battle of the sexes
``IteratedMatrixGame-v0``           :class:`IteratedMatrixGame`, any payoff
                                    (``make(..., payoff=...)``; prisoner's dilemma by default)
``InfiniteMatrixGame-v0``           :class:`InfiniteMatrixGame` (prisoner's dilemma by default,
                                    ``payoff=`` and ``gamma=`` overrides)
``CoinGame-v0``                     :class:`~lamella.envs.multi_agent.coin_game.CoinGame` (Pax's
                                    rules; ``payoff=``, ``num_inner_steps=``,
                                    ``num_outer_steps=``, ``pax_quirks=`` overrides)
``IteratedTensorGame-v0``           :class:`IteratedTensorGame`, n players (3-player IPD by default;
                                    ``num_players=``, ``payoff=`` overrides)
``Cournot-v0``, ``Fishery-v0``      :class:`CournotGame`, :class:`Fishery` (continuous actions
                                    ``(n, 1)``; ``num_players=`` override)
``IPDInTheMatrix-v0``,              :class:`~lamella.envs.multi_agent.in_the_matrix.InTheMatrix`
``IMPInTheMatrix-v0``               (STORM), registered by :func:`in_the_matrix.register_all`
``Foraging-8x8-2p-2f-v3`` etc.      :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging`, the
                                    1920 lbforaging 2.0 ids, registered by
                                    :func:`lamella.envs.multi_agent.lbf.register_all`
``rware-tiny-2ag-v2`` etc.          :class:`~lamella.envs.multi_agent.rware.RobotWarehouse`, 224 of
                                    rware 2.0's ids, registered by
                                    :func:`lamella.envs.multi_agent.rware.register_all`

``MPE-simple_spread-v3`` etc.       :class:`~lamella.envs.multi_agent.mpe.MultiParticleEnv`, the
                                    nine mpe2 1.1.1 scenarios, registered by
                                    :func:`lamella.envs.multi_agent.mpe.register_all`
``SMAX-3m-v0`` etc.                 :class:`~lamella.envs.multi_agent.smax.SMAX`, JaxMARL 0.2.0's
                                    SMAX scenarios with its heuristic enemy, registered by
                                    :func:`lamella.envs.multi_agent.smax.register_all`
==================================  ==============================================================

The payoff values of the presets are in :data:`PAYOFFS` and
:mod:`lamella.envs.multi_agent.matrix_game`. ``num_inner_steps`` (iterated
games), ``gamma`` and ``num_steps`` (infinite game) are params fields that
``make`` accepts as overrides. Every id also takes ``payoff=`` (a preset's
factory uses it in place of the preset's payoff), which is validated when the
env is built, so a wrongly shaped payoff fails inside ``make``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lamella.envs.multi_agent import in_the_matrix, lbf, mpe, rware, smax
from lamella.envs.multi_agent.coin_game import (
    COIN_GAME_PAYOFF,
    CoinGame,
    CoinGameParams,
    CoinGameState,
    check_coin_game_payoff,
)
from lamella.envs.multi_agent.economics import (
    CournotGame,
    CournotParams,
    CournotState,
    Fishery,
    FisheryParams,
    FisheryState,
)
from lamella.envs.multi_agent.infinite_matrix_game import (
    InfiniteMatrixGame,
    InfiniteMatrixGameParams,
    InfiniteMatrixGameState,
    memory_one_values,
)
from lamella.envs.multi_agent.lbf import (
    LevelBasedForaging,
    LevelBasedForagingParams,
    LevelBasedForagingState,
)
from lamella.envs.multi_agent.matrix_game import (
    PAYOFF_SHAPE,
    PAYOFFS,
    IteratedMatrixGame,
    IteratedMatrixGameParams,
    IteratedMatrixGameState,
    check_payoff,
)
from lamella.envs.multi_agent.rware import (
    RobotWarehouse,
    RobotWarehouseParams,
    RobotWarehouseState,
)
from lamella.envs.multi_agent.tensor_game import (
    TENSOR_GAME_PAYOFFS,
    IteratedTensorGame,
    IteratedTensorGameParams,
    IteratedTensorGameState,
    check_tensor_game_payoff,
)

__all__ = [
    "COIN_GAME_PAYOFF",
    "PAYOFFS",
    "PAYOFF_SHAPE",
    "TENSOR_GAME_PAYOFFS",
    "CoinGame",
    "CoinGameParams",
    "CoinGameState",
    "CournotGame",
    "CournotParams",
    "CournotState",
    "Fishery",
    "FisheryParams",
    "FisheryState",
    "InfiniteMatrixGame",
    "InfiniteMatrixGameParams",
    "InfiniteMatrixGameState",
    "IteratedMatrixGame",
    "IteratedMatrixGameParams",
    "IteratedMatrixGameState",
    "IteratedTensorGame",
    "IteratedTensorGameParams",
    "IteratedTensorGameState",
    "LevelBasedForaging",
    "LevelBasedForagingParams",
    "LevelBasedForagingState",
    "RobotWarehouse",
    "RobotWarehouseParams",
    "RobotWarehouseState",
    "check_coin_game_payoff",
    "check_payoff",
    "check_tensor_game_payoff",
    "in_the_matrix",
    "iterated_battle_of_the_sexes",
    "iterated_chicken",
    "iterated_matching_pennies",
    "iterated_prisoners_dilemma",
    "iterated_stag_hunt",
    "lbf",
    "memory_one_values",
    "mpe",
    "register_all",
    "rware",
    "smax",
]


def _payoff_or_preset(payoff: Any, preset: str) -> Any:
    return PAYOFFS[preset] if payoff is None else payoff


def iterated_prisoners_dilemma(num_inner_steps: int = 100, payoff: Any = None) -> IteratedMatrixGame:
    """The iterated prisoner's dilemma: CC=(-1,-1), CD=(-3,0), DC=(0,-3), DD=(-2,-2)."""
    return IteratedMatrixGame(_payoff_or_preset(payoff, "prisoners_dilemma"), num_inner_steps)


def iterated_matching_pennies(num_inner_steps: int = 100, payoff: Any = None) -> IteratedMatrixGame:
    """Iterated matching pennies: player 0 wins (+1, -1) on a match, player 1 on a mismatch."""
    return IteratedMatrixGame(_payoff_or_preset(payoff, "matching_pennies"), num_inner_steps)


def iterated_stag_hunt(num_inner_steps: int = 100, payoff: Any = None) -> IteratedMatrixGame:
    """Iterated stag hunt (0 = stag): SS=(4,4), SH=(1,3), HS=(3,1), HH=(2,2)."""
    return IteratedMatrixGame(_payoff_or_preset(payoff, "stag_hunt"), num_inner_steps)


def iterated_chicken(num_inner_steps: int = 100, payoff: Any = None) -> IteratedMatrixGame:
    """Iterated chicken (0 = swerve): CC=(0,0), CD=(-1,1), DC=(1,-1), DD=(-10,-10)."""
    return IteratedMatrixGame(_payoff_or_preset(payoff, "chicken"), num_inner_steps)


def iterated_battle_of_the_sexes(num_inner_steps: int = 100, payoff: Any = None) -> IteratedMatrixGame:
    """Iterated battle of the sexes: (0,0)=(3,2), (1,1)=(2,3), miscoordination (0,0)."""
    return IteratedMatrixGame(_payoff_or_preset(payoff, "battle_of_the_sexes"), num_inner_steps)


def register_all(register: Callable[..., Any]) -> None:
    """Register this package's ids with ``register`` (``lamella.envs.register``)."""
    register("IteratedPrisonersDilemma-v0", iterated_prisoners_dilemma)
    register("IteratedMatchingPennies-v0", iterated_matching_pennies)
    register("IteratedStagHunt-v0", iterated_stag_hunt)
    register("IteratedChicken-v0", iterated_chicken)
    register("IteratedBattleOfTheSexes-v0", iterated_battle_of_the_sexes)
    register("IteratedMatrixGame-v0", IteratedMatrixGame)
    register("InfiniteMatrixGame-v0", InfiniteMatrixGame)
    register("CoinGame-v0", CoinGame)
    register("IteratedTensorGame-v0", IteratedTensorGame)
    register("Cournot-v0", CournotGame)
    register("Fishery-v0", Fishery)
    in_the_matrix.register_all(register)
