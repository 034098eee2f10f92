"""``simple_tag_v3``: predators (adversaries) chase faster prey around obstacles."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import (
    Scenario,
    boundary_penalty,
    constant_colors,
    distances,
    relative,
    rows_without_self,
)
from lamella.envs.multi_agent.mpe.types import MultiParticleState


def make(num_good: int = 1, num_adversaries: int = 3, num_obstacles: int = 2) -> Scenario:
    """Adversaries first (size 0.075, accel 3, max speed 1.0), then good agents (0.05, 4, 1.3),
    all silent and colliding; obstacles collide (size 0.2, reset in [-0.9, 0.9]).

    Observation of agent ``i``: ``[self_vel, self_pos, obstacle_rel, other_rel (every other
    agent, index order), other_vel (every other *good* agent)]``: 16 for an adversary and 14
    for the good agent with the defaults. Reward: each adversary ``+10`` per touching (good,
    adversary) pair (shared by all adversaries); a good agent ``-10`` per adversary touching
    it, minus ``boundary_penalty`` of its position.
    """
    n = num_good + num_adversaries
    adversary = np.arange(n) < num_adversaries
    size = np.where(adversary, 0.075, 0.05).astype(np.float32)
    touch = size[:, None] + size[None, :]

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos, vel = state.agent_pos, state.agent_vel
        rel = relative(pos)
        obstacle_rel = (state.landmark_pos[None, :, :] - pos[:, None, :]).reshape(n, -1)
        head = jnp.concatenate([vel, pos, obstacle_rel], -1)
        a, g = num_adversaries, num_good
        adversary_rows = jnp.concatenate(
            [
                head[:a],
                rows_without_self(rel, range(a), range(n)),
                jnp.broadcast_to(vel[a:].reshape(-1), (a, 2 * g)),
            ],
            -1,
        )
        good_rows = jnp.concatenate(
            [
                head[a:],
                rows_without_self(rel, range(a, n), range(n)),
                rows_without_self(jnp.broadcast_to(vel[a:], (g, g, 2)), range(g), range(g)),
            ],
            -1,
        )
        return [adversary_rows, good_rows]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        touching = distances(state.agent_pos, state.agent_pos) < touch
        caught = touching & adversary[:, None] & ~adversary[None, :]  # (adversary, good)
        adversary_reward = 10.0 * jnp.sum(caught).astype(jnp.float32)
        good_reward = -10.0 * jnp.sum(caught, 0).astype(jnp.float32) - boundary_penalty(state.agent_pos)
        return jnp.where(adversary, adversary_reward, good_reward)

    adversary_roles = f"0..{num_adversaries - 1}: adversary_i (predators)"
    good_roles = f"{num_adversaries}..{n - 1}: agent_i (prey)"
    return Scenario(
        name="simple_tag",
        version=3,
        agent_names=tuple(
            f"adversary_{i}" if adversary[i] else f"agent_{i - num_adversaries}" for i in range(n)
        ),
        dim_c=2,
        agent_size=tuple(float(s) for s in size),
        agent_accel=tuple(3.0 if a else 4.0 for a in adversary),
        agent_max_speed=tuple(1.0 if a else 1.3 for a in adversary),
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(True,) * n,
        landmark_size=(0.2,) * num_obstacles,
        landmark_collide=(True,) * num_obstacles,
        landmark_spawn=(0.9,) * num_obstacles,
        observe=observe,
        reward=reward,
        agent_colors=constant_colors([[0.85, 0.35, 0.35] if a else [0.35, 0.85, 0.35] for a in adversary]),
        landmark_colors=constant_colors([[0.25, 0.25, 0.25]] * num_obstacles),
        agent_roles=(adversary_roles, good_roles),
    )
