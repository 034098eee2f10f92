"""Rendering of SMAX battles with plain JAX array operations (one pass over the pixels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from lamella.envs.multi_agent.smax.env import SMAX
    from lamella.envs.multi_agent.smax.types import SMAXState

__all__ = ["SIZE", "render"]

SIZE = 256  # frame side in pixels
_BACKGROUND = np.array([236, 232, 220], np.float32)
_ALLY = np.array([40, 90, 200], np.float32)
_ENEMY = np.array([200, 50, 40], np.float32)
_WOUNDED = np.array([60, 60, 60], np.float32)


def render(env: SMAX, state: SMAXState) -> jax.Array:
    """An RGB frame, uint8 ``(256, 256, 3)``: the whole map, ``+y`` up.

    Each living unit is a disc of its radius (drawn at least 2.5 pixels wide) with a dark rim:
    allies blue, enemies red, each fading to grey as it loses hit points. Dead units are not
    drawn. Units are drawn in index order, so a later one covers an earlier one.
    """
    scale = SIZE / max(env.map_width, env.map_height)
    x = state.positions[:, 0] * scale
    y = SIZE - state.positions[:, 1] * scale
    radius = jnp.maximum(jnp.asarray(env._radius) * scale, 2.5)
    alive = state.health > 0
    fraction = jnp.clip(state.health / env._max_health, 0.0, 1.0)[:, None]
    team = np.where(env._is_enemy[:, None], _ENEMY, _ALLY)
    colors = (_WOUNDED + fraction * (team - _WOUNDED)).astype(jnp.uint8)
    pixels = jnp.arange(SIZE, dtype=jnp.float32) + 0.5
    d2 = jnp.square(pixels[None, None, :] - x[:, None, None]) + jnp.square(
        pixels[None, :, None] - y[:, None, None]
    )
    rank = jnp.arange(1, env.num_units + 1)[:, None, None]
    live = alive[:, None, None]
    inside = jnp.max(jnp.where(live & (d2 <= jnp.square(radius)[:, None, None]), rank, 0), 0)
    rim = jnp.max(jnp.where(live & (d2 <= jnp.square(radius + 1.0)[:, None, None]), rank, 0), 0)
    palette = jnp.concatenate([jnp.asarray(_BACKGROUND, jnp.uint8)[None], colors])
    return jnp.where((rim > inside)[..., None], jnp.uint8(30), palette[inside])
