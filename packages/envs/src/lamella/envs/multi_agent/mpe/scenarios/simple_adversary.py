"""``simple_adversary_v3``: good agents cover the goal landmark without showing the adversary which it is."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import (
    Scenario,
    constant_colors,
    nearest,
    norm,
    other_index,
    relative,
    take_slots,
)
from lamella.envs.multi_agent.mpe.types import MultiParticleState


def make(
    N: int = 2, num_agent_neighbors: int | None = None, num_landmark_neighbors: int | None = None
) -> Scenario:
    """Agent 0 the adversary, agents 1..N good; N landmarks (size 0.08); all silent, size 0.15,
    nothing collides. ``goal[0]`` is the goal landmark (every agent's ``goal_a``).

    Observations: good ``[goal_rel, landmark_rel (N), other_rel (N)]`` (``2 + 4N``), adversary
    ``[landmark_rel (N), other_rel (N)]`` (``4N``; it is not told the goal). Rewards: adversary
    ``-|adversary - goal|``; every good agent ``|adversary - goal| - min over good agents of
    |agent - goal|``.

    Partial observability (mpe2 1.1's options): ``num_landmark_neighbors = k`` keeps the ``k``
    nearest landmarks, ``num_agent_neighbors = k`` the ``k`` nearest other agents, each list
    closest first, zeros in slots beyond the entities there; a good agent's goal stays in its
    observation. Widths: good ``2 + 2 k_landmarks + 2 k_agents``, adversary without the 2.
    """
    n = N + 1

    others = other_index(range(n), range(n))  # (n, n - 1)

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos = state.agent_pos
        landmark_rel = state.landmark_pos[None, :, :] - pos[:, None, :]
        other_rel = relative(pos)[np.arange(n)[:, None], others]
        if num_landmark_neighbors is not None:
            landmark_rel = take_slots(landmark_rel, nearest(landmark_rel, num_landmark_neighbors))
        if num_agent_neighbors is not None:
            other_rel = take_slots(other_rel, nearest(other_rel, num_agent_neighbors))
        landmark_rel, other_rel = landmark_rel.reshape(n, -1), other_rel.reshape(n, -1)
        goal_rel = state.landmark_pos[state.goal[0]] - pos[1:]
        adversary = jnp.concatenate([landmark_rel[:1], other_rel[:1]], -1)
        good = jnp.concatenate([goal_rel, landmark_rel[1:], other_rel[1:]], -1)
        return [adversary, good]

    seen = 2 * (N if num_landmark_neighbors is None else num_landmark_neighbors) + 2 * (
        N if num_agent_neighbors is None else num_agent_neighbors
    )

    def reward(state: MultiParticleState) -> jnp.ndarray:
        dist = norm(state.agent_pos - state.landmark_pos[state.goal[0]])
        good = dist[0] - jnp.min(dist[1:])
        return jnp.where(np.arange(n) == 0, -dist[0], good)

    def benchmark(state: MultiParticleState) -> dict[str, jnp.ndarray]:
        # mpe2: the adversary's squared distance to the goal; a good agent's to every landmark,
        # then to the goal (here apart: zeros in the adversary's landmark row).
        pos = state.agent_pos
        squared = jnp.sum(jnp.square(pos[:, None, :] - state.landmark_pos[None, :, :]), -1)  # (n, N)
        to_goal = jnp.sum(jnp.square(pos - state.landmark_pos[state.goal[0]]), -1)
        return {"goal_sq_dist": to_goal, "landmark_sq_dists": squared.at[0].set(0.0)}

    def landmark_colors(state: MultiParticleState) -> jnp.ndarray:
        is_goal = (jnp.arange(N) == state.goal[0])[:, None]
        return jnp.where(is_goal, jnp.asarray([0.15, 0.65, 0.15]), jnp.asarray([0.15, 0.15, 0.15]))

    return Scenario(
        name="simple_adversary",
        version=3,
        agent_names=("adversary_0", *(f"agent_{i}" for i in range(N))),
        dim_c=2,
        agent_size=(0.15,) * n,
        agent_accel=(None,) * n,
        agent_max_speed=(None,) * n,
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(False,) * n,
        landmark_size=(0.08,) * N,
        landmark_collide=(False,) * N,
        landmark_spawn=(1.0,) * N,
        observe=observe,
        reward=reward,
        benchmark=benchmark,
        goal_choices=(N,),
        agent_colors=constant_colors([[0.85, 0.35, 0.35]] + [[0.35, 0.35, 0.85]] * N),
        landmark_colors=landmark_colors,
        agent_roles=(
            f"0: adversary_0, observation {seen} (padded)",
            f"1..{N}: agent_i (good), observation {2 + seen}",
        ),
    )
