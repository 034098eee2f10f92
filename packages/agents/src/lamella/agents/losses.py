"""Value targets and policy-gradient losses, written for one stream and batched with vmap.

Time-indexed arrays follow rlax's naming: ``r_t`` is the reward of step ``t``,
``v_t`` the value of the observation the action of step ``t`` was taken in,
``v_next_t`` the value of the observation that step ``t`` led to. At the end
of an episode that is the *final* observation (``info["final_observation"]``),
not the next episode's first one, so a truncated episode bootstraps correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from lamella.agents._unroll import loop_unroll

__all__ = ["clipped_value_loss", "gae_advantages", "ppo_loss", "ppo_policy_loss"]


def gae_advantages(
    r_t: jax.Array,
    v_t: jax.Array,
    v_next_t: jax.Array,
    terminated_t: jax.Array,
    done_t: jax.Array,
    gamma: float | jax.Array,
    gae_lambda: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates of T steps, truncation-correct.

    ``delta_t = r_t + gamma * (1 - terminated_t) * v_next_t - v_t`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` with ``A_T = 0``:
    a terminated step bootstraps 0; a truncated step bootstraps from the value of
    its final observation but does not carry the next episode's advantages back;
    the last step of the stream bootstraps from ``v_next_{T-1}``.

    Time is the leading axis; any trailing axes (envs, agents) are independent streams,
    so a time-major rollout ``(T, num_envs)`` or ``(T, num_envs, num_agents)`` needs no vmap.

    Args:
        r_t: float32 ``(T, ...)`` rewards.
        v_t: float32 ``(T, ...)`` values of the observations acted in.
        v_next_t: float32 ``(T, ...)`` values of the observations each step led to
            (the final observation where the episode ended).
        terminated_t: bool ``(T, ...)``: the episode reached a terminal state.
        done_t: bool ``(T, ...)``: the episode ended (terminated or truncated).
        gamma: discount.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, float32 ``(T, ...)`` each; ``returns = advantages + v_t``.
    """
    chex.assert_equal_shape([r_t, v_t, v_next_t, terminated_t, done_t])
    if jnp.ndim(r_t) < 1:
        raise ValueError(f"gae_advantages: arrays need a leading time axis, got shape {jnp.shape(r_t)}.")
    not_terminal = 1.0 - terminated_t.astype(jnp.float32)
    continues = 1.0 - done_t.astype(jnp.float32)
    delta_t = r_t + gamma * not_terminal * v_next_t - v_t

    def backward(advantage: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        delta, cont = inputs
        advantage = delta + gamma * gae_lambda * cont * advantage
        return advantage, advantage

    initial = jnp.zeros(delta_t.shape[1:], delta_t.dtype)
    _, advantages = jax.lax.scan(
        backward, initial, (delta_t, continues), reverse=True, unroll=loop_unroll(delta_t.shape[0])
    )
    return advantages, advantages + v_t


def ppo_policy_loss(
    log_prob: jax.Array, old_log_prob: jax.Array, advantage: jax.Array, clip_eps: float | jax.Array
) -> tuple[jax.Array, jax.Array]:
    """PPO's clipped surrogate loss (to minimise), and the fraction of clipped samples.

    Args:
        log_prob: float32 ``(B,)`` log-probabilities under the current policy.
        old_log_prob: float32 ``(B,)`` under the policy that collected the data.
        advantage: float32 ``(B,)`` advantages (normalised or not, the caller decides).
        clip_eps: clipping range of the probability ratio.

    Returns:
        ``(loss, clip_fraction)``, scalars.
    """
    chex.assert_equal_shape([log_prob, old_log_prob, advantage])
    ratio = jnp.exp(log_prob - old_log_prob)
    unclipped = ratio * advantage
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantage
    loss = -jnp.mean(jnp.minimum(unclipped, clipped))
    clip_fraction = jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32))
    return loss, clip_fraction


def clipped_value_loss(
    value: jax.Array,
    old_value: jax.Array,
    target: jax.Array,
    clip_eps: float | jax.Array,
    clip: bool = True,
) -> jax.Array:
    """Half the mean squared value error; with ``clip``, PPO's pessimistic clipped version.

    The clipped prediction ``old_value + clip(value - old_value, -clip_eps,
    clip_eps)`` and the unclipped one are both scored and the larger error is
    kept, as in the PPO reference implementation.
    """
    chex.assert_equal_shape([value, old_value, target])
    error = jnp.square(value - target)
    if clip:
        clipped_value = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
        error = jnp.maximum(error, jnp.square(clipped_value - target))
    return 0.5 * jnp.mean(error)


def ppo_loss(
    evaluate_actions: Callable[..., tuple[jax.Array, jax.Array, jax.Array]],
    params: Any,
    memory: Any,
    obs: Any,
    reset: jax.Array,
    raw_action: Any,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantage: jax.Array,
    target: jax.Array,
    *,
    clip_eps: float | jax.Array,
    vf_coef: float | jax.Array,
    ent_coef: float | jax.Array,
    clip_value: bool = True,
    normalize_advantages: bool = True,
    axis_name: str | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's loss on a time-major minibatch: clipped surrogate + ``vf_coef`` * value loss
    - ``ent_coef`` * entropy.

    Args:
        evaluate_actions: an :class:`~lamella.agents.actor_critic.ActorCritic`'s
            ``evaluate_actions`` (``(params, memory, obs, reset, raw_action) -> (log_prob,
            value, entropy)``).
        params: the parameters being optimised.
        memory: the memory before the first step (``()`` for feed-forward networks).
        obs, reset, raw_action: the minibatch, leading axes ``(T, B)`` (a recurrent network;
            a feed-forward one takes any leading axes).
        old_log_prob, old_value: float32, the same leading axes, from the policy that
            collected it.
        advantage, target: float32, the same leading axes: GAE advantages and value targets.
        clip_eps: ratio (and value) clipping range.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        clip_value: use the clipped value loss.
        normalize_advantages: standardise ``advantage`` over the minibatch.
        axis_name: a named axis (a mesh axis) the minibatch is split over: the advantages are
            standardised with the mean and standard deviation of the whole minibatch (equal
            blocks per device). The loss and metrics stay this block's; the caller averages
            them (and the gradients) over the axis.

    Returns:
        ``(loss, metrics)`` with scalar metrics ``policy_loss``, ``value_loss``, ``entropy``,
        ``clip_fraction`` and ``approx_kl`` (mean ``old_log_prob - log_prob``; exactly 0 when
        ``params`` are the ones that collected the data).
    """
    log_prob, value, entropy = evaluate_actions(params, memory, obs, reset, raw_action)
    if normalize_advantages and axis_name is not None:
        mean = jax.lax.pmean(advantage.mean(), axis_name)
        std = jnp.sqrt(jax.lax.pmean(jnp.mean(jnp.square(advantage - mean)), axis_name))
        advantage = (advantage - mean) / (std + 1e-8)
    elif normalize_advantages:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    flat = lambda x: x.reshape(-1)  # noqa: E731
    policy_loss, clip_fraction = ppo_policy_loss(
        flat(log_prob), flat(old_log_prob), flat(advantage), clip_eps
    )
    value_loss = clipped_value_loss(flat(value), flat(old_value), flat(target), clip_eps, clip_value)
    entropy = entropy.mean()
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy
    approx_kl = jnp.mean(flat(old_log_prob) - flat(log_prob))
    return total, {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "clip_fraction": clip_fraction,
        "approx_kl": approx_kl,
    }
