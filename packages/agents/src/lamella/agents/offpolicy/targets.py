"""TD targets and critic losses of the off-policy agents, written for one transition.

Each function takes the quantities of *one* transition (rlax style: ``r_t`` the reward,
``discount_t`` the bootstrap multiplier, ``q_next_t`` values at the next observation) and is
batched with ``jax.vmap``. ``discount_t`` already contains everything about the episode end:
``gamma ** k`` for a k-step transition that was cut by a time limit or still runs, and 0 where
the episode *terminated*. A time limit is not a terminal state: the runners store the true final
observation as ``next_obs`` and bootstrap from it with the full discount.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "clipped_double_q_target",
    "discrete_soft_q_target",
    "double_q_learning_target",
    "huber_loss",
    "q_learning_target",
    "quantile_huber_loss",
    "return_bounds",
    "soft_q_target",
    "tqc_target",
]


def q_learning_target(r_t: jax.Array, discount_t: jax.Array, q_next_t: jax.Array) -> jax.Array:
    """DQN's target ``r_t + discount_t * max_a q_next_t[a]``.

    Args:
        r_t: float32 ``()`` reward (n-step discounted sum for an n-step transition).
        discount_t: float32 ``()`` bootstrap multiplier (0 at a terminal state).
        q_next_t: float32 ``(num_actions,)`` target-network values at the next observation.
    """
    chex.assert_rank([r_t, discount_t, q_next_t], [0, 0, 1])
    return r_t + discount_t * jnp.max(q_next_t)


def double_q_learning_target(
    r_t: jax.Array, discount_t: jax.Array, q_next_target_t: jax.Array, q_next_online_t: jax.Array
) -> jax.Array:
    """Double DQN: the online network picks the action, the target network values it.

    ``r_t + discount_t * q_next_target_t[argmax_a q_next_online_t[a]]``.
    """
    chex.assert_rank([r_t, discount_t, q_next_target_t, q_next_online_t], [0, 0, 1, 1])
    chex.assert_equal_shape([q_next_target_t, q_next_online_t])
    return r_t + discount_t * q_next_target_t[jnp.argmax(q_next_online_t)]


def soft_q_target(
    r_t: jax.Array,
    discount_t: jax.Array,
    q_next_t: jax.Array,
    log_prob_next_t: jax.Array,
    alpha: jax.Array | float,
) -> jax.Array:
    """SAC's target ``r_t + discount_t * (min_i q_next_t[i] - alpha * log_prob_next_t)``.

    Args:
        q_next_t: float32 ``(num_critics,)`` target critics at (next obs, next action sampled
            from the current policy).
        log_prob_next_t: float32 ``()`` log-probability of that next action.
        alpha: entropy temperature.
    """
    chex.assert_rank([r_t, discount_t, q_next_t, log_prob_next_t], [0, 0, 1, 0])
    return r_t + discount_t * (jnp.min(q_next_t) - alpha * log_prob_next_t)


def clipped_double_q_target(r_t: jax.Array, discount_t: jax.Array, q_next_t: jax.Array) -> jax.Array:
    """TD3's clipped double-Q target ``r_t + discount_t * min_i q_next_t[i]`` (DDPG: one critic).

    Target policy smoothing (noise on the next action) happens before the critics are
    evaluated, not here.
    """
    chex.assert_rank([r_t, discount_t, q_next_t], [0, 0, 1])
    return r_t + discount_t * jnp.min(q_next_t)


def discrete_soft_q_target(
    r_t: jax.Array,
    discount_t: jax.Array,
    q_next_t: jax.Array,
    log_probs_next_t: jax.Array,
    alpha: jax.Array | float,
) -> jax.Array:
    """Discrete SAC: the soft value is an exact expectation over the next action.

    ``r_t + discount_t * sum_a pi(a) (min_i q_next_t[i, a] - alpha log pi(a))``.

    Args:
        q_next_t: float32 ``(num_critics, num_actions)`` target critics at the next observation.
        log_probs_next_t: float32 ``(num_actions,)`` log pi(a | next obs).
    """
    chex.assert_rank([r_t, discount_t, q_next_t, log_probs_next_t], [0, 0, 2, 1])
    probs = jnp.exp(log_probs_next_t)
    soft_value = jnp.sum(probs * (jnp.min(q_next_t, axis=0) - alpha * log_probs_next_t))
    return r_t + discount_t * soft_value


def tqc_target(
    r_t: jax.Array,
    discount_t: jax.Array,
    quantiles_next_t: jax.Array,
    log_prob_next_t: jax.Array,
    alpha: jax.Array | float,
    num_dropped: int,
) -> jax.Array:
    """TQC's truncated target distribution (Kuznetsov et al. 2020).

    The quantiles of all critics are pooled and sorted; the ``num_dropped`` largest are dropped
    and each remaining atom ``z`` becomes ``r_t + discount_t * (z - alpha * log_prob_next_t)``.

    Args:
        quantiles_next_t: float32 ``(num_critics, num_quantiles)`` target critics' quantiles at
            (next obs, next action).
        log_prob_next_t: float32 ``()``.
        alpha: entropy temperature.
        num_dropped: atoms dropped from the top (``num_critics * drop_per_critic``); static.

    Returns:
        float32 ``(num_critics * num_quantiles - num_dropped,)`` target atoms, ascending.
    """
    chex.assert_rank([r_t, discount_t, quantiles_next_t, log_prob_next_t], [0, 0, 2, 0])
    pooled = jnp.sort(quantiles_next_t.reshape(-1))
    kept = pooled.shape[0] - int(num_dropped)
    if kept < 1:
        raise ValueError(
            f"tqc_target: dropping {num_dropped} of {pooled.shape[0]} atoms leaves none; drop fewer."
        )
    return r_t + discount_t * (pooled[:kept] - alpha * log_prob_next_t)


def return_bounds(gamma: float, reward_bounds: tuple[float, float]) -> tuple[float, float]:
    """The discounted returns that per-step rewards in ``reward_bounds`` allow.

    With rewards in ``[lo, hi]`` and an episode that may end at any step (a terminal state is
    worth 0), every return lies in ``[min(lo, 0) / (1 - gamma), max(hi, 0) / (1 - gamma)]``:
    for the sparse goal reward ``-1 / 0`` and gamma 0.98, ``[-50, 0]``. Clipping critic targets
    to this range (HER's robotics setting) keeps a critic that has not learned yet from
    bootstrapping values no policy can reach.

    Raises:
        ValueError: ``lo > hi``, a bound that is not finite, or ``gamma >= 1`` (no finite range).
    """
    lo, hi = (float(b) for b in reward_bounds)
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise ValueError(
            f"reward_bounds must be two finite numbers (lowest, highest reward), lowest first; got {reward_bounds}."
        )
    if not 0.0 <= gamma < 1.0:
        raise ValueError(
            f"reward_bounds needs gamma < 1 (the return range is reward / (1 - gamma)); got gamma {gamma}."
        )
    return min(lo, 0.0) / (1.0 - gamma), max(hi, 0.0) / (1.0 - gamma)


def huber_loss(error: jax.Array, delta: float = 1.0) -> jax.Array:
    """Elementwise Huber loss: ``0.5 e^2`` for ``|e| <= delta``, else ``delta (|e| - 0.5 delta)``."""
    abs_error = jnp.abs(error)
    quadratic = jnp.minimum(abs_error, delta)
    return 0.5 * jnp.square(quadratic) + delta * (abs_error - quadratic)


def quantile_huber_loss(quantiles_t: jax.Array, target_atoms_t: jax.Array, kappa: float = 1.0) -> jax.Array:
    """Quantile-regression Huber loss of one critic's quantiles against target atoms.

    ``tau_i = (2 i + 1) / (2 N)``; for every pair (quantile ``i``, atom ``j``) with
    ``u = atom_j - quantile_i``: ``|tau_i - 1[u < 0]| * huber(u, kappa) / kappa``, averaged over
    atoms and summed over quantiles (as in QR-DQN and TQC).

    Args:
        quantiles_t: float32 ``(num_quantiles,)`` predicted quantiles.
        target_atoms_t: float32 ``(num_atoms,)`` target samples (no gradient flows into them).
        kappa: Huber threshold.

    Returns:
        float32 ``()``.
    """
    chex.assert_rank([quantiles_t, target_atoms_t], 1)
    n = quantiles_t.shape[0]
    tau = (2 * jnp.arange(n, dtype=jnp.float32) + 1) / (2 * n)
    u = jax.lax.stop_gradient(target_atoms_t)[None, :] - quantiles_t[:, None]
    weight = jnp.abs(tau[:, None] - (u < 0).astype(jnp.float32))
    return jnp.sum(jnp.mean(weight * huber_loss(u, kappa) / kappa, axis=1))
