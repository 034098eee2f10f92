"""``simple_tag_v3``: predators (adversaries) chase faster prey around obstacles."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import (
    Scenario,
    boundary_penalty,
    caught_counts,
    constant_colors,
    distances,
    nearest,
    other_index,
    relative,
    rows_without_self,
    take_slots,
)
from lamella.envs.multi_agent.mpe.types import MultiParticleState


def make(
    num_good: int = 1,
    num_adversaries: int = 3,
    num_obstacles: int = 2,
    num_agent_neighbors: int | None = None,
    num_landmark_neighbors: int | None = None,
) -> Scenario:
    """Adversaries first (size 0.075, accel 3, max speed 1.0), then good agents (0.05, 4, 1.3),
    all silent and colliding; obstacles collide (size 0.2, reset in [-0.9, 0.9]).

    Observation of agent ``i``: ``[self_vel, self_pos, obstacle_rel, other_rel (every other
    agent, index order), other_vel (every other *good* agent)]``: 16 for an adversary and 14
    for the good agent with the defaults. Reward: each adversary ``+10`` per touching (good,
    adversary) pair (shared by all adversaries); a good agent ``-10`` per adversary touching
    it, minus ``boundary_penalty`` of its position.

    Partial observability (mpe2 1.1's options): ``num_landmark_neighbors = k`` keeps the ``k``
    nearest obstacles, closest first; ``num_agent_neighbors = k`` the ``k`` nearest other agents
    (their positions, then in the same slots their velocities, zeros for an adversary's), so
    every agent's observation is ``4 + 2 k_obstacles + 4 k_agents`` wide; slots beyond the
    entities there are zeros.
    """
    n = num_good + num_adversaries
    adversary = np.arange(n) < num_adversaries
    size = np.where(adversary, 0.075, 0.05).astype(np.float32)
    touch = size[:, None] + size[None, :]
    others = other_index(range(n), range(n))  # (n, n - 1)

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos, vel = state.agent_pos, state.agent_vel
        rel = relative(pos)
        obstacle_rel = state.landmark_pos[None, :, :] - pos[:, None, :]
        if num_landmark_neighbors is not None:
            obstacle_rel = take_slots(obstacle_rel, nearest(obstacle_rel, num_landmark_neighbors))
        head = jnp.concatenate([vel, pos, obstacle_rel.reshape(n, -1)], -1)
        a, g = num_adversaries, num_good
        if num_agent_neighbors is not None:
            other_rel = rel[np.arange(n)[:, None], others]  # (n, n - 1, 2), index order
            other_vel = jnp.where(adversary[others][..., None], 0.0, vel[others])
            seen = nearest(other_rel, num_agent_neighbors)
            flat = [take_slots(x, seen).reshape(n, -1) for x in (other_rel, other_vel)]
            rows = jnp.concatenate([head, *flat], -1)
            return [rows[:a], rows[a:]]
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

    obstacles_seen = num_obstacles if num_landmark_neighbors is None else num_landmark_neighbors
    if num_agent_neighbors is None:
        sizes = (
            4 + 2 * obstacles_seen + 2 * (n - 1) + 2 * num_good,
            4 + 2 * obstacles_seen + 2 * (n - 1) + 2 * (num_good - 1),
        )
    else:
        sizes = (4 + 2 * obstacles_seen + 4 * num_agent_neighbors,) * 2
    adversary_roles = f"0..{num_adversaries - 1}: adversary_i (predators), observation {sizes[0]}"
    good_roles = f"{num_adversaries}..{n - 1}: agent_i (prey), observation {sizes[1]}"
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
        benchmark=lambda state: caught_counts(state.agent_pos, touch, adversary),
        agent_colors=constant_colors([[0.85, 0.35, 0.35] if a else [0.35, 0.85, 0.35] for a in adversary]),
        landmark_colors=constant_colors([[0.25, 0.25, 0.25]] * num_obstacles),
        agent_roles=(adversary_roles, good_roles),
    )
