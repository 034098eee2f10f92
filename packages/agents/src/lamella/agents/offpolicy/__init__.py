"""Off-policy agents on the Agent protocol: DQN, SAC (continuous and discrete), TD3, DDPG, TQC.

Each ``make_<algo>(config, observation_space, action_space)`` returns an
:class:`~lamella.agents.protocol.Agent`; ``agent.update`` takes a
:class:`~lamella.agents.offpolicy.common.Batch` (n-step transitions whose ``discount`` is
``gamma ** k``, 0 only where the episode *terminated*) and does one gradient step. The replay
loop that feeds them (buffers, HER, goal setters) is lamella-gcrl's.
"""

from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import Batch, flatten_observation
from lamella.agents.offpolicy.ddpg import DDPGConfig, make_ddpg
from lamella.agents.offpolicy.dqn import DQNConfig, DQNTrainState, make_dqn
from lamella.agents.offpolicy.sac import SACConfig, SACTrainState, make_sac
from lamella.agents.offpolicy.td3 import DeterministicTrainState, TD3Config, make_td3
from lamella.agents.offpolicy.tqc import TQCConfig, make_tqc

__all__ = [
    "AGENTS",
    "Batch",
    "DDPGConfig",
    "DQNConfig",
    "DQNTrainState",
    "DeterministicTrainState",
    "SACConfig",
    "SACTrainState",
    "TD3Config",
    "TQCConfig",
    "flatten_observation",
    "make_ddpg",
    "make_dqn",
    "make_sac",
    "make_td3",
    "make_tqc",
    "targets",
]

#: name -> (agent config class, ``make(config, observation_space, action_space) -> Agent``)
AGENTS = {
    "dqn": (DQNConfig, make_dqn),
    "sac": (SACConfig, make_sac),
    "td3": (TD3Config, make_td3),
    "ddpg": (DDPGConfig, make_ddpg),
    "tqc": (TQCConfig, make_tqc),
}
