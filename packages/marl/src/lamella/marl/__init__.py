"""lamella.marl: multi-agent runners (IPPO, MAPPO, feed-forward and recurrent) built from
lamella-agents' PPO pieces.

>>> import jax
>>> from lamella.agents import make_train
>>> from lamella.marl import IPPOConfig, make_ippo_runner
>>> runner = make_ippo_runner(IPPOConfig(env_id="Foraging-5x5-2p-1f-coop-v3", total_timesteps=4096))
"""

from lamella.marl.__about__ import __version__
from lamella.marl.networks import (
    MultiAgentActorCriticNet,
    MultiAgentRecurrentActorCriticNet,
    masked_categorical,
)
from lamella.marl.observation import MultiAgentObservation, check_multi_agent_env
from lamella.marl.offpolicy import (
    IDQNConfig,
    ISACConfig,
    make_idqn_runner,
    make_independent_agent,
    make_isac_runner,
)
from lamella.marl.ppo import (
    IPPOConfig,
    MAPPOConfig,
    MultiAgentPPO,
    RecIPPOConfig,
    RecMAPPOConfig,
    make_ippo_runner,
    make_mappo_runner,
    make_multi_agent_actor_critic,
    make_multi_agent_ppo,
    make_multi_agent_ppo_runner,
    make_rec_ippo_runner,
    make_rec_mappo_runner,
)
from lamella.marl.rec_iql import RecIQLConfig, RecurrentQNetwork, make_rec_iql_runner
from lamella.marl.recording import OfflineExperience, read_offline

__all__ = [
    "IDQNConfig",
    "IPPOConfig",
    "ISACConfig",
    "MAPPOConfig",
    "MultiAgentActorCriticNet",
    "MultiAgentObservation",
    "MultiAgentPPO",
    "MultiAgentRecurrentActorCriticNet",
    "OfflineExperience",
    "RecIPPOConfig",
    "RecIQLConfig",
    "RecMAPPOConfig",
    "RecurrentQNetwork",
    "__version__",
    "check_multi_agent_env",
    "make_idqn_runner",
    "make_independent_agent",
    "make_ippo_runner",
    "make_isac_runner",
    "make_mappo_runner",
    "make_multi_agent_actor_critic",
    "make_multi_agent_ppo",
    "make_multi_agent_ppo_runner",
    "make_rec_ippo_runner",
    "make_rec_iql_runner",
    "make_rec_mappo_runner",
    "masked_categorical",
    "read_offline",
]
