"""``simple_world_comm_v3``: simple_tag with food, forests that hide agents, and a talking leader."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import (
    Scenario,
    boundary_penalty,
    caught_counts,
    constant_colors,
    distances,
    other_index,
    relative,
)
from lamella.envs.multi_agent.mpe.types import MultiParticleState


def make(
    num_good: int = 2,
    num_adversaries: int = 4,
    num_obstacles: int = 1,
    num_food: int = 2,
    num_forests: int = 2,
) -> Scenario:
    """Agent 0 ``leadadversary_0`` (moves and talks, ``dim_c=4``), agents 1..A-1 ``adversary_i``,
    then the good agents ``agent_i``; all collide. Adversaries: size 0.075, accel 3, max speed
    1.0; good agents 0.045, 4, 1.3. Landmarks in mpe2's order: obstacles (size 0.2, collide),
    food (0.03), forests (0.3); all reset in [-0.9, 0.9].

    An agent is *in* a forest when it overlaps it. Agent ``i`` sees another agent ``j`` when
    they share a forest, or neither is in any forest, or ``i`` is the leader; otherwise ``j``'s
    relative position and velocity read zeros. Observations: adversaries and the leader
    ``[self_vel, self_pos, landmark_rel (all L), other_rel, other good agents' vel, in_forest
    (+1/-1 per forest), leader's comm (4)]`` (34 with the defaults); good agents ``[self_vel,
    self_pos, landmark_rel, other_rel, in_forest, other good agents' vel]`` (28).
    Actions: leader 20 (``move + 5 * word``; continuous 9), the others 5.
    Rewards: a good agent ``-5`` per touching adversary, ``-2 * boundary_penalty``, ``+2`` per
    food it touches, ``-0.05 *`` its distance to the nearest food; every adversary ``+5`` per
    touching (good, adversary) pair ``- 0.1 *`` its distance to the nearest good agent.
    """
    n = num_good + num_adversaries
    adversary = np.arange(n) < num_adversaries
    size = np.where(adversary, 0.075, 0.045).astype(np.float32)
    touch = size[:, None] + size[None, :]
    food = slice(num_obstacles, num_obstacles + num_food)
    forests = slice(num_obstacles + num_food, num_obstacles + num_food + num_forests)
    num_landmarks = num_obstacles + num_food + num_forests

    others = other_index(range(n), range(n))  # (n, n - 1)
    rows = np.arange(n)[:, None]
    a, g = num_adversaries, num_good
    good_others_of_good = other_index(range(a, n), range(a, n)) - a  # (G, G - 1), into the good block

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos, vel = state.agent_pos, state.agent_vel
        in_forest = distances(pos, state.landmark_pos[forests]) < (size[:, None] + 0.3)  # (n, F)
        anywhere = jnp.any(in_forest, -1)
        shared = jnp.any(in_forest[:, None, :] & in_forest[None, :, :], -1)
        seen = shared | (~anywhere[:, None] & ~anywhere[None, :]) | (np.arange(n) == 0)[:, None]  # (n, n)
        other_rel = jnp.where(seen[..., None], relative(pos), 0.0)[rows, others].reshape(n, -1)
        seen_vel = jnp.where(seen[:, a:, None], vel[None, a:, :], 0.0)  # (n, G, 2): good agents' vel as seen
        landmark_rel = (state.landmark_pos[None, :, :] - pos[:, None, :]).reshape(n, -1)
        forest_flags = jnp.where(in_forest, 1.0, -1.0)
        head = jnp.concatenate([vel, pos, landmark_rel, other_rel], -1)
        adversary_rows = jnp.concatenate(
            [
                head[:a],
                seen_vel[:a].reshape(a, -1),
                forest_flags[:a],
                jnp.broadcast_to(state.comm[0], (a, 4)),
            ],
            -1,
        )
        good_vel = seen_vel[a:][np.arange(g)[:, None], good_others_of_good].reshape(g, -1)
        good_rows = jnp.concatenate([head[a:], forest_flags[a:], good_vel], -1)
        return [adversary_rows, good_rows]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        pos = state.agent_pos
        caught = (distances(pos, pos) < touch) & adversary[:, None] & ~adversary[None, :]
        food_dist = distances(pos, state.landmark_pos[food])  # (n, num_food)
        eating = jnp.sum(food_dist < (size[:, None] + 0.03), -1).astype(jnp.float32)
        good_reward = (
            -5.0 * jnp.sum(caught, 0).astype(jnp.float32)
            - 2.0 * boundary_penalty(pos)
            + 2.0 * eating
            - 0.05 * jnp.min(food_dist, -1)
        )
        good_dist = distances(pos, pos[num_adversaries:])  # (n, num_good)
        adversary_reward = 5.0 * jnp.sum(caught).astype(jnp.float32) - 0.1 * jnp.min(good_dist, -1)
        return jnp.where(adversary, adversary_reward, good_reward)

    def agent_colors(state: MultiParticleState) -> jnp.ndarray:
        colors = np.where(adversary[:, None], [[0.95, 0.45, 0.45]], [[0.45, 0.95, 0.45]])
        colors[0] -= 0.3
        return jnp.asarray(colors, jnp.float32)

    landmark_colors = (
        [[0.25, 0.25, 0.25]] * num_obstacles
        + [[0.15, 0.15, 0.65]] * num_food
        + [[0.6, 0.9, 0.6]] * num_forests
    )
    names = ["leadadversary_0"] + [f"adversary_{i}" for i in range(num_adversaries - 1)]
    names += [f"agent_{i}" for i in range(num_good)]
    obs_adversary = 4 + 2 * num_landmarks + 2 * (n - 1) + 2 * num_good + num_forests + 4
    return Scenario(
        name="simple_world_comm",
        version=3,
        agent_names=tuple(names),
        dim_c=4,
        agent_size=tuple(float(s) for s in size),
        agent_accel=tuple(3.0 if a else 4.0 for a in adversary),
        agent_max_speed=tuple(1.0 if a else 1.3 for a in adversary),
        agent_movable=(True,) * n,
        agent_silent=tuple(i > 0 for i in range(n)),
        agent_collide=(True,) * n,
        landmark_size=(0.2,) * num_obstacles + (0.03,) * num_food + (0.3,) * num_forests,
        landmark_collide=(True,) * num_obstacles + (False,) * (num_food + num_forests),
        landmark_spawn=(0.9,) * num_landmarks,
        observe=observe,
        reward=reward,
        benchmark=lambda state: caught_counts(state.agent_pos, touch, adversary),
        agent_colors=agent_colors,
        landmark_colors=constant_colors(landmark_colors),
        agent_roles=(
            f"0: leadadversary_0, moves and talks (20 actions; continuous 9), observation {obs_adversary}",
            f"1..{num_adversaries - 1}: adversary_i, 5 actions (padded), observation {obs_adversary}",
            f"{num_adversaries}..{n - 1}: agent_i (good), 5 actions, observation {obs_adversary - 6}",
        ),
    )
