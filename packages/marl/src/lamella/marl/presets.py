"""Presets of IPPO and MAPPO, and the entry points ``lamella train ippo|mappo`` load.

``PRESETS["ippo"][env_id]`` is an :class:`~lamella.marl.ppo.IPPOConfig`; a preset named like an
env id is that env's default (``lamella train ippo --env Foraging-8x8-2p-2f-coop-v3``). Every
preset keeps Mava's defaults (lr 2.5e-4, rollout 128, 4 epochs, 2 minibatches, 16 envs, MLP
[128, 128] ReLU, agent ids, parameter sharing, team reward on LBF) and sets only the env and the
budget.
"""

from __future__ import annotations

from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.marl.ppo import IPPOConfig, MAPPOConfig, make_ippo_runner, make_mappo_runner

__all__ = ["IPPO", "MAPPO", "PRESETS"]

_LBF_IDS = ("Foraging-8x8-2p-2f-coop-v3", "Foraging-2s-8x8-2p-2f-coop-v3")

PRESETS: dict[str, dict[str, Any]] = {
    # Mava's budget: 1000 updates x 128 steps x 2 (update batch) x 16 envs.
    "ippo": {env_id: IPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
    "mappo": {env_id: MAPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
}

#: ``lamella train ippo`` (entry point ``ippo = "lamella.marl.presets:IPPO"``).
IPPO = Algorithm(IPPOConfig, make_ippo_runner, PRESETS["ippo"])
#: ``lamella train mappo`` (entry point ``mappo = "lamella.marl.presets:MAPPO"``).
MAPPO = Algorithm(MAPPOConfig, make_mappo_runner, PRESETS["mappo"])
