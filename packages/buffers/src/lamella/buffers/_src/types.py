"""The transition pytree every lamella buffer stores."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lamella.buffers._src import struct


@struct.dataclass
class Transition:
    """One environment step, as the off-policy loops store it.

    Leading axes depend on where it lives: none for the example given to a
    buffer's ``init``, ``(num_envs,)`` for one step of a batch of envs,
    ``(num_envs, T)`` inside a trajectory buffer, ``(batch,)`` for a sample.

    Attributes:
        obs: observation before the step; any pytree. Goal-conditioned envs give a
            dict with ``observation``, ``achieved_goal`` and ``desired_goal``.
        action: action taken; any pytree.
        reward: float32 ``()`` (or ``(num_agents,)``).
        terminated: bool ``()``: the episode ended in a terminal state (no bootstrap).
        truncated: bool ``()``: the episode was cut (time limit); bootstrap from ``next_obs``.
        next_obs: observation after the step. On the last step of an episode this is
            the true final observation (``info["final_observation"]`` of lamella's
            auto-reset wrappers), never the first observation of the next episode.
        extras: dict of extra per-step fields (e.g. ``is_success``); empty by default.
    """

    obs: Any
    action: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: Any
    extras: dict[str, Any] = struct.field(default_factory=dict)

    @property
    def done(self) -> jax.Array:
        """``terminated | truncated``."""
        return jnp.logical_or(self.terminated, self.truncated)


@struct.dataclass
class NStepTransition:
    """An n-step transition: what a TD target needs.

    The target is ``reward + discount * V(next_obs)``.

    Attributes:
        obs: observation at the sampled start ``t``.
        action: action at ``t``.
        reward: float32: ``sum_{i<k} gamma^i r_{t+i}`` over the ``k`` steps taken.
        next_obs: observation to bootstrap from (``next_obs`` of step ``t+k-1``).
        discount: float32: ``gamma^k``, or 0 if step ``t+k-1`` terminated.
        steps: int32: ``k``, the number of rewards summed (1 to n).
    """

    obs: Any
    action: Any
    reward: jax.Array
    next_obs: Any
    discount: jax.Array
    steps: jax.Array


def transition_like(obs: Any, action: Any, extras: dict[str, Any] | None = None) -> Transition:
    """A zero :class:`Transition` with the structure of one step, for a buffer's ``init``.

    Args:
        obs: one (unbatched) observation, e.g. from ``env.reset``.
        action: one (unbatched) action, e.g. ``env.action_space().sample(key)``.
        extras: optional extra per-step fields (unbatched).

    Returns:
        A Transition of zeros: float32 reward, bool terminated/truncated.
    """
    zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)  # noqa: E731
    return Transition(
        obs=zeros(obs),
        action=zeros(action),
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), jnp.bool_),
        truncated=jnp.zeros((), jnp.bool_),
        next_obs=zeros(obs),
        extras=zeros(dict(extras or {})),
    )
