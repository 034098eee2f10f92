"""Fixed and scripted policies as Agents, so they can stand in any agent slot.

They learn nothing: ``update`` returns the train state unchanged with no
metrics; ``train_state`` and ``memory`` are empty tuples. Actions carry the
batch axis of the observations they are given.

>>> agent = make_random_agent(spaces.Discrete(2))
>>> train_state, memory = agent.init(key, obs)        # ((), ())
>>> action, _, _ = agent.policy(key, train_state, obs, memory)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.protocol import Agent
from lamella.envs import spaces

__all__ = ["make_constant_agent", "make_random_agent", "make_scripted_agent"]


def _batch_size(obs: Any) -> int:
    leaves = jax.tree.leaves(obs)
    if not leaves or jnp.ndim(leaves[0]) == 0:
        raise ValueError("Agents take a batch of observations with a leading batch axis; got a scalar.")
    return int(jnp.shape(leaves[0])[0])


def _stateless(policy: Callable[[jax.Array, Any], Any]) -> Agent:
    def init(key: jax.Array, obs_example: Any = None) -> tuple[tuple[()], tuple[()]]:
        return (), ()

    def act(
        key: jax.Array, train_state: Any, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[Any, Any, Any]:
        return policy(key, obs), train_state, memory

    def update(trajectory: Any, train_state: Any, memory: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
        return train_state, memory, {}

    def reset_memory(memory: Any, eval: bool = False) -> tuple[()]:
        return ()

    return Agent(init=init, policy=act, update=update, reset_memory=reset_memory)


def _sample_batch(space: spaces.Space, key: jax.Array, batch: int) -> jax.Array:
    """``batch`` samples of ``space`` from one key (no per-env key split)."""
    if isinstance(space, spaces.Discrete):
        return jax.random.randint(key, (batch,), 0, space.n).astype(space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        u = jax.random.uniform(key, (batch, *space.shape))
        return jnp.floor(u * jnp.asarray(space.nvec)).astype(space.dtype)
    if isinstance(space, spaces.Box):
        return jax.vmap(space.sample)(jax.random.split(key, batch))
    raise TypeError(f"make_random_agent supports Discrete, MultiDiscrete and Box spaces, got {space!r}.")


def make_random_agent(action_space: spaces.Space) -> Agent:
    """Uniformly random actions from ``action_space`` (same in eval)."""
    if not isinstance(action_space, (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)):
        raise TypeError(
            f"make_random_agent supports Discrete, MultiDiscrete and Box spaces, got {action_space!r}."
        )
    return _stateless(lambda key, obs: _sample_batch(action_space, key, _batch_size(obs)))


def make_constant_agent(action: Any, action_space: spaces.Space | None = None) -> Agent:
    """The same ``action`` in every env on every step.

    Args:
        action: one env's action (a scalar for Discrete, an array for Box or
            MultiDiscrete).
        action_space: if given, ``action`` is checked against it now and cast to
            its dtype.
    """
    value = np.asarray(action)
    if action_space is not None:
        if tuple(value.shape) != tuple(action_space.shape):
            raise ValueError(
                f"make_constant_agent: action has shape {value.shape}, the action space {action_space!r} "
                f"has shape {action_space.shape}."
            )
        if not bool(action_space.contains(jnp.asarray(value, action_space.dtype))):
            raise ValueError(
                f"make_constant_agent: action {action!r} is not in the action space {action_space!r}."
            )
        value = value.astype(np.dtype(action_space.dtype))
    constant = jnp.asarray(value)
    return _stateless(lambda key, obs: jnp.broadcast_to(constant, (_batch_size(obs), *constant.shape)))


def make_scripted_agent(act: Callable[..., Any], batched: bool = False, stochastic: bool = False) -> Agent:
    """An agent that acts by a hand-written rule of the observation.

    Args:
        act: ``act(obs) -> action`` for one env (vmapped over the batch), or for
            the whole batch when ``batched``; ``act(key, obs)`` when
            ``stochastic`` (one key per env, or one for the batch when
            ``batched``). Must be a JAX function.
        batched: ``act`` already takes and returns a batch.
        stochastic: ``act`` draws random numbers and takes a key first.
    """
    if not stochastic:
        rule = act if batched else jax.vmap(act)
        return _stateless(lambda key, obs: rule(obs))
    if batched:
        return _stateless(act)
    per_env = jax.vmap(act)
    return _stateless(lambda key, obs: per_env(jax.random.split(key, _batch_size(obs)), obs))
