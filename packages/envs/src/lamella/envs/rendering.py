"""Rasterisation in JAX, and writing episodes to GIF/MP4.

Frames are computed from states with array operations only, so a batch of
states renders under ``jax.vmap`` and an episode renders inside ``jit``. Each
primitive takes a canvas of shape ``(height, width, 3)`` uint8 and returns a new
one; coordinates are in pixels, ``(x, y)`` with y pointing down.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.errors import MissingExtraError

__all__ = [
    "animate",
    "canvas",
    "draw_segment",
    "fill_circle",
    "fill_polygon",
    "fill_rect",
    "render_episode",
    "save_frames",
]

Color = Sequence[int]


def canvas(height: int, width: int, color: Color = (255, 255, 255)) -> jax.Array:
    """A blank frame."""
    return jnp.broadcast_to(jnp.asarray(color, jnp.uint8), (height, width, 3))


def _grid(frame: jax.Array) -> tuple[jax.Array, jax.Array]:
    height, width = frame.shape[:2]
    ys, xs = jnp.meshgrid(jnp.arange(height) + 0.5, jnp.arange(width) + 0.5, indexing="ij")
    return xs, ys


def _paint(frame: jax.Array, mask: jax.Array, color: Color) -> jax.Array:
    return jnp.where(mask[..., None], jnp.asarray(color, jnp.uint8), frame)


def fill_rect(frame: jax.Array, x0: Any, y0: Any, x1: Any, y1: Any, color: Color) -> jax.Array:
    """Axis-aligned rectangle with corners ``(x0, y0)`` and ``(x1, y1)``."""
    xs, ys = _grid(frame)
    mask = (xs >= jnp.minimum(x0, x1)) & (xs <= jnp.maximum(x0, x1))
    mask &= (ys >= jnp.minimum(y0, y1)) & (ys <= jnp.maximum(y0, y1))
    return _paint(frame, mask, color)


def fill_circle(frame: jax.Array, cx: Any, cy: Any, radius: Any, color: Color) -> jax.Array:
    """Filled disc."""
    xs, ys = _grid(frame)
    return _paint(frame, jnp.square(xs - cx) + jnp.square(ys - cy) <= jnp.square(radius), color)


def draw_segment(
    frame: jax.Array, x0: Any, y0: Any, x1: Any, y1: Any, thickness: Any, color: Color
) -> jax.Array:
    """A thick line from ``(x0, y0)`` to ``(x1, y1)`` with rounded ends."""
    xs, ys = _grid(frame)
    dx, dy = x1 - x0, y1 - y0
    length2 = jnp.maximum(dx * dx + dy * dy, 1e-9)
    t = jnp.clip(((xs - x0) * dx + (ys - y0) * dy) / length2, 0.0, 1.0)
    distance2 = jnp.square(xs - (x0 + t * dx)) + jnp.square(ys - (y0 + t * dy))
    return _paint(frame, distance2 <= jnp.square(thickness / 2.0), color)


def fill_polygon(frame: jax.Array, points: jax.Array, color: Color) -> jax.Array:
    """Filled convex or concave polygon, ``points`` of shape ``(n, 2)`` (even-odd rule)."""
    xs, ys = _grid(frame)
    x0, y0 = points[:, 0], points[:, 1]
    x1, y1 = jnp.roll(x0, -1), jnp.roll(y0, -1)
    xs_, ys_ = xs[..., None], ys[..., None]
    crosses = (y0 > ys_) != (y1 > ys_)
    x_at = x0 + (ys_ - y0) * (x1 - x0) / jnp.where(y1 == y0, 1e-9, y1 - y0)
    inside = jnp.sum(crosses & (xs_ < x_at), axis=-1) % 2 == 1
    return _paint(frame, inside, color)


def cells_to_frame(cell_colors: jax.Array, cell_size: int, grid_color: Color | None = None) -> jax.Array:
    """Scale ``(rows, columns, 3)`` uint8 cell colours to a ``(rows * s, columns * s, 3)`` frame.

    Grid worlds render at cell resolution and scale up with ``jnp.repeat``: a few array
    operations whatever the pixel size. With ``grid_color`` the first pixel row and column of
    every cell is drawn in it, so neighbouring cells of one colour stay apart.
    """
    frame = jnp.repeat(jnp.repeat(cell_colors, cell_size, axis=0), cell_size, axis=1)
    if grid_color is None:
        return frame
    height, width = frame.shape[:2]
    on_line = (np.arange(height)[:, None] % cell_size == 0) | (np.arange(width)[None, :] % cell_size == 0)
    return jnp.where(on_line[..., None], jnp.asarray(grid_color, jnp.uint8), frame)


def render_episode(env: Any, params: Any, states: Any) -> np.ndarray:
    """Frames ``(T, H, W, 3)`` uint8 for a pytree of states with a leading time axis."""
    frames = jax.jit(jax.vmap(lambda s: env.render(s, params)))(states)
    return np.asarray(frames)


def animate(env: Any, params: Any, states: Any, path: str | os.PathLike[str], fps: int = 30) -> str:
    """Write the states (leading time axis) as a GIF or MP4, chosen by the file suffix.

    Needs the ``render`` extra (``pip install lamella-envs[render]``; MP4 also
    needs ``imageio[ffmpeg]``). The file is written to a temporary name and
    renamed, so a crash never leaves half a file. Returns the path.
    """
    _check_suffix(path)  # before rendering
    return save_frames(render_episode(env, params, states), path, fps)


def _check_suffix(path: str | os.PathLike[str]) -> str:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in (".gif", ".mp4"):
        raise ValueError(f"animate: unsupported file type {suffix!r}; use a .gif or .mp4 path.")
    return suffix


def save_frames(frames: Any, path: str | os.PathLike[str], fps: int = 30) -> str:
    """Write frames ``(T, H, W, 3)`` uint8 as a GIF or MP4 (by the suffix), atomically, as
    :func:`animate` does (the ``render`` extra). Returns the path."""
    try:
        import imageio.v3 as iio
    except ImportError as error:  # pragma: no cover - depends on the extra
        raise MissingExtraError("animate needs imageio: pip install 'lamella-envs[render]'") from error
    path = os.fspath(path)
    suffix = _check_suffix(path)
    frames = np.asarray(frames, np.uint8)
    tmp = f"{path}.tmp{suffix}"
    if suffix == ".gif":
        iio.imwrite(tmp, frames, duration=1000.0 / fps, loop=0)
    else:
        iio.imwrite(tmp, frames, fps=fps)
    os.replace(tmp, path)
    return path
