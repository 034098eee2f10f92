"""lamella.agents: the Agent protocol, networks, PPO, evolution strategies and runners.

>>> import jax
>>> from lamella.agents import PPOConfig, make_ppo_runner, make_train
>>> runner = make_ppo_runner(PPOConfig(env_id="CartPole-v1"))
>>> state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))
"""

from lamella.agents import distributions, losses, networks
from lamella.agents.__about__ import __version__
from lamella.agents.actor_critic import ActorCritic, feedforward_actor_critic, recurrent_actor_critic
from lamella.agents.algorithms import ALGORITHMS, make_runner
from lamella.agents.es import ESConfig, make_es, make_es_runner
from lamella.agents.fixed import make_constant_agent, make_random_agent, make_scripted_agent
from lamella.agents.ppo import PPOConfig, make_ppo, make_ppo_runner
from lamella.agents.ppo_update import PPOBatch, PPOSettings, make_ppo_update, ppo_batch
from lamella.agents.presets import PRESETS
from lamella.agents.protocol import Agent, reset_memory_where
from lamella.agents.rollout import PolicyStep, RolloutState, Transition, actor_critic_policy, make_rollout
from lamella.agents.runner import Runner, evaluate_agent, make_train

__all__ = [
    "ALGORITHMS",
    "PRESETS",
    "ActorCritic",
    "Agent",
    "ESConfig",
    "PPOBatch",
    "PPOConfig",
    "PPOSettings",
    "PolicyStep",
    "RolloutState",
    "Runner",
    "Transition",
    "__version__",
    "actor_critic_policy",
    "distributions",
    "evaluate_agent",
    "feedforward_actor_critic",
    "losses",
    "make_constant_agent",
    "make_es",
    "make_es_runner",
    "make_ppo",
    "make_ppo_runner",
    "make_ppo_update",
    "make_random_agent",
    "make_rollout",
    "make_runner",
    "make_scripted_agent",
    "make_train",
    "networks",
    "ppo_batch",
    "recurrent_actor_critic",
    "reset_memory_where",
]
