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


def _integer_dtype(dtype: Any, where: str) -> Any:
    """``dtype`` as a numpy dtype, which must be an integer one (a discrete space's samples)."""
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(
            f"{where}: dtype must be an integer dtype (jnp.int32, the default, or jnp.uint8, ...), "
            f"got {dtype.name}; a discrete space's values are integers."
        )
    return dtype


def _check_counts(given: Any, dtype: Any, where: str, *, one: bool = False) -> np.ndarray:
    """``given`` (the raw ``n``, or ``nvec``) as int64, refusing non-integers, bools, entries < 1,
    entries whose largest value does not fit ``dtype`` and, with ``one``, more than one entry."""
    try:
        values = np.asarray(given)
    except (TypeError, ValueError):
        values = np.asarray(None)
    if one and values.shape != ():
        raise ValueError(f"{where}: n must be one integer; for a vector of counts use MultiDiscrete(nvec).")
    integral = np.issubdtype(values.dtype, np.integer) or (
        np.issubdtype(values.dtype, np.floating)
        and bool(np.all(np.isfinite(values) & (values == np.round(values))))
    )
    if values.dtype == np.bool_ or not integral:
        raise ValueError(
            f"{where}: the number of values must be an integer >= 1, got {given!r:.80} "
            f"({values.dtype.name}); pass an int such as 3 (a float or bool is not truncated for you)."
        )
    counts = values.astype(np.int64)
    if counts.size == 0 or np.any(counts < 1):
        what = "n must be at least 1" if counts.shape == () else "every entry must be >= 1"
        raise ValueError(f"{where}: {what}, got {counts.tolist()}.")
    if np.any(counts - 1 > np.iinfo(dtype).max):
        raise ValueError(
            f"{where}: values up to {int(counts.max()) - 1} do not fit dtype {np.dtype(dtype).name} "
            f"(at most {np.iinfo(dtype).max}); pass a wider dtype or fewer values."
        )
    return counts


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
        where = f"Discrete(n={n!r:.40})"
        self.dtype = _integer_dtype(dtype, where)
        self.n = int(_check_counts(n, self.dtype, where, one=True))
        self.shape = ()

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
        where = f"MultiDiscrete(nvec={nvec!r:.60})"
        self.dtype = _integer_dtype(dtype, where)
        self.nvec = _check_counts(nvec, self.dtype, where)
        self.shape = tuple(self.nvec.shape)

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
        try:
            low_np, high_np = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"Box: low and high must be numbers or arrays of numbers, got low={low!r:.60}, "
                f"high={high!r:.60}."
            ) from None
        self.dtype = jnp.dtype(dtype)
        if not (
            jnp.issubdtype(self.dtype, jnp.floating)
            or jnp.issubdtype(self.dtype, jnp.integer)
            or self.dtype == jnp.bool_
        ):
            raise TypeError(
                f"Box: dtype must be a float, integer or bool dtype, got {self.dtype.name}; "
                "pass jnp.float32 (the default), an integer dtype such as jnp.uint8, or jnp.bool_."
            )
        self.shape = _box_shape(low_np, high_np, shape)
        if np.isnan(low_np).any() or np.isnan(high_np).any():
            raise ValueError(
                f"Box: low and high must not be NaN, got low={low!r:.60}, high={high!r:.60}; "
                "use -jnp.inf / jnp.inf for an unbounded side."
            )
        low_np, high_np = np.broadcast_to(low_np, self.shape), np.broadcast_to(high_np, self.shape)
        if np.any(low_np > high_np):
            raise ValueError(f"Box: low must be <= high everywhere, got low={low}, high={high}.")
        if not jnp.issubdtype(self.dtype, jnp.floating):
            _check_integer_bounds(low_np, high_np, self.dtype)
        self.low = low_np.astype(self.dtype)
        self.high = high_np.astype(self.dtype)

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


def _box_shape(low: np.ndarray, high: np.ndarray, shape: Sequence[int] | None) -> tuple[int, ...]:
    """The shape of a Box: ``shape`` checked, or that of ``low`` and ``high`` broadcast."""
    if shape is None:
        try:
            return tuple(np.broadcast_shapes(low.shape, high.shape))
        except ValueError:
            raise ValueError(
                f"Box: low of shape {low.shape} and high of shape {high.shape} do not broadcast "
                "together; pass bounds of one shape (or scalars with shape=...)."
            ) from None
    if isinstance(shape, (int, np.integer)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise TypeError(f"Box: shape must be a tuple of ints such as (3,), got {shape!r:.60}.")
    if not all(isinstance(size, (int, np.integer)) and not isinstance(size, bool) for size in shape):
        raise TypeError(f"Box: shape must be a tuple of ints such as (3,), got {tuple(shape)!r:.60}.")
    dims = tuple(int(size) for size in shape)
    if any(size < 0 for size in dims):
        raise ValueError(f"Box: shape must not have negative sizes, got {dims}.")
    for name, bound in (("low", low), ("high", high)):
        try:
            np.broadcast_to(bound, dims)
        except ValueError:
            raise ValueError(
                f"Box: {name} of shape {bound.shape} does not broadcast to shape={dims}; pass a "
                f"scalar {name} or one of shape {dims}."
            ) from None
    return dims


def _check_integer_bounds(low: np.ndarray, high: np.ndarray, dtype: Any) -> None:
    """An integer (or bool) Box's bounds must be finite whole numbers that its dtype can hold."""
    name = np.dtype(dtype).name
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(
            f"Box: an integer Box ({name}) needs finite bounds, got an infinite one; use a float "
            "dtype for an unbounded side, or the dtype's limits (jnp.iinfo(dtype).min / .max)."
        )
    fractional = np.concatenate([low[low != np.round(low)], high[high != np.round(high)]])
    if fractional.size:
        raise ValueError(
            f"Box: an integer Box ({name}) needs whole-number bounds, got {fractional[:3].tolist()}; "
            "round them yourself (np.ceil(low), np.floor(high)) or use a float dtype."
        )
    least, most = (0, 1) if np.dtype(dtype) == np.bool_ else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    if low.min(initial=least) < least or high.max(initial=most) > most:
        raise ValueError(
            f"Box: bounds [{low.min()}, {high.max()}] do not fit dtype {name} "
            f"([{least}, {most}]); pass a wider dtype or narrower bounds."
        )


def _check_entries(entries: Mapping[Any, Any], where: str) -> None:
    """Every entry of a Tuple or Dict must be a space (a number or array is not one)."""
    for name, entry in entries.items():
        if not isinstance(entry, Space):
            raise TypeError(
                f"{where}: entry {name!r} must be a space (Discrete, Box, ...), got "
                f"{type(entry).__name__} {entry!r:.60}; wrap it, e.g. Discrete(n) or Box(low, high, shape)."
            )


class Tuple(Space):
    """A tuple of spaces; elements are Python tuples."""

    def __init__(self, spaces: Sequence[Space]):
        if isinstance(spaces, (Space, Mapping, str)) or not isinstance(spaces, Sequence):
            raise TypeError(f"Tuple takes a sequence of spaces, got {spaces!r:.80}; use Dict for a mapping.")
        self.spaces = tuple(spaces)
        _check_entries(dict(enumerate(self.spaces)), "Tuple")
        self.shape = ()
        self.dtype = None

    def sample(self, key: PRNGKey) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys))

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.spaces):
            return jnp.asarray(False)
        return jnp.all(jnp.stack([jnp.asarray(True)] + [s.contains(v) for s, v in zip(self.spaces, x)]))

    def __getitem__(self, i: int) -> Space:
        return self.spaces[i]

    def __repr__(self) -> str:
        return f"Tuple({', '.join(map(repr, self.spaces))})"


class Dict(Space):
    """A mapping of names to spaces; elements are dicts with the same keys."""

    def __init__(self, spaces: Mapping[str, Space]):
        if not isinstance(spaces, Mapping):
            raise TypeError(
                f"Dict takes a mapping of names to spaces, such as Dict({{'position': Box(-1, 1, (2,))}}), "
                f"got {spaces!r:.80}; use Tuple for a sequence."
            )
        self.spaces = dict(spaces)
        _check_entries(self.spaces, "Dict")
        self.shape = ()
        self.dtype = None

    def sample(self, key: PRNGKey) -> dict[str, Any]:
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys)}

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, Mapping) or set(x) != set(self.spaces):
            return jnp.asarray(False)
        return jnp.all(
            jnp.stack([jnp.asarray(True)] + [s.contains(x[name]) for name, s in self.spaces.items()])
        )

    def __getitem__(self, name: str) -> Space:
        return self.spaces[name]

    def __repr__(self) -> str:
        return "Dict(" + ", ".join(f"{k}: {v!r}" for k, v in self.spaces.items()) + ")"
