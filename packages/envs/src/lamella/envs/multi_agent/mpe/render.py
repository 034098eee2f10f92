"""Rendering of particle worlds with :mod:`lamella.envs.rendering` primitives."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from lamella.envs.multi_agent.mpe.core import Scenario
    from lamella.envs.multi_agent.mpe.types import MultiParticleState

__all__ = ["SIZE", "render"]

SIZE = 256  # frame side in pixels


def render(scenario: Scenario, state: MultiParticleState) -> jax.Array:
    """An RGB frame, uint8 ``(256, 256, 3)``, white background, ``+y`` up.

    The view is centred on the origin and spans ``[-r, r]^2`` with ``r = 1.1 * max(1, the
    largest |coordinate| of any entity)``, so every entity stays in view (mpe2 zooms the same
    way). Each entity is a disc of its size in its mpe2 colour with a dark rim. Landmarks that
    do not collide (goals, food, forests) are drawn first, then the obstacles, then the agents,
    so agents stay visible inside forests (mpe2 draws the landmarks on top).
    """
    positions = jnp.concatenate([state.landmark_pos, state.agent_pos])
    visible = jnp.ones((len(positions),), jnp.bool_)
    if scenario.landmark_visible is not None:
        # Hidden landmarks (collect_treasure's picked-up treasures, parked far away) are left out.
        visible = visible.at[: scenario.num_landmarks].set(scenario.landmark_visible(state))
    reach = 1.1 * jnp.maximum(1.0, jnp.max(jnp.where(visible[:, None], jnp.abs(positions), 0.0)))
    scale = SIZE / (2.0 * reach)
    colors = jnp.concatenate([scenario.landmark_colors(state), scenario.agent_colors(state)])
    colors = jnp.clip(colors * 255.0, 0, 255).astype(jnp.uint8)
    sizes = np.asarray(scenario.landmark_size + scenario.agent_size, np.float32)
    num_landmarks = scenario.num_landmarks
    drawn = [j for j in range(num_landmarks) if not scenario.landmark_collide[j]]
    drawn += [j for j in range(num_landmarks) if scenario.landmark_collide[j]]
    drawn += [num_landmarks + i for i in range(scenario.num_agents)]
    order = np.asarray(drawn)
    # All discs in one pass: each pixel takes the colour of the last disc (in drawing order) that
    # covers it, or of the last rim; a rim is one pixel wider than its disc.
    x = SIZE / 2 + positions[order, 0] * scale
    y = SIZE / 2 - positions[order, 1] * scale
    radius = jnp.asarray(sizes[order]) * scale
    shown = visible[order][:, None, None]
    pixels = jnp.arange(SIZE, dtype=jnp.float32) + 0.5
    d2 = jnp.square(pixels[None, None, :] - x[:, None, None]) + jnp.square(
        pixels[None, :, None] - y[:, None, None]
    )
    rank = jnp.arange(1, len(order) + 1)[:, None, None]
    inside = jnp.max(jnp.where(shown & (d2 <= jnp.square(radius)[:, None, None]), rank, 0), 0)
    rim = jnp.max(jnp.where(shown & (d2 <= jnp.square(radius + 1.0)[:, None, None]), rank, 0), 0)
    palette = jnp.concatenate([jnp.full((1, 3), 255, jnp.uint8), colors[order]])
    frame = jnp.where((rim > inside)[..., None], jnp.uint8(40), palette[inside])
    return frame
