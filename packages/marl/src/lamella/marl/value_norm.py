"""Value normalisation: the critic predicts values in units of running target statistics.

With ``normalize_values=True`` an IPPO/MAPPO critic outputs ``(value - mean) / std``, where
``mean`` and ``std`` are a running mean and standard deviation of every value target (GAE return)
seen so far, one scalar pair over all agents, envs and steps, kept in the train state as a
:class:`lamella.envs.wrappers.RunningMeanStd` (parallel Welford: every target counts equally,
no exponential forgetting). Each update:

1. the values the critic gave while acting, and the bootstrap values, are mapped back to return
   units with the statistics they were computed under (:func:`denormalize`);
2. GAE runs in return units, so advantages do not depend on the normalisation;
3. the statistics absorb this rollout's targets (``update_batch``);
4. the critic is trained on the targets :func:`normalize`-d with the new statistics, and the
   old values (for the clipped value loss) are re-expressed in the same units.

The critic's weights are not rescaled when the statistics move (that is what PopArt adds); the
targets move slowly once many rollouts have been counted. Returns of very different sizes
(RWARE's sparse deliveries, MPE's distance sums of -20 to -60) then give value losses of the
same order, so ``vf_coef`` and the gradient clip mean the same on every env.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lamella.envs.wrappers import RunningMeanStd

__all__ = ["EPSILON", "denormalize", "normalize"]

#: Added to the variance before the square root (a constant target has std 0).
EPSILON = 1e-8


def normalize(stats: RunningMeanStd, x: jax.Array) -> jax.Array:
    """``(x - mean) / sqrt(var + EPSILON)``, unclipped (values, unlike observations, are not clipped)."""
    return (x - stats.mean) / jnp.sqrt(stats.var + EPSILON)


def denormalize(stats: RunningMeanStd, x: jax.Array) -> jax.Array:
    """The inverse of :func:`normalize`: ``x * sqrt(var + EPSILON) + mean``."""
    return x * jnp.sqrt(stats.var + EPSILON) + stats.mean
