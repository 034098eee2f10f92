"""Opponent shaping on the iterated games (Pax's setups): fixed strategies, the multi-agent RL runner,
exact-gradient learners on the infinite game, M-FOS (RL and ES) and evolved meta-agents, and DiCE-LOLA on the
finite game."""

from lamella.marl.shaping.dice import DiceConfig, make_dice_runner
from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner, make_meta_fitness
from lamella.marl.shaping.exact import (
    make_exact_play,
    make_fixed_learner,
    make_lola_learner,
    make_naive_learner,
)
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.mfos import LearningOpponentGame, MFOSConfig, make_mfos_runner
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
    "DiceConfig",
    "LearningOpponentGame",
    "MFOSConfig",
    "MetaConfig",
    "MetaESConfig",
    "ShapingConfig",
    "check_strategy_fits",
    "make_dice_runner",
    "make_exact_play",
    "make_fixed_learner",
    "make_lola_learner",
    "make_memory_one_agent",
    "make_meta_es_runner",
    "make_meta_fitness",
    "make_meta_runner",
    "make_mfos_runner",
    "make_naive_learner",
    "make_shaping_runner",
    "memory_one",
    "strategy",
    "zd_extortion",
]
