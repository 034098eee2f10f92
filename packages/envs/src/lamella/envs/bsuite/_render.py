"""Frames for the bsuite environments: grids of coloured cells, computed in JAX.

A frame is built at cell resolution (one colour per cell) and then scaled up
with ``jnp.repeat``, so it costs a few array operations whatever the pixel size
and renders a batch of states under ``vmap``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from lamella.envs import rendering

BACKGROUND = (24, 24, 32)
GRID_LINE = (64, 64, 80)
AGENT = (66, 135, 245)
TARGET = (250, 200, 40)
GOOD = (60, 190, 90)
BAD = (220, 60, 60)
NEUTRAL = (200, 200, 200)
PATH = (44, 44, 60)


def palette(colors: Sequence[Sequence[int]]) -> jax.Array:
    """A ``(n, 3)`` uint8 lookup table; index it with an int array of cell labels."""
    return jnp.asarray(colors, jnp.uint8)


def cells_to_frame(cell_colors: jax.Array, cell_size: int, grid_lines: bool = True) -> jax.Array:
    """Scale cell colours to a frame (:func:`lamella.envs.rendering.cells_to_frame`), grid lines in
    :data:`GRID_LINE`."""
    return rendering.cells_to_frame(cell_colors, cell_size, GRID_LINE if grid_lines else None)


def progress_row(fraction: jax.Array, columns: int) -> jax.Array:
    """Labels ``(columns,)`` int32 for a progress bar: 1 where filled, 0 elsewhere."""
    filled = jnp.round(jnp.clip(fraction, 0.0, 1.0) * columns)
    return (jnp.arange(columns) < filled).astype(jnp.int32)
