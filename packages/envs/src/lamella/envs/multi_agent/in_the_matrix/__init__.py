"""IPD-in-the-Matrix and IMP-in-the-Matrix (STORM): matrix games played with coins on a grid.

Registered ids (see :func:`register_all`):

==============================  ================================================================
id                              env
==============================  ================================================================
``IPDInTheMatrix-v0``           prisoner's dilemma payoff, fixed coin layouts (Pax's ``ipditm``)
``IMPInTheMatrix-v0``           matching pennies payoff, shuffled coins (Pax's ``impitm``)
==============================  ================================================================

Both: 152-step inner episodes, 5 frozen steps after an interaction. ``make(id, payoff=...,
fixed_coins=..., num_outer_steps=..., pax_quirks=True)`` changes any of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lamella.envs.multi_agent.in_the_matrix.env import (
    ACTION_NAMES,
    AGENT_SPAWN_PAIRS,
    COIN_SPAWNS,
    ITEM_NAMES,
    InTheMatrix,
    InTheMatrixParams,
    InTheMatrixState,
    check_in_the_matrix_payoff,
)

__all__ = [
    "ACTION_NAMES",
    "AGENT_SPAWN_PAIRS",
    "COIN_SPAWNS",
    "ITEM_NAMES",
    "PAYOFFS",
    "InTheMatrix",
    "InTheMatrixParams",
    "InTheMatrixState",
    "check_in_the_matrix_payoff",
    "imp_in_the_matrix",
    "ipd_in_the_matrix",
    "register_all",
]

# payoff[player][red player's coin type][blue player's coin type]; red coin = C / heads.
PAYOFFS: dict[str, np.ndarray] = {
    # Pax's ipditm configs.
    "prisoners_dilemma": np.array([[[3, 0], [5, 1]], [[3, 5], [0, 1]]], np.float32),
    # Pax's impitm configs.
    "matching_pennies": np.array([[[1, -1], [-1, 1]], [[-1, 1], [1, -1]]], np.float32),
}
for _payoff in PAYOFFS.values():
    _payoff.flags.writeable = False


def ipd_in_the_matrix(
    payoff: Any = None,
    fixed_coins: bool = True,
    freeze_penalty: int = 5,
    num_inner_steps: int = 152,
    num_outer_steps: int = 1,
    pax_quirks: bool = False,
) -> InTheMatrix:
    """IPD in the Matrix: C/C pays 3 each, D against C 5 and 0, D/D 1 each (Pax's ``ipditm``)."""
    payoff = PAYOFFS["prisoners_dilemma"] if payoff is None else payoff
    return InTheMatrix(payoff, fixed_coins, freeze_penalty, num_inner_steps, num_outer_steps, pax_quirks)


def imp_in_the_matrix(
    payoff: Any = None,
    fixed_coins: bool = False,
    freeze_penalty: int = 5,
    num_inner_steps: int = 152,
    num_outer_steps: int = 1,
    pax_quirks: bool = False,
) -> InTheMatrix:
    """IMP in the Matrix: red wins 1 on a match, blue on a mismatch (Pax's ``impitm``)."""
    payoff = PAYOFFS["matching_pennies"] if payoff is None else payoff
    return InTheMatrix(payoff, fixed_coins, freeze_penalty, num_inner_steps, num_outer_steps, pax_quirks)


def register_all(register: Callable[..., Any]) -> None:
    """Register this family's ids with ``register`` (``lamella.envs.register``)."""
    register("IPDInTheMatrix-v0", ipd_in_the_matrix)
    register("IMPInTheMatrix-v0", imp_in_the_matrix)
