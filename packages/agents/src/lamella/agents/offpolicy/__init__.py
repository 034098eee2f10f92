"""Off-policy learning: DQN, SAC (continuous and discrete), TD3, DDPG, TQC and their loop.

* Agents: each ``make_<algo>(config, observation_space, action_space)`` returns an
  :class:`~lamella.agents.protocol.Agent`; ``agent.update`` takes a
  :class:`~lamella.agents.offpolicy.common.Batch` (n-step transitions whose ``discount`` is
  ``gamma ** k``, 0 only where the episode *terminated*) and does one gradient step.
* The loop: ``make_offpolicy_runner(<Algo>TrainConfig(...))`` (:mod:`.loop`) is the compiled
  Runner on any lamella env; ``train_host`` (:mod:`.host`) runs the same learner on a gymnasium
  vector env. Both take a goal setter and a batch sampler as hooks (:mod:`.plugins`);
  lamella-gcrl provides HER and goal setters through them.

>>> import jax
>>> from lamella.agents import make_train
>>> from lamella.agents.offpolicy import DQNTrainConfig, make_offpolicy_runner
>>> runner = make_offpolicy_runner(DQNTrainConfig(total_timesteps=2_000, learning_starts=500))
>>> state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
"""

from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import Batch, flatten_observation
from lamella.agents.offpolicy.configs import (
    AGENTS,
    DDPGTrainConfig,
    DQNTrainConfig,
    LoopConfig,
    SACTrainConfig,
    TD3TrainConfig,
    TQCTrainConfig,
    agent_config,
)
from lamella.agents.offpolicy.ddpg import DDPGConfig, make_ddpg
from lamella.agents.offpolicy.dqn import DQNConfig, DQNTrainState, make_dqn
from lamella.agents.offpolicy.host import HostLoopResult, train_host
from lamella.agents.offpolicy.loop import OffPolicyRunnerState, make_offpolicy_runner
from lamella.agents.offpolicy.plugins import GoalFunctions, GoalSetter, passthrough
from lamella.agents.offpolicy.sac import SACConfig, SACTrainState, make_sac
from lamella.agents.offpolicy.td3 import DeterministicTrainState, TD3Config, make_td3
from lamella.agents.offpolicy.tqc import TQCConfig, make_tqc

__all__ = [
    "AGENTS",
    "Batch",
    "DDPGConfig",
    "DDPGTrainConfig",
    "DQNConfig",
    "DQNTrainConfig",
    "DQNTrainState",
    "DeterministicTrainState",
    "GoalFunctions",
    "GoalSetter",
    "HostLoopResult",
    "LoopConfig",
    "OffPolicyRunnerState",
    "SACConfig",
    "SACTrainConfig",
    "SACTrainState",
    "TD3Config",
    "TD3TrainConfig",
    "TQCConfig",
    "TQCTrainConfig",
    "agent_config",
    "flatten_observation",
    "make_ddpg",
    "make_dqn",
    "make_offpolicy_runner",
    "make_sac",
    "make_td3",
    "make_tqc",
    "passthrough",
    "targets",
    "train_host",
]
