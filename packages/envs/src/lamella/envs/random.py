"""Cheap random numbers derived from a key's bits.

Environments draw most of their randomness once per step (a reset state, a
spawn, a sticky action). Under ``vmap`` the auto-reset draws a reset state for
every env on every step, and with ``jax.random`` each draw is a Threefry
evaluation that costs more than a whole CartPole step on CPU (gymnax spends
four of them per step). These functions instead hash the 64 bits of the key
the caller passed in with a 32-bit integer finaliser (the one from
MurmurHash3), a dozen integer operations per value.

The key must be fresh (split by the caller, as the step/reset contract already
requires); different ``stream`` numbers give independent values from one key.
The values are statistically uniform, not cryptographic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["bernoulli", "bits", "normal", "randint", "uniform"]

_GOLDEN = np.uint32(0x9E3779B9)
_STREAM = np.uint32(0x85EBCA6B)


def _fmix32(z: jax.Array) -> jax.Array:
    z = z ^ (z >> 16)
    z = z * np.uint32(0x85EBCA6B)
    z = z ^ (z >> 13)
    z = z * np.uint32(0xC2B2AE35)
    return z ^ (z >> 16)


def _key_words(key: Any) -> tuple[jax.Array, jax.Array]:
    key = jnp.asarray(key) if not hasattr(key, "dtype") else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        data = jax.random.key_data(key)
    else:
        data = key
    data = data.astype(jnp.uint32)
    if data.shape[-1] < 2:
        raise ValueError(f"expected a PRNG key, got an array of shape {data.shape}")
    # Fold every word in so key implementations with more than two words (rbg) are used fully.
    return data[..., 0] ^ data[..., 2:].sum(-1, dtype=jnp.uint32), data[..., 1]


def bits(key: Any, shape: Sequence[int] = (), stream: int = 0) -> jax.Array:
    """Uniform uint32 words of ``shape`` derived from ``key`` (one key, not a batch)."""
    k0, k1 = _key_words(key)
    n = int(np.prod(shape)) if len(shape) else 1
    # Wrap-around in uint32 is intended; Python ints avoid NumPy's scalar-overflow warning.
    stream_offset = np.uint32((int(stream) * int(_STREAM)) & 0xFFFFFFFF)
    counter = np.arange(n, dtype=np.uint32) * _GOLDEN + stream_offset
    words = _fmix32(_fmix32(k0 + counter) ^ k1)
    return words.reshape(tuple(shape))


def uniform(
    key: Any,
    shape: Sequence[int] = (),
    minval: Any = 0.0,
    maxval: Any = 1.0,
    stream: int = 0,
) -> jax.Array:
    """Float32 uniform in ``[minval, maxval)`` (23 random mantissa bits)."""
    words = bits(key, shape, stream)
    unit = jax.lax.bitcast_convert_type((words >> 9) | np.uint32(0x3F800000), jnp.float32) - 1.0
    return minval + unit * (jnp.asarray(maxval, jnp.float32) - minval)


def bernoulli(key: Any, p: Any, shape: Sequence[int] = (), stream: int = 0) -> jax.Array:
    """Booleans that are True with probability ``p``."""
    return uniform(key, shape, stream=stream) < p


def randint(key: Any, shape: Sequence[int], minval: Any, maxval: Any, stream: int = 0) -> jax.Array:
    """Int32 uniform in ``[minval, maxval)``."""
    u = uniform(key, shape, stream=stream)
    span = jnp.asarray(maxval, jnp.float32) - minval
    return jnp.minimum(minval + jnp.floor(u * span).astype(jnp.int32), jnp.asarray(maxval) - 1)


def normal(key: Any, shape: Sequence[int] = (), stream: int = 0) -> jax.Array:
    """Standard normal float32 (Box-Muller on two uniforms)."""
    u1 = uniform(key, shape, stream=2 * stream)
    u2 = uniform(key, shape, stream=2 * stream + 1)
    radius = jnp.sqrt(-2.0 * jnp.log1p(-u1))
    return radius * jnp.cos(2.0 * jnp.pi * u2)
