"""What every teacher MDP (an env whose episodes build one level, for PAIRED) shares: its
observation space and the random noise vector some teachers observe."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lamella.envs import random as fast_random
from lamella.envs import spaces


def observation_space(image: spaces.Box, num_steps: int, noise_dim: int) -> spaces.Dict:
    """``{"image", "time"[, "noise"]}``: the level so far, the step (0 to ``num_steps``) and,
    when ``noise_dim`` > 0, ``noise_dim`` uniform numbers drawn at reset."""
    entries: dict[str, spaces.Space] = {"image": image, "time": spaces.Box(0, num_steps, (), jnp.int32)}
    if noise_dim:
        entries["noise"] = spaces.Box(0.0, 1.0, (noise_dim,), jnp.float32)
    return spaces.Dict(entries)


def noise(key: jax.Array, noise_dim: int) -> jax.Array:
    """float32 ``(noise_dim,)`` uniform in [0, 1) (an empty vector when ``noise_dim`` is 0)."""
    if not noise_dim:
        return jnp.zeros((0,), jnp.float32)
    return fast_random.uniform(key, (noise_dim,), stream=7, vector=True)
