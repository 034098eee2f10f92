"""The Agent protocol: four pure functions over explicit state.

An :class:`Agent` is a NamedTuple of pure functions, after Pax::

    train_state, memory = agent.init(key, obs_example)
    action, train_state, memory = agent.policy(key, train_state, obs, memory, eval=False)
    train_state, memory, metrics = agent.update(trajectory, train_state, memory)
    memory = agent.reset_memory(memory, eval=False)

* ``train_state`` holds everything that learning changes (network parameters,
  optimiser state, normalisation statistics, step counters). It is a pytree of
  arrays, so optax transforms it, evosax samples populations of it, flashbax
  stores it and the driver writes it to a checkpoint.
* ``memory`` holds what the agent carries between steps of an episode (the
  hidden state of a recurrent core; an empty tuple for a feed-forward agent).
  It has a leading batch axis of ``num_envs`` during training and of
  ``num_eval_envs`` after ``reset_memory(memory, eval=True)``, as in Pax.
* Observations and actions carry a leading batch axis (one entry per env).
  Agents draw the randomness of a whole batch from one key: splitting a key per
  env costs about as much as a CartPole step on CPU.

Every function is pure and jit-, vmap- and scan-safe: nothing is kept on the
Python side between calls, so a population of agents is one ``jax.vmap`` over
``train_state`` and many seeds are one ``jax.vmap`` over keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

__all__ = ["Action", "Agent", "Memory", "PRNGKey", "TrainState", "reset_memory_where"]

PRNGKey = jax.Array
TrainState = Any
Memory = Any
Action = Any


class Agent(NamedTuple):
    """An agent as four pure functions.

    Attributes:
        init: ``init(key, obs_example) -> (train_state, memory)``. ``obs_example``
            has the leading batch axis of the training envs; the returned memory
            matches it.
        policy: ``policy(key, train_state, obs, memory, eval=False) -> (action,
            train_state, memory)``. ``eval=True`` acts greedily (the mode of the
            action distribution) where the agent has a notion of greedy.
        update: ``update(trajectory, train_state, memory) -> (train_state, memory,
            metrics)``; what ``trajectory`` holds is the agent's business (PPO
            takes a rollout, an off-policy agent a sampled batch); ``metrics`` is a
            dict of scalars.
        reset_memory: ``reset_memory(memory, eval=False) -> memory``, the memory
            of fresh episodes for the training batch (or the evaluation batch).
    """

    init: Callable[..., tuple[TrainState, Memory]]
    policy: Callable[..., tuple[Action, TrainState, Memory]]
    update: Callable[..., tuple[TrainState, Memory, dict[str, jax.Array]]]
    reset_memory: Callable[..., Memory]


def reset_memory_where(agent: Agent, done: jax.Array, memory: Memory, eval: bool = False) -> Memory:
    """Reset the memory of the envs where ``done`` (shape ``(batch,)``) is True, keep the rest.

    Runners call this after each env step, so the next step of an env whose
    episode just ended starts from fresh memory.
    """
    fresh = agent.reset_memory(memory, eval=eval)

    def select(new: jax.Array, old: jax.Array) -> jax.Array:
        flag = done.reshape(done.shape + (1,) * (old.ndim - done.ndim))
        return jax.numpy.where(flag, new, old)

    return jax.tree.map(select, fresh, memory)
