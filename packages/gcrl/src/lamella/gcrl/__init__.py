"""lamella.gcrl: goal-conditioned plug-ins for lamella-agents' off-policy loop.

* :func:`make_her_batch_sampler` (:mod:`lamella.gcrl.her`): hindsight experience replay, the
  ``her`` entry point of the ``lamella.batch_samplers`` group, so ``her=True`` (``lamella train
  sac --env GMazeGoalDubins-v0 --her``) works once this package is installed;
* goal setters (:mod:`lamella.gcrl.setters`): :func:`goal_override`, :func:`chain`,
  :func:`frontier_goals`, passed as ``make_offpolicy_runner(config, goal_setter=...)``; the
  frontier one also by name from a config (``goal_setter="frontier"``, the ``frontier`` entry
  point of the ``lamella.goal_setters`` group).

The loop itself (configs, runner, host loop, presets) is lamella-agents'
:mod:`lamella.agents.offpolicy`; the names it had here in 0.1.0 are re-exported unchanged:

>>> import jax
>>> from lamella.agents import make_train
>>> from lamella.gcrl import SACTrainConfig, make_offpolicy_runner
>>> config = SACTrainConfig(env_id="PointRobotGoal-v0", her=True, total_timesteps=2_000)
>>> state, metrics = jax.jit(make_train(make_offpolicy_runner(config)))(jax.random.key(0))
"""

from lamella.agents.offpolicy import (
    DDPGTrainConfig,
    DQNTrainConfig,
    GoalSetter,
    HostLoopResult,
    LoopConfig,
    OffPolicyRunnerState,
    SACTrainConfig,
    TD3TrainConfig,
    TQCTrainConfig,
    agent_config,
    make_offpolicy_runner,
    passthrough,
    train_host,
)
from lamella.agents.offpolicy.presets import PRESETS
from lamella.gcrl import setters
from lamella.gcrl.__about__ import __version__
from lamella.gcrl.her import make_her_batch_sampler
from lamella.gcrl.setters import chain, frontier_goals, goal_override, make_frontier_goal_setter

__all__ = [
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
    "frontier_goals",
    "goal_override",
    "make_frontier_goal_setter",
    "make_her_batch_sampler",
    "make_offpolicy_runner",
    "passthrough",
    "setters",
    "train_host",
]
