"""lamella.gcrl: the off-policy training loop, plain or goal-conditioned.

>>> import jax
>>> from lamella.agents import make_train
>>> from lamella.gcrl import SACTrainConfig, make_offpolicy_runner
>>> runner = make_offpolicy_runner(SACTrainConfig(env_id="Pendulum-v1", total_timesteps=8_000))
>>> state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 2))

Importing the package adds sac, td3, ddpg, tqc and dqn to lamella-agents' algorithm table, so
``lamella.agents.driver.run_experiment(SACTrainConfig(...))`` and ``lamella train sac`` find them.
"""

from lamella.gcrl import setters
from lamella.gcrl.__about__ import __version__
from lamella.gcrl.algorithms import ALGORITHMS, PRESETS, register_algorithms
from lamella.gcrl.config import (
    DDPGTrainConfig,
    DQNTrainConfig,
    LoopConfig,
    SACTrainConfig,
    TD3TrainConfig,
    TQCTrainConfig,
    agent_config,
)
from lamella.gcrl.host import HostLoopResult, train_host
from lamella.gcrl.runner import OffPolicyRunnerState, make_offpolicy_runner
from lamella.gcrl.setters import GoalSetter, chain, goal_override, passthrough

__all__ = [
    "ALGORITHMS",
    "PRESETS",
    "DDPGTrainConfig",
    "DQNTrainConfig",
    "GoalSetter",
    "HostLoopResult",
    "LoopConfig",
    "OffPolicyRunnerState",
    "SACTrainConfig",
    "TD3TrainConfig",
    "TQCTrainConfig",
    "__version__",
    "agent_config",
    "chain",
    "goal_override",
    "make_offpolicy_runner",
    "passthrough",
    "register_algorithms",
    "setters",
    "train_host",
]

register_algorithms()
