"""Helpers shared by the misc envs: time features and JAX-rendered grids and bars."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from lamella.envs import rendering

BACKGROUND = (245, 245, 245)
WALL = (40, 40, 48)
FLOOR = (235, 235, 228)
GRID_LINE = (190, 190, 190)
AGENT = (66, 135, 245)
GOAL = (250, 200, 40)
GOOD = (60, 190, 90)
BAD = (220, 60, 60)
NEUTRAL = (150, 150, 160)
INK = (20, 20, 20)


def normalized_time(time: jax.Array, min_lim: Any = -1.0, max_lim: Any = 1.0, t_max: Any = 100) -> jax.Array:
    """``time`` mapped linearly so that 0 -> ``min_lim`` and ``t_max`` -> ``max_lim`` (gymnax's time feature)."""
    return (max_lim - min_lim) * jnp.asarray(time, jnp.float32) / t_max + min_lim


def time_feature(time: jax.Array, normalize: Any, t_max: Any = 100) -> jax.Array:
    """Float32 time entry of an observation: normalised into [-1, 1] over ``t_max`` steps, or raw."""
    raw = jnp.asarray(time, jnp.float32)
    return jnp.where(normalize, normalized_time(raw, -1.0, 1.0, t_max), raw).astype(jnp.float32)


def palette(colors: Sequence[Sequence[int]]) -> jax.Array:
    """A ``(n, 3)`` uint8 lookup table for integer cell labels."""
    return jnp.asarray(colors, jnp.uint8)


def grid_frame(labels: jax.Array, colors: Sequence[Sequence[int]], cell: int) -> jax.Array:
    """``(rows, columns)`` int labels -> ``(rows * cell, columns * cell, 3)`` uint8, with grid lines."""
    return rendering.cells_to_frame(palette(colors)[labels], cell, GRID_LINE)


def int_state(x: Any) -> jax.Array:
    """An int32 scalar (or array) state field."""
    return jnp.asarray(x, jnp.int32)
