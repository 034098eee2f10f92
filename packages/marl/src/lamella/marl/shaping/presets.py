"""Presets of the opponent-shaping runners, and the entry point ``lamella train mfos_es``.

``mfos_es``: an M-FOS-style meta-agent evolved with OpenES against exact-gradient naive learners on
the infinite prisoner's dilemma (:mod:`lamella.marl.shaping.evolution`). The preset keeps Pax's
``ipd/mfos_nl`` scale where it is cheap (100 outer steps, discount 0.96, naive learners with
learning rate 1) and a population of 64 with 4 opponents per member for 500 generations.
"""

from __future__ import annotations

from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner

__all__ = ["MFOS_ES", "PRESETS"]

PRESETS: dict[str, dict[str, Any]] = {
    "mfos_es": {
        "InfiniteMatrixGame-v0": MetaESConfig(),
        # Against LOLA instead of a naive learner.
        "mfos_es_vs_lola": MetaESConfig(opponent="lola"),
    },
}

#: ``lamella train mfos_es`` (entry point ``mfos_es = "lamella.marl.shaping.presets:MFOS_ES"``).
MFOS_ES = Algorithm(MetaESConfig, make_meta_es_runner, PRESETS["mfos_es"])
