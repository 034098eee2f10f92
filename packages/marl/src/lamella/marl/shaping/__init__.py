"""Opponent shaping on the iterated games (Pax's setups): fixed strategies, the multi-agent RL runner,
exact-gradient learners on the infinite game and evolved meta-agents."""

from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner, make_meta_fitness
from lamella.marl.shaping.exact import (
    make_exact_play,
    make_fixed_learner,
    make_lola_learner,
    make_naive_learner,
)
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
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
    "MetaConfig",
    "MetaESConfig",
    "ShapingConfig",
    "check_strategy_fits",
    "make_exact_play",
    "make_fixed_learner",
    "make_lola_learner",
    "make_memory_one_agent",
    "make_meta_es_runner",
    "make_meta_fitness",
    "make_meta_runner",
    "make_naive_learner",
    "make_shaping_runner",
    "memory_one",
    "strategy",
    "zd_extortion",
]
