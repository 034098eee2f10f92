"""Goal setters: pure functions that choose, or change, the goals of a goal-conditioned loop.

After xpag's setter idea, as pure JAX. A goal setter
(:class:`lamella.agents.offpolicy.GoalSetter`, the hook of lamella-agents' off-policy loop,
re-exported here) sits between the environment and the agent: at each episode start (``reset``) and after every step (``step``) it may rewrite the
``desired_goal`` the agent sees and, consistently, the reward, ``is_success`` and termination
of that step. Everything it keeps (a curriculum, a goal held per env, step counters) is in an
explicit state, so setters compile into the training scan and vmap over seeds. Setters compose
with :func:`chain`; :func:`passthrough` (the default) changes nothing. Observations, rewards and
flags carry a leading ``num_envs`` axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from lamella.agents.offpolicy.plugins import GoalSetter, passthrough

__all__ = ["GoalSetter", "chain", "goal_override", "passthrough"]

PRNGKey = jax.Array


def chain(*setters: GoalSetter) -> GoalSetter:
    """Apply ``setters`` in order (each sees what the previous one produced); state is a tuple."""
    if not setters:
        return passthrough()

    def init(key: PRNGKey, obs: Any) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(setters))
        return tuple(s.init(k, obs) for s, k in zip(setters, keys, strict=True))

    def reset(
        key: PRNGKey, state: tuple[Any, ...], obs: Any, started: jax.Array
    ) -> tuple[Any, tuple[Any, ...]]:
        keys = jax.random.split(key, len(setters))
        new_states = []
        for setter, k, s in zip(setters, keys, state, strict=True):
            obs, s = setter.reset(k, s, obs, started)
            new_states.append(s)
        return obs, tuple(new_states)

    def step(
        key: PRNGKey,
        state: tuple[Any, ...],
        obs: Any,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        info: dict[str, Any],
    ) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(setters))
        new_states = []
        for setter, k, s in zip(setters, keys, state, strict=True):
            obs, reward, terminated, truncated, info, s = setter.step(
                k, s, obs, reward, terminated, truncated, info
            )
            new_states.append(s)
        return obs, reward, terminated, truncated, info, tuple(new_states)

    return GoalSetter(init, reset, step)


def _rows(flag: jax.Array, x: jax.Array) -> jax.Array:
    return flag.reshape(flag.shape + (1,) * (x.ndim - flag.ndim))


def goal_override(
    sample_goal: Callable[[PRNGKey, Any], jax.Array],
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array],
    is_success: Callable[[jax.Array, jax.Array], jax.Array],
    terminate_on_success: bool = True,
    change_every: int = 0,
) -> GoalSetter:
    """A setter that replaces the env's goals with its own.

    Each env's goal is drawn by ``sample_goal(key, obs) -> goal`` (one env's observation dict
    in, one goal out; it is vmapped) at every episode start, and again every ``change_every``
    steps of an episode when ``change_every > 0`` (a goal that moves during the episode). The
    agent sees the setter's goal in ``desired_goal``; the reward and ``info["is_success"]`` of
    every step are recomputed against it with the env's pure ``compute_reward`` and
    ``is_success`` (bind params with ``functools.partial``); ``terminated`` becomes
    ``is_success & terminate_on_success`` (the env's own goal no longer ends episodes).

    State: ``{"goal": float32 (num_envs, goal_dim), "age": int32 (num_envs,)}``.
    """
    if change_every < 0:
        raise ValueError(f"goal_override: change_every must be >= 0, got {change_every}.")

    def draw(key: PRNGKey, obs: Any) -> jax.Array:
        num_envs = jax.tree.leaves(obs)[0].shape[0]
        return jax.vmap(sample_goal)(jax.random.split(key, num_envs), obs)

    def init(key: PRNGKey, obs: Any) -> dict[str, jax.Array]:
        goal = jnp.asarray(draw(key, obs), jnp.float32)
        return {"goal": goal, "age": jnp.zeros(goal.shape[:1], jnp.int32)}

    def reset(key: PRNGKey, state: dict[str, jax.Array], obs: Any, started: jax.Array) -> tuple[Any, Any]:
        goal = jnp.where(_rows(started, state["goal"]), draw(key, obs), state["goal"])
        age = jnp.where(started, 0, state["age"])
        return {**obs, "desired_goal": goal.astype(obs["desired_goal"].dtype)}, {"goal": goal, "age": age}

    def step(
        key: PRNGKey,
        state: dict[str, jax.Array],
        obs: Any,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        info: dict[str, Any],
    ) -> tuple[Any, ...]:
        goal, age = state["goal"], state["age"] + 1
        # The step is scored against the goal it was taken for; a change applies from the next step.
        achieved = obs["achieved_goal"]
        reward = jax.vmap(compute_reward)(achieved, goal).astype(reward.dtype)
        success = jax.vmap(is_success)(achieved, goal)
        terminated = jnp.logical_and(success, terminate_on_success)
        obs = {**obs, "desired_goal": goal.astype(obs["desired_goal"].dtype)}
        if change_every > 0:
            change = age % change_every == 0
            goal = jnp.where(_rows(change, goal), draw(key, obs), goal)
            age = jnp.where(change, 0, age)
        info = {**info, "is_success": success}
        return obs, reward, terminated, truncated, info, {"goal": goal, "age": age}

    return GoalSetter(init, reset, step)
