"""Rendering of Multi-Robot Warehouse states with :mod:`lamella.envs.rendering` primitives."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import rendering

if TYPE_CHECKING:
    from lamella.envs.multi_agent.rware.env import RobotWarehouse
    from lamella.envs.multi_agent.rware.types import RobotWarehouseState

__all__ = ["CELL", "render"]

CELL = 32  # pixels per grid cell
_HIGHWAY = (236, 236, 230)
_SHELF_SLOT = (214, 212, 204)
_GOAL = (70, 70, 70)
_GRID = (190, 188, 180)
_SHELF = (72, 61, 139)
_REQUESTED = (0, 150, 136)
_AGENT = (240, 140, 20)
_AGENT_LOADED = (210, 40, 40)
_HEADING = (255, 255, 255)


def render(env: RobotWarehouse, state: RobotWarehouseState) -> jax.Array:
    """An RGB frame, uint8 ``(32 H, 32 W, 3)``.

    The floor is light on highways, darker on shelf slots and dark on the two
    goals. A shelf is an inset square, slate blue, teal when requested (a
    carried shelf is drawn under its agent). An agent is a disc, orange when
    empty and red when carrying, with a white dot on the side it faces.
    """
    rows, cols = env.rows, env.cols
    floor = np.where(env.highway[..., None], np.array(_HIGHWAY), np.array(_SHELF_SLOT)).astype(np.uint8)
    floor[env.goals[:, 0], env.goals[:, 1]] = _GOAL
    frame = rendering.cells_to_frame(jnp.asarray(floor), CELL, _GRID)

    # Shelves: the standing grid plus the carried shelves on their agents' cells.
    shelf = state.shelf_grid
    carried = state.carried_shelves
    shelf = shelf.at[state.agent_positions[:, 0], state.agent_positions[:, 1]].max(carried)
    requested = jnp.any(shelf[..., None] == state.request_queue, -1) & (shelf > 0)
    color = jnp.where(requested[..., None], jnp.asarray(_REQUESTED), jnp.asarray(_SHELF))
    shelf_cells = jnp.where((shelf > 0)[..., None], color, -1)  # -1: keep the floor
    inset = np.zeros((CELL,), bool)
    inset[3 : CELL - 3] = True
    mask = np.logical_and.outer(inset, inset)
    big = jnp.repeat(jnp.repeat(shelf_cells, CELL, 0), CELL, 1)
    tile = jnp.tile(jnp.asarray(mask), (rows, cols))
    paint = tile & (big[..., 0] >= 0)
    frame = jnp.where(paint[..., None], big.astype(jnp.uint8), frame)

    # Agents, in index order (a higher index is drawn on top).
    deltas = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.float32)
    pixel_y, pixel_x = np.meshgrid(np.arange(rows * CELL) + 0.5, np.arange(cols * CELL) + 0.5, indexing="ij")
    for i in range(env.num_agents):
        y = (state.agent_positions[i, 0] + 0.5) * CELL
        x = (state.agent_positions[i, 1] + 0.5) * CELL
        body = jnp.where(carried[i] > 0, jnp.asarray(_AGENT_LOADED), jnp.asarray(_AGENT)).astype(jnp.uint8)
        disc = (pixel_x - x) ** 2 + (pixel_y - y) ** 2 <= (CELL * 0.34) ** 2
        frame = jnp.where(disc[..., None], body, frame)
        step = jnp.asarray(deltas)[state.agent_directions[i]] * CELL * 0.22
        frame = rendering.fill_circle(frame, x + step[1], y + step[0], CELL * 0.08, _HEADING)
    return frame
