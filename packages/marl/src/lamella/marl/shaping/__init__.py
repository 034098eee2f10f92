"""Opponent shaping on the iterated games: fixed strategies, learners and meta-learning runners (Pax's)."""

from lamella.marl.shaping.runner import ShapingConfig, make_shaping_runner
from lamella.marl.shaping.strategies import (
    STRATEGIES,
    check_strategy_fits,
    make_memory_one_agent,
    memory_one,
    strategy,
    zd_extortion,
)

__all__ = [
    "STRATEGIES",
    "ShapingConfig",
    "check_strategy_fits",
    "make_memory_one_agent",
    "make_shaping_runner",
    "memory_one",
    "strategy",
    "zd_extortion",
]
