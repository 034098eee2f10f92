"""Rendering of Level-Based Foraging states with :mod:`lamella.envs.rendering` primitives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import rendering

if TYPE_CHECKING:
    from lamella.envs.multi_agent.lbf.env import LevelBasedForaging
    from lamella.envs.multi_agent.lbf.types import LevelBasedForagingState

__all__ = ["AGENT_COLORS", "BACKGROUND", "CELL", "FOOD", "GRID", "PIP", "render"]

CELL = 32  # pixels per grid cell
# Colours (RGB), public so that host-side drawers (lamella-ued's screenshots) match them.
BACKGROUND = (238, 236, 228)
GRID = (200, 198, 190)
FOOD = np.array([70, 150, 60], np.float32)
PIP = (255, 255, 255)
# One colour per agent index, repeated for more than eight agents.
AGENT_COLORS = np.array(
    [
        [220, 60, 50],
        [40, 100, 210],
        [240, 160, 30],
        [140, 70, 180],
        [30, 170, 170],
        [200, 80, 150],
        [110, 110, 110],
        [150, 110, 50],
    ],
    np.uint8,
)


def _pips(frame: jax.Array, center_x: Any, center_y: Any, count: Any, max_count: int, show: Any) -> jax.Array:
    """Up to ``max_count`` white dots in a row of two, one per level, centred on a cell."""
    for k in range(max_count):
        dx = (k % 3 - 1) * CELL * 0.2
        dy = (k // 3 - 0.5) * CELL * 0.25 if max_count > 3 else 0.0
        radius = jnp.where(show & (k < count), CELL * 0.07, 0.0)
        frame = rendering.fill_circle(frame, center_x + dx, center_y + dy, radius, PIP)
    return frame


def render(env: LevelBasedForaging, state: LevelBasedForagingState) -> jax.Array:
    """An RGB frame, uint8 ``(32 * rows, 32 * columns, 3)``.

    Food is a green cell, darker for a higher level, with one white dot per
    level. Agent ``i`` is a disc in its own colour (red, blue, orange, purple,
    teal, ... by index) with one white dot per level; stacked agents are drawn
    in index order, so the highest index is on top.
    """
    rows, cols = env.rows, env.cols
    levels = state.food_levels
    present = levels > 0
    food_cells = jnp.zeros((rows, cols), jnp.float32)
    food_cells = food_cells.at[state.food_positions[:, 0], state.food_positions[:, 1]].max(
        jnp.where(present, levels, 0).astype(jnp.float32)
    )
    shade = jnp.clip(food_cells / max(env.food_level_bound, 1), 0.0, 1.0)[..., None]
    light = jnp.asarray(BACKGROUND, jnp.float32)
    food_color = light + (0.45 + 0.55 * shade) * (jnp.asarray(FOOD) - light)
    colors = jnp.where(food_cells[..., None] > 0, food_color, light).astype(jnp.uint8)
    frame = rendering.cells_to_frame(colors, CELL, GRID)
    max_food_pips = min(env.food_level_bound, 6)
    for f in range(env.max_num_food):
        y = (state.food_positions[f, 0] + 0.5) * CELL
        x = (state.food_positions[f, 1] + 0.5) * CELL
        frame = _pips(frame, x, y, levels[f], max_food_pips, present[f])
    max_agent_pips = min(env.max_player_level, 6)
    for i in range(env.num_agents):
        y = (state.agent_positions[i, 0] + 0.5) * CELL
        x = (state.agent_positions[i, 1] + 0.5) * CELL
        color = tuple(int(c) for c in AGENT_COLORS[i % len(AGENT_COLORS)])
        frame = rendering.fill_circle(frame, x, y, CELL * 0.42, color)
        frame = _pips(frame, x, y, state.agent_levels[i], max_agent_pips, jnp.asarray(True))
    return frame
