"""Make XLA compute a value once instead of once per reader.

XLA's CPU fusion treats most elementwise operations, sine and cosine included,
as cheap, and copies a cheap value into every loop fusion that reads it rather
than writing it to memory once. Under ``vmap`` with auto-reset, a new state is
read by the state selects, the observation, ``terminated`` and the final
observation, so the physics that produced it ran four to seven times per step
(seven cosines for one in MountainCar, 86 sines and cosines for 24 in Acrobot).

A float division is one of the operations XLA's CPU fusion does not copy, so
``x / 1`` keeps ``x`` (and everything computed only for it) in one fusion
whose result the readers load. The divisor must be a 1 that XLA cannot see is
1 (it would drop the division): it is built from the step counter, which is
always finite, so the result equals ``x`` exactly, bit for bit, for every
``x`` (infinities and NaN included). On other backends this costs one
division per value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["computed_once"]


def computed_once(time: jax.Array, *values: jax.Array) -> tuple[jax.Array, ...]:
    """``values`` unchanged, each computed by one fusion (see the module docs).

    Args:
        time: the int32 step counter of the state (any finite number works).
        *values: float32 arrays.
    """
    one = 1.0 + 0.0 * jnp.asarray(time).astype(jnp.float32)
    return tuple(value / one for value in values)
