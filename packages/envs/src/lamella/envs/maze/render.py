"""Pictures of mazes, computed in JAX (so a batch of levels renders under ``vmap``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.maze.types import AMazeParams, MazeLevel

__all__ = ["render_level"]

FLOOR = (0, 0, 0)
WALL = (100, 100, 100)
GOAL = (0, 255, 0)
RED_GOAL = (255, 0, 0)  # Memory's red goal cell (and clue)
AGENT = (255, 0, 0)
HIGHLIGHT = (60, 60, 60)  # added to the cells the agent sees (MiniGrid's highlight)


@functools.cache
def _triangles(tile: int) -> np.ndarray:
    """bool ``(4, tile, tile)``: the agent's triangle pointing right, down, left, up (MiniGrid's shape)."""
    ys, xs = np.meshgrid(np.arange(tile) + 0.5, np.arange(tile) + 0.5, indexing="ij")
    u, v = xs / tile, ys / tile  # right-pointing: apex at (0.88, 0.5), base at x = 0.12
    right = (u >= 0.12) & (u <= 0.88) & (np.abs(v - 0.5) <= 0.38 * (0.88 - u) / 0.76)
    down = right.T
    left = right[:, ::-1]
    up = down[::-1, :]
    return np.stack([right, down, left, up])


@functools.partial(jax.jit, static_argnames=("tile_size", "highlight_view"))
def render_level(
    level: MazeLevel, params: AMazeParams, tile_size: int = 8, highlight_view: bool = False
) -> jax.Array:
    """RGB uint8 ``((H + 2) * tile_size, (W + 2) * tile_size, 3)`` picture of ``level``.

    The border wall is drawn; walls grey, floor black, goal green, the agent a red triangle
    pointing its way (MiniGrid's colours); with ``params.memory`` the top goal cell red, the
    bottom one green, the clue in the goal's colour. ``highlight_view`` lightens the cells of the agent's
    ``agent_view_size`` view. Jittable; vmap over levels for a batch.
    """
    height, width = params.height, params.width
    walls = jnp.pad(jnp.asarray(level.wall_map, jnp.bool_), 1, constant_values=True)
    gx, gy = level.goal_pos[0] + 1, level.goal_pos[1] + 1
    ys, xs = jnp.meshgrid(jnp.arange(height + 2), jnp.arange(width + 2), indexing="ij")
    # A goal or agent outside the grid (a teacher's level under construction) is not drawn.
    goal = (xs == gx) & (ys == gy) & (gx >= 1) & (gx <= width) & (gy >= 1) & (gy <= height)
    ax, ay = level.agent_pos[0], level.agent_pos[1]
    agent_inside = (ax >= 0) & (ax < width) & (ay >= 0) & (ay < height)
    colors = jnp.where(walls[..., None], jnp.asarray(WALL, jnp.uint8), jnp.asarray(FLOOR, jnp.uint8))
    colors = jnp.where(goal[..., None], jnp.asarray(GOAL, jnp.uint8), colors)
    if params.memory:
        # Memory: the top goal cell red, the bottom one green, the clue in the goal's colour.
        top = (level.goal_pos[0] == 9) & (level.goal_pos[1] == 5)
        red, green = jnp.asarray(RED_GOAL, jnp.uint8), jnp.asarray(GOAL, jnp.uint8)
        for (x, y), color in (((9, 5), red), ((9, 9), green), ((0, 6), jnp.where(top, red, green))):
            colors = colors.at[y + 1, x + 1].set(color)
    if highlight_view:
        view = params.agent_view_size
        direction = jnp.asarray(level.agent_dir, jnp.int32)
        dx = (direction == 0).astype(jnp.int32) - (direction == 2).astype(jnp.int32)
        dy = (direction == 1).astype(jnp.int32) - (direction == 3).astype(jnp.int32)
        rx, ry = xs - 1 - level.agent_pos[0], ys - 1 - level.agent_pos[1]
        ahead = rx * dx + ry * dy
        across = -rx * dy + ry * dx
        seen = (ahead >= 0) & (ahead < view) & (jnp.abs(across) <= view // 2)
        lighter = jnp.minimum(colors.astype(jnp.int32) + jnp.asarray(HIGHLIGHT), 255).astype(jnp.uint8)
        colors = jnp.where(seen[..., None], lighter, colors)
    frame = jnp.repeat(jnp.repeat(colors, tile_size, axis=0), tile_size, axis=1)
    triangle = jnp.asarray(_triangles(tile_size))[jnp.asarray(level.agent_dir, jnp.int32) % 4]
    x0 = (level.agent_pos[0] + 1) * tile_size
    y0 = (level.agent_pos[1] + 1) * tile_size
    patch = jax.lax.dynamic_slice(frame, (y0, x0, 0), (tile_size, tile_size, 3))
    patch = jnp.where((triangle & agent_inside)[..., None], jnp.asarray(AGENT, jnp.uint8), patch)
    return jax.lax.dynamic_update_slice(frame, patch, (y0, x0, 0))
