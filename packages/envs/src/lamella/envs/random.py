"""Cheap random numbers derived from a key's bits.

Environments draw most of their randomness once per step (a reset state, a
spawn, a sticky action). Under ``vmap`` the auto-reset draws a reset state for
every env on every step, and with ``jax.random`` each draw is a Threefry
evaluation that costs more than a whole CartPole step on CPU (gymnax spends
four of them per step). These functions instead use the 64 bits of the key the
caller passed in: its own two words first, then words hashed from it with a
32-bit integer finaliser (the one from MurmurHash3), a few integer operations
per value. :func:`uniform16` takes two values from each word.

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

__all__ = ["bernoulli", "bits", "fork", "normal", "randint", "uniform", "uniform16"]

_GOLDEN = np.uint32(0x9E3779B9)
_STREAM = np.uint32(0x85EBCA6B)
_SCALAR_LIMIT = 64  # up to this many values, each is computed as a separate scalar


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


def _words(key: Any, count: int, stream: int) -> list[jax.Array]:
    """``count`` uint32 words of one key, each computed as its own scalar.

    Stream 0 starts with the key's own two words: a fresh key's bits are already uniform
    (Threefry output), and reading them is the cheapest randomness there is. Every further
    word is ``fmix32((k0 + c) ^ k1)`` for a distinct constant ``c``, which depends on all
    64 key bits. Scalars (not one vector op over a short minor axis) keep the work
    vectorised over the batch axis when the caller is vmapped.
    """
    k0, k1 = _key_words(key)
    words = []
    for j in range(count):
        if stream == 0 and j < 2:
            words.append((k0, k1)[j])
        else:
            # Wrap-around in uint32 is intended; Python ints avoid NumPy's scalar-overflow warning.
            c = np.uint32((int(stream) * int(_STREAM) + j * int(_GOLDEN)) & 0xFFFFFFFF)
            words.append(_fmix32((k0 + c) ^ k1))
    return words


def bits(
    key: Any, shape: Sequence[int] = (), stream: int = 0, *, vector: bool = False, index: Any = None
) -> jax.Array:
    """Uniform uint32 words of ``shape`` derived from ``key`` (one key, not a batch).

    Up to 64 words are computed as separate scalars, which stays vectorised over a batch
    axis when the caller is vmapped; ``vector=True`` computes them as one vector operation
    instead (the same values), one kernel rather than one per word outside ``vmap``.

    ``index`` (integer array, may be traced; ``shape`` is then ignored): only the words at these
    flat positions of a larger draw, ``bits(key, big_shape, stream, vector=True).ravel()[index]``,
    computed without the rest. A device holding one block of a batch draws its block of the
    batch's numbers this way (``lamella.agents.devices``), the same numbers one device draws.
    """
    if index is not None:
        return _bits_at(key, jnp.asarray(index), stream)
    n = int(np.prod(shape)) if len(shape) else 1
    if n == 0:  # an empty shape such as (0,): nothing to draw (jnp.stack needs one word)
        return jnp.zeros(tuple(shape), jnp.uint32)
    if n <= _SCALAR_LIMIT and not vector:
        words = _words(key, n, stream)
        return jnp.stack(words).reshape(tuple(shape)) if len(shape) else words[0]
    k0, k1 = _key_words(key)
    offsets = (int(stream) * int(_STREAM) + np.arange(n, dtype=np.int64) * int(_GOLDEN)) & 0xFFFFFFFF
    hashed = _fmix32((k0 + offsets.astype(np.uint32)) ^ k1)
    if stream == 0:
        hashed = hashed.at[0].set(k0).at[1].set(k1)
    return hashed.reshape(tuple(shape))


def _bits_at(key: Any, index: jax.Array, stream: int) -> jax.Array:
    """The words of ``bits(..., vector=True)`` at flat positions ``index`` (uint32 arithmetic
    wraps exactly as the int64-and-mask constants of :func:`bits` do)."""
    k0, k1 = _key_words(key)
    position = index.astype(jnp.uint32)
    offsets = np.uint32((int(stream) * int(_STREAM)) & 0xFFFFFFFF) + position * _GOLDEN
    hashed = _fmix32((k0 + offsets) ^ k1)
    if stream == 0:
        hashed = jnp.where(position == 0, k0, jnp.where(position == 1, k1, hashed))
    return hashed


def _unit(words: jax.Array, mantissa_bits: int = 23) -> jax.Array:
    """Float32 in [0, 1) from the top ``mantissa_bits`` bits of uint32 words."""
    top = (words >> (32 - mantissa_bits)) << (23 - mantissa_bits)
    return jax.lax.bitcast_convert_type(top | np.uint32(0x3F800000), jnp.float32) - 1.0


def uniform16(
    key: Any,
    shape: Sequence[int] = (),
    minval: Any = 0.0,
    maxval: Any = 1.0,
    stream: int = 0,
) -> jax.Array:
    """Float32 uniform in ``[minval, maxval)`` with 16 random bits per value.

    Two values per word, so a fresh key's own 64 bits give four values with no hashing at all:
    the cheapest way to draw a small reset state (CartPole's four values in [-0.05, 0.05] get
    a resolution of 1.5e-6). Use :func:`uniform` where 16 bits of resolution are too few.
    """
    n = int(np.prod(shape)) if len(shape) else 1
    words = _words(key, (n + 1) // 2, stream)
    halves = [half for word in words for half in (word, word << 16)][:n]
    values = [minval + _unit(h, 16) * (jnp.asarray(maxval, jnp.float32) - minval) for h in halves]
    return jnp.stack(values).reshape(tuple(shape)) if len(shape) else values[0]


def uniform(
    key: Any,
    shape: Sequence[int] = (),
    minval: Any = 0.0,
    maxval: Any = 1.0,
    stream: int = 0,
    *,
    vector: bool = False,
    index: Any = None,
) -> jax.Array:
    """Float32 uniform in ``[minval, maxval)`` (23 random mantissa bits); ``vector``, ``index``:
    see :func:`bits`."""
    words = bits(key, shape, stream, vector=vector, index=index)
    return minval + _unit(words) * (jnp.asarray(maxval, jnp.float32) - minval)


def bernoulli(key: Any, p: Any, shape: Sequence[int] = (), stream: int = 0) -> jax.Array:
    """Booleans that are True with probability ``p``."""
    return uniform(key, shape, stream=stream) < p


def randint(key: Any, shape: Sequence[int], minval: Any, maxval: Any, stream: int = 0) -> jax.Array:
    """Int32 uniform in ``[minval, maxval)``."""
    u = uniform(key, shape, stream=stream)
    span = jnp.asarray(maxval, jnp.float32) - minval
    return jnp.minimum(minval + jnp.floor(u * span).astype(jnp.int32), jnp.asarray(maxval) - 1)


def normal(
    key: Any, shape: Sequence[int] = (), stream: int = 0, *, vector: bool = False, index: Any = None
) -> jax.Array:
    """Standard normal float32 (Box-Muller on two uniforms); ``vector``, ``index``: see :func:`bits`."""
    u1 = uniform(key, shape, stream=2 * stream, vector=vector, index=index)
    u2 = uniform(key, shape, stream=2 * stream + 1, vector=vector, index=index)
    radius = jnp.sqrt(-2.0 * jnp.log1p(-u1))
    return radius * jnp.cos(2.0 * jnp.pi * u2)


def fork(key: Any) -> Any:
    """A second key from ``key``, for a few integer operations instead of a Threefry split.

    Each word of the new key is a hash of all of ``key``'s words, so values drawn from it (with
    this module or with ``jax.random``) are statistically independent of values drawn from
    ``key`` itself. The auto-reset uses it to give a random step and the reset their own keys.
    Works for typed keys of any implementation and for legacy uint32 keys.
    """
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    data = jax.random.key_data(key) if typed else key
    words = data.astype(jnp.uint32)
    size = words.shape[-1]
    mixed = []
    for i in range(size):
        salt = np.uint32((0x632BE5AB * (i + 1)) & 0xFFFFFFFF)
        neighbour = words[..., (i + 1) % size]
        mixed.append(_fmix32((words[..., i] ^ salt) + _fmix32(neighbour ^ _GOLDEN)))
    new = jnp.stack(mixed, axis=-1).astype(data.dtype)
    return jax.random.wrap_key_data(new, impl=jax.random.key_impl(key)) if typed else new
