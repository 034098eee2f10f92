"""The "time left" feature of MemoryChain and UmbrellaChain, bit for bit as bsuite computes it.

bsuite stores ``1 - t / L`` (computed in float64) in a float32 observation. For
the integers involved that equals the correctly rounded float32 quotient
``(L - t) / L``, which is what a float32 division returns. XLA, however,
rewrites a division by a constant, or by a value broadcast over a batch, into a
multiplication by its reciprocal, which is one ulp off for many lengths (L = 10,
t = 1 gives 0.90000004 instead of 0.9). That happens under ``jit`` with params
closed over (``L`` is a constant) and under ``vmap`` with params shared by the
batch (``L`` is broadcast).

DiscountingChain avoids the rewrite with a float32 table computed in NumPy,
which works because its length (100) is fixed when the program is traced. Here
``L`` is a traced param, so no table can be built; instead the divisor is ``L``
plus ``0 * t``: it holds the same value, but it depends on the step counter, so
it is neither a constant nor a broadcast, and XLA keeps the true division. (A
float ``0 * t`` is not folded away, since ``0 * inf`` is NaN; ``t`` is a finite
step count, so the sum is exactly ``L``.) Where ``t`` is itself a constant (the
reset), the whole quotient is folded at compile time, exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["time_left"]


def time_left(length: jax.typing.ArrayLike, time: jax.typing.ArrayLike) -> jax.Array:
    """float32 ``1 - time / length`` as bsuite stores it (exact under jit and vmap)."""
    length_f = jnp.asarray(length).astype(jnp.float32)
    time_f = jnp.asarray(time).astype(jnp.float32)
    return (length_f - time_f) / (length_f + 0.0 * time_f)
