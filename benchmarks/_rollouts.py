"""Timed rollouts shared by the multi-agent throughput benchmarks: every output is consumed (summed
into a checksum the rollout returns), so XLA cannot drop work the peer side does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

# The consumption patterns of the hardening issue (benchmarks/envs_throughput.py): what a training
# loop reads of a step's outputs decides what XLA keeps, so each is timed on its own.
PATTERNS = {
    "a": "obs + reward + flags",
    "b": "a + final observation",
    "c": "reward only",
    "all": "every output, info included",
}


def checksum(tree: Any) -> jax.Array:
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree.leaves(tree))


def consumed(pattern: str, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> Any:
    """What a loop of consumption ``pattern`` reads of a lamella step's outputs."""
    if pattern == "a":
        return (obs, reward, terminated, truncated)
    if pattern == "b":
        return (obs, reward, terminated, truncated, info["final_observation"])
    if pattern == "c":
        return (reward,)
    if pattern == "all":
        return (obs, reward, terminated, truncated, info)
    raise ValueError(f"unknown pattern {pattern!r}; use one of {sorted(PATTERNS)}")


def check_patterns(parser: Any, patterns: str) -> list[str]:
    """``--patterns abc`` (letters) as a list, or the parser's error naming the known letters."""
    unknown = sorted(set(patterns) - {"a", "b", "c"})
    if unknown:
        parser.error(f"unknown pattern(s) {unknown}; use letters of abc")
    return list(dict.fromkeys(patterns))


def peer_consumed(pattern: str, obs: Any, reward: Any, flags: Any) -> Any:
    """What a loop of ``pattern`` reads of a peer's step (Jumanji, JaxMARL): neither returns a
    final observation (both hand back the reset's), so b reads what a reads."""
    if pattern in ("a", "b", "all"):
        return (obs, reward, flags)
    if pattern == "c":
        return (reward,)
    raise ValueError(f"unknown pattern {pattern!r}; use one of {sorted(PATTERNS)}")


def _scan(step: Callable[..., Any], state: Any, xs: Any, pattern: str = "all") -> jax.Array:
    def body(carry: Any, inputs: Any) -> Any:
        state, total = carry
        obs, state, reward, terminated, truncated, info = step(state, inputs)
        return (state, total + checksum(consumed(pattern, obs, reward, terminated, truncated, info))), None

    (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), xs)
    return total + checksum(state)


def lamella_rollout(env: Any, params: Any, pattern: str = "all") -> Callable[..., jax.Array]:
    """``rollout(state, keys, actions)``: the made env's ``step`` (auto-reset included) per step,
    reading what ``pattern`` reads (and the final state)."""
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        return _scan(lambda s, inputs: step(inputs[0], s, inputs[1], params), state, (keys, actions), pattern)

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
