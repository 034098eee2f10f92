"""lamella.agents: the Agent protocol, networks, PPO, evolution strategies and runners.

>>> import jax
>>> from lamella.agents import PPOConfig, make_ppo_runner, make_train
>>> runner = make_ppo_runner(PPOConfig(env_id="CartPole-v1"))
>>> state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))
"""

from typing import TYPE_CHECKING, Any

from lamella.agents.__about__ import __version__

if TYPE_CHECKING:
    from lamella.agents import distributions, losses, networks
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

# Everything loads on first use (PEP 562), as in lamella.envs: `import lamella.agents` costs no
# JAX or flax import, so the `lamella` command's `train` and `sweep` plug-ins (which live here)
# parse their arguments and answer --help without loading the training stack.
_ATTRIBUTES = {
    "ActorCritic": "lamella.agents.actor_critic",
    "feedforward_actor_critic": "lamella.agents.actor_critic",
    "recurrent_actor_critic": "lamella.agents.actor_critic",
    "ALGORITHMS": "lamella.agents.algorithms",
    "make_runner": "lamella.agents.algorithms",
    "ESConfig": "lamella.agents.es",
    "make_es": "lamella.agents.es",
    "make_es_runner": "lamella.agents.es",
    "make_constant_agent": "lamella.agents.fixed",
    "make_random_agent": "lamella.agents.fixed",
    "make_scripted_agent": "lamella.agents.fixed",
    "PPOConfig": "lamella.agents.ppo",
    "make_ppo": "lamella.agents.ppo",
    "make_ppo_runner": "lamella.agents.ppo",
    "PPOBatch": "lamella.agents.ppo_update",
    "PPOSettings": "lamella.agents.ppo_update",
    "make_ppo_update": "lamella.agents.ppo_update",
    "ppo_batch": "lamella.agents.ppo_update",
    "PRESETS": "lamella.agents.presets",
    "Agent": "lamella.agents.protocol",
    "reset_memory_where": "lamella.agents.protocol",
    "PolicyStep": "lamella.agents.rollout",
    "RolloutState": "lamella.agents.rollout",
    "Transition": "lamella.agents.rollout",
    "actor_critic_policy": "lamella.agents.rollout",
    "make_rollout": "lamella.agents.rollout",
    "Runner": "lamella.agents.runner",
    "evaluate_agent": "lamella.agents.runner",
    "make_train": "lamella.agents.runner",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _ATTRIBUTES:
        value = getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    elif not name.startswith("__"):
        try:  # a module or sub-package: lamella.agents.networks, lamella.agents.offpolicy, ...
            value = importlib.import_module(f"lamella.agents.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"lamella.agents.{name}":
                raise
            raise AttributeError(f"module 'lamella.agents' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'lamella.agents' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
