"""n-step returns that stop at episode boundaries, for one stream of experience."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lamella.buffers._src.types import NStepTransition, Transition


def n_step_transition(
    sequence: Transition, gamma: float | jax.Array, valid: jax.Array | None = None
) -> NStepTransition:
    """Collapse ``n`` consecutive steps of one env into one n-step transition.

    Rewards are summed with discount from the first step until the first step
    that ends the episode, or the last step. With ``k`` steps summed:

    * step ``k-1`` terminated: ``discount = 0`` (nothing to bootstrap);
    * step ``k-1`` truncated (and not terminated): ``discount = gamma^k``,
      bootstrapping from that step's ``next_obs``, the true final observation;
    * no episode end in the window: ``k = n`` and ``discount = gamma^n``.

    Written for one stream (leading axis ``n``); ``jax.vmap`` it for a batch,
    e.g. over a flashbax trajectory-buffer sample of windows.

    Args:
        sequence: a :class:`Transition` whose leaves have leading axis ``n``;
            reward, terminated and truncated have shape ``(n,)``.
        gamma: discount factor.
        valid: optional bool ``(n,)``, True on a prefix of the window (steps that
            exist); the sum also stops at the last valid step, bootstrapping from
            its ``next_obs``. ``valid[0]`` must be True.

    Returns:
        An :class:`NStepTransition` (no leading axis).
    """
    reward_t, terminated_t, truncated_t = sequence.reward, sequence.terminated, sequence.truncated
    if reward_t.ndim != 1 or terminated_t.shape != reward_t.shape or truncated_t.shape != reward_t.shape:
        raise ValueError(
            "n_step_transition: reward, terminated and truncated must all have shape (n,), got "
            f"{reward_t.shape}, {terminated_t.shape}, {truncated_t.shape}; vmap over batch axes."
        )
    n = reward_t.shape[0]
    terminated_t = terminated_t.astype(jnp.bool_)
    stop_t = jnp.logical_or(terminated_t, truncated_t.astype(jnp.bool_))
    if valid is not None:
        if valid.shape != (n,):
            raise ValueError(f"n_step_transition: valid must have shape ({n},), got {valid.shape}.")
        # The sum also stops at the last step that exists.
        next_valid = jnp.concatenate([valid[1:], jnp.zeros((1,), jnp.bool_)])
        stop_t = jnp.logical_or(stop_t, jnp.logical_not(next_valid))
    stop_t = stop_t.at[n - 1].set(True)
    last = jnp.argmax(stop_t)  # first True: the step whose next_obs we bootstrap from
    index = jnp.arange(n)
    gamma = jnp.asarray(gamma, jnp.float32)
    powers = gamma ** index.astype(jnp.float32)
    included = index <= last
    reward = jnp.sum(jnp.where(included, powers * reward_t.astype(jnp.float32), 0.0))
    steps = (last + 1).astype(jnp.int32)
    discount = jnp.where(terminated_t[last], 0.0, gamma ** steps.astype(jnp.float32))
    take = lambda x: x[last]  # noqa: E731
    first = lambda x: x[0]  # noqa: E731
    return NStepTransition(
        obs=jax.tree.map(first, sequence.obs),
        action=jax.tree.map(first, sequence.action),
        reward=reward,
        next_obs=jax.tree.map(take, sequence.next_obs),
        discount=discount.astype(jnp.float32),
        steps=steps,
    )
