"""Presets of IPPO and MAPPO (feed-forward and recurrent), and the entry points
``lamella train ippo|mappo|rec_ippo|rec_mappo`` load.

``PRESETS["ippo"][env_id]`` is an :class:`~lamella.marl.ppo.IPPOConfig`; a preset named like an
env id is that env's default (``lamella train ippo --env Foraging-8x8-2p-2f-coop-v3``). Every
preset keeps Mava's defaults (lr 2.5e-4, rollout 128, 4 epochs, 2 minibatches, 16 envs, MLP
[128, 128] ReLU, agent ids, parameter sharing, team reward on LBF) and sets only the env and the
budget. ``rec_ippo`` / ``rec_mappo`` presets keep Mava's ``rec_ippo`` / ``rec_mappo`` defaults (the
same RL settings; network ``rnn``: pre-torso [128], GRU 128, post-torso [128], ReLU).
"""

from __future__ import annotations

from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.marl.ppo import (
    IPPOConfig,
    MAPPOConfig,
    RecIPPOConfig,
    RecMAPPOConfig,
    make_ippo_runner,
    make_mappo_runner,
    make_rec_ippo_runner,
    make_rec_mappo_runner,
)

__all__ = ["IPPO", "MAPPO", "PRESETS", "REC_IPPO", "REC_MAPPO"]

_LBF_IDS = ("Foraging-8x8-2p-2f-coop-v3", "Foraging-2s-8x8-2p-2f-coop-v3")

PRESETS: dict[str, dict[str, Any]] = {
    # Mava's budget: 1000 updates x 128 steps x 2 (update batch) x 16 envs.
    "ippo": {env_id: IPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
    "mappo": {env_id: MAPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
    "rec_ippo": {env_id: RecIPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
    "rec_mappo": {env_id: RecMAPPOConfig(env_id=env_id, total_timesteps=4_096_000) for env_id in _LBF_IDS},
}

#: ``lamella train ippo`` (entry point ``ippo = "lamella.marl.presets:IPPO"``).
IPPO = Algorithm(IPPOConfig, make_ippo_runner, PRESETS["ippo"])
#: ``lamella train mappo`` (entry point ``mappo = "lamella.marl.presets:MAPPO"``).
MAPPO = Algorithm(MAPPOConfig, make_mappo_runner, PRESETS["mappo"])
#: ``lamella train rec_ippo`` (entry point ``rec_ippo = "lamella.marl.presets:REC_IPPO"``).
REC_IPPO = Algorithm(RecIPPOConfig, make_rec_ippo_runner, PRESETS["rec_ippo"])
#: ``lamella train rec_mappo`` (entry point ``rec_mappo = "lamella.marl.presets:REC_MAPPO"``).
REC_MAPPO = Algorithm(RecMAPPOConfig, make_rec_mappo_runner, PRESETS["rec_mappo"])
