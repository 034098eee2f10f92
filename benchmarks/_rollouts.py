"""Timed rollouts shared by the multi-agent throughput benchmarks: every output is consumed (summed
into a checksum the rollout returns), so XLA cannot drop work the peer side does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def checksum(tree: Any) -> jax.Array:
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree.leaves(tree))


def _scan(step: Callable[..., Any], state: Any, xs: Any) -> jax.Array:
    def body(carry: Any, inputs: Any) -> Any:
        state, total = carry
        obs, state, reward, terminated, truncated, info = step(state, inputs)
        return (state, total + checksum((obs, reward, terminated, truncated, info))), None

    (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), xs)
    return total + checksum(state)


def lamella_rollout(env: Any, params: Any) -> Callable[..., jax.Array]:
    """``rollout(state, keys, actions)``: the made env's ``step`` (auto-reset included) per step."""
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        return _scan(lambda s, inputs: step(inputs[0], s, inputs[1], params), state, (keys, actions))

    return jax.jit(rollout)


def bare_rollout(
    env: Any, params: Any, step_one: Callable[[Any, Any], Any] | None = None
) -> Callable[..., jax.Array]:
    """``rollout(state, keys, actions)``: lamella's step alone, with no reset wrapper and one fixed
    key (``keys`` unused). ``step_one(state, action)`` replaces the bare env's ``step_env``."""
    bare, key = env.unwrapped, jax.random.key(0)
    if step_one is None:

        def step_one(state: Any, action: Any) -> Any:
            return bare.step_env(key, state, action, params)

    step = jax.vmap(step_one)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        return _scan(step, state, actions)

    return jax.jit(rollout)
