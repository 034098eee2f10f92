"""Value targets and policy-gradient losses, written for one stream and batched with vmap.

Time-indexed arrays follow rlax's naming: ``r_t`` is the reward of step ``t``,
``v_t`` the value of the observation the action of step ``t`` was taken in,
``v_next_t`` the value of the observation that step ``t`` led to. At the end
of an episode that is the *final* observation (``info["final_observation"]``),
not the next episode's first one, so a truncated episode bootstraps correctly.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

__all__ = ["clipped_value_loss", "gae_advantages", "ppo_policy_loss"]


def gae_advantages(
    r_t: jax.Array,
    v_t: jax.Array,
    v_next_t: jax.Array,
    terminated_t: jax.Array,
    done_t: jax.Array,
    gamma: float | jax.Array,
    gae_lambda: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates of one stream of T steps, truncation-correct.

    ``delta_t = r_t + gamma * (1 - terminated_t) * v_next_t - v_t`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` with ``A_T = 0``:
    a terminated step bootstraps 0; a truncated step bootstraps from the value of
    its final observation but does not carry the next episode's advantages back;
    the last step of the stream bootstraps from ``v_next_{T-1}``.

    Args:
        r_t: float32 ``(T,)`` rewards.
        v_t: float32 ``(T,)`` values of the observations acted in.
        v_next_t: float32 ``(T,)`` values of the observations each step led to
            (the final observation where the episode ended).
        terminated_t: bool ``(T,)``: the episode reached a terminal state.
        done_t: bool ``(T,)``: the episode ended (terminated or truncated).
        gamma: discount.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, float32 ``(T,)`` each; ``returns = advantages + v_t``.
    """
    chex.assert_rank([r_t, v_t, v_next_t, terminated_t, done_t], 1)
    chex.assert_equal_shape([r_t, v_t, v_next_t, terminated_t, done_t])
    not_terminal = 1.0 - terminated_t.astype(jnp.float32)
    continues = 1.0 - done_t.astype(jnp.float32)
    delta_t = r_t + gamma * not_terminal * v_next_t - v_t

    def backward(advantage: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        delta, cont = inputs
        advantage = delta + gamma * gae_lambda * cont * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros((), delta_t.dtype), (delta_t, continues), reverse=True)
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
