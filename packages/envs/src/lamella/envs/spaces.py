"""Spaces: what observations and actions look like.

Every space has ``shape``, ``dtype``, ``sample(key)`` and ``contains(x)``; both
methods are pure and jit/vmap-safe (``contains`` returns a boolean array, never
a Python bool, so it can run inside compiled code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Box", "Dict", "Discrete", "MultiDiscrete", "Space", "Tuple"]

PRNGKey = jax.Array


class Space:
    """Base class of all spaces."""

    shape: tuple[int, ...] = ()
    dtype: Any = None

    def sample(self, key: PRNGKey) -> Any:
        raise NotImplementedError

    def contains(self, x: Any) -> jax.Array:
        raise NotImplementedError


class Discrete(Space):
    """Integers ``0 .. n - 1``.

    Args:
        n: number of values; must be >= 1.
        dtype: integer dtype of samples (int32 by default).
    """

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if int(n) < 1:
            raise ValueError(f"Discrete(n={n}): n must be at least 1.")
        self.n = int(n)
        self.shape = ()
        self.dtype = jnp.dtype(dtype)

    def sample(self, key: PRNGKey) -> jax.Array:
        return jax.random.randint(key, self.shape, 0, self.n).astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        integral = jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.bool_)
        if not integral or x.shape != self.shape:
            return jnp.asarray(False)
        return jnp.logical_and(x >= 0, x < self.n)

    def __repr__(self) -> str:
        return f"Discrete({self.n})"


class MultiDiscrete(Space):
    """A vector of integers, entry ``i`` in ``0 .. nvec[i] - 1``.

    Multi-agent envs with one discrete action per agent use this with the agent
    axis leading: ``MultiDiscrete([n] * num_agents)``.
    """

    def __init__(self, nvec: Sequence[int] | np.ndarray, dtype: Any = jnp.int32):
        nvec_np = np.asarray(nvec, dtype=np.int64)
        if nvec_np.size == 0 or np.any(nvec_np < 1):
            raise ValueError(f"MultiDiscrete(nvec={list(nvec_np)}): every entry must be >= 1.")
        self.nvec = nvec_np
        self.shape = tuple(nvec_np.shape)
        self.dtype = jnp.dtype(dtype)

    def sample(self, key: PRNGKey) -> jax.Array:
        u = jax.random.uniform(key, self.shape)
        return jnp.floor(u * jnp.asarray(self.nvec)).astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.integer) or x.shape != self.shape:
            return jnp.asarray(False)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))

    def __repr__(self) -> str:
        return f"MultiDiscrete({self.nvec.tolist()})"


class Box(Space):
    """A (possibly unbounded) box in R^n.

    Args:
        low: lower bound, scalar or array broadcastable to ``shape``.
        high: upper bound, same rules.
        shape: shape of elements; inferred from ``low``/``high`` when omitted.
        dtype: float32 by default; integer dtypes (e.g. uint8 images) are allowed.
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: Sequence[int] | None = None,
        dtype: Any = jnp.float32,
    ):
        low_np, high_np = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if shape is None:
            shape = np.broadcast_shapes(low_np.shape, high_np.shape)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = jnp.dtype(dtype)
        self.low = np.broadcast_to(low_np, self.shape).astype(self.dtype)
        self.high = np.broadcast_to(high_np, self.shape).astype(self.dtype)
        if np.any(self.low > self.high):
            raise ValueError(f"Box: low must be <= high everywhere, got low={low}, high={high}.")

    def sample(self, key: PRNGKey) -> jax.Array:
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(
                key, self.shape, self.low.astype(np.int64), self.high.astype(np.int64) + 1
            ).astype(self.dtype)
        # Unbounded sides are sampled from a normal / exponential so sample() never returns inf.
        low, high = jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32)
        k_uniform, k_normal, k_exp = jax.random.split(key, 3)
        uniform = jax.random.uniform(k_uniform, self.shape, minval=low, maxval=high)
        normal = jax.random.normal(k_normal, self.shape)
        expo = jax.random.exponential(k_exp, self.shape)
        lo_inf, hi_inf = jnp.isinf(low), jnp.isinf(high)
        out = jnp.where(lo_inf & hi_inf, normal, uniform)
        out = jnp.where(lo_inf & ~hi_inf, high - expo, out)
        out = jnp.where(~lo_inf & hi_inf, low + expo, out)
        return out.astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        if jnp.issubdtype(self.dtype, jnp.integer) and not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return jnp.all((x >= self.low) & (x <= self.high) & ~jnp.isnan(x))

    def __repr__(self) -> str:
        return f"Box(low={self.low.min()}, high={self.high.max()}, shape={self.shape}, dtype={self.dtype})"


class Tuple(Space):
    """A tuple of spaces; elements are Python tuples."""

    def __init__(self, spaces: Sequence[Space]):
        self.spaces = tuple(spaces)
        self.shape = ()
        self.dtype = None

    def sample(self, key: PRNGKey) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys))

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.spaces):
            return jnp.asarray(False)
        return jnp.all(jnp.stack([s.contains(v) for s, v in zip(self.spaces, x)]))

    def __getitem__(self, i: int) -> Space:
        return self.spaces[i]

    def __repr__(self) -> str:
        return f"Tuple({', '.join(map(repr, self.spaces))})"


class Dict(Space):
    """A mapping of names to spaces; elements are dicts with the same keys."""

    def __init__(self, spaces: Mapping[str, Space]):
        self.spaces = dict(spaces)
        self.shape = ()
        self.dtype = None

    def sample(self, key: PRNGKey) -> dict[str, Any]:
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys)}

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, Mapping) or set(x) != set(self.spaces):
            return jnp.asarray(False)
        return jnp.all(jnp.stack([s.contains(x[name]) for name, s in self.spaces.items()]))

    def __getitem__(self, name: str) -> Space:
        return self.spaces[name]

    def __repr__(self) -> str:
        return "Dict(" + ", ".join(f"{k}: {v!r}" for k, v in self.spaces.items()) + ")"
