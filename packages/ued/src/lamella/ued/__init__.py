"""lamella.ued: unsupervised environment design (DR, PLR, Robust PLR, ACCEL, PAIRED) on level-based envs.

- :mod:`lamella.ued.scores`: level scores (MaxMC, positive value loss, L1 value loss, returns,
  value disagreement, the PAIRED regrets) as pure JAX functions of a rollout.
- :mod:`lamella.ued.buffer`: the prioritised level replay buffer (a pytree and pure functions).
- :mod:`lamella.ued.levels`: levels as env params (:class:`OnLevel`, :class:`LevelParams`) and an
  env's :class:`LevelFamily` (generator, mutator, comparator, named test levels).
- :mod:`lamella.ued.runners`: the DR, PLR and ACCEL runners on lamella-agents' PPO pieces;
  :mod:`lamella.ued.paired`: PAIRED, population PAIRED and the minimax adversary (a teacher
  agent that builds the levels); :mod:`lamella.ued.presets`: minimax's maze configs and small
  CI ones (``lamella train plr``, ``lamella train paired``).
"""

from lamella.ued.__about__ import __version__
from lamella.ued.buffer import LevelBuffer, LevelBufferState, make_level_buffer
from lamella.ued.levels import LevelFamily, LevelParams, OnLevel, level_family, tile_params
from lamella.ued.paired import (
    MinimaxConfig,
    PAIREDConfig,
    PAIREDRunnerState,
    PopulationPAIREDConfig,
    make_paired_runner,
)
from lamella.ued.presets import PRESETS
from lamella.ued.runners import (
    ACCELConfig,
    DRConfig,
    ParallelACCELConfig,
    ParallelPLRConfig,
    PLRConfig,
    UEDRunnerState,
    evaluate_on_levels,
    make_ued_runner,
)

__all__ = [
    "PRESETS",
    "ACCELConfig",
    "DRConfig",
    "LevelBuffer",
    "LevelBufferState",
    "LevelFamily",
    "LevelParams",
    "MinimaxConfig",
    "OnLevel",
    "PAIREDConfig",
    "PAIREDRunnerState",
    "PLRConfig",
    "ParallelACCELConfig",
    "ParallelPLRConfig",
    "PopulationPAIREDConfig",
    "UEDRunnerState",
    "__version__",
    "evaluate_on_levels",
    "level_family",
    "make_level_buffer",
    "make_paired_runner",
    "make_ued_runner",
    "tile_params",
]
