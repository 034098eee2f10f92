"""``simple_spread_v3``: N agents cover N landmarks without colliding."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, constant_colors, distances, nearest, take_slots
from lamella.envs.multi_agent.mpe.types import MultiParticleState

#: mpe2's ``CAPTURE_RADIUS``: an agent closer than this to a landmark covers it.
CAPTURE_RADIUS = 0.1


def make(
    N: int = 3,
    num_agent_neighbors: int | None = None,
    num_landmark_neighbors: int | None = None,
    terminate_on_success: bool = False,
    curriculum: bool = False,
) -> Scenario:
    """N movable silent colliding agents (size 0.15) and N landmarks (size 0.05).

    Observation (``4 + 2N + 4(N - 1)``; 18 for N=3): ``[self_vel, self_pos, landmark_rel (N),
    other_rel (N - 1, index order), other_comm (N - 1, always zero: the agents are silent)]``.
    Local reward: ``-1`` per other agent closer than 0.3 (touching). Global reward:
    ``-sum over landmarks of the nearest agent's distance``; mixed by ``local_ratio``.

    Partial observability (mpe2 1.1's options): ``num_landmark_neighbors = k`` keeps the ``k``
    nearest landmarks, closest first; ``num_agent_neighbors = k`` the ``k`` nearest other agents
    (positions and, in the same slots, their comm), closest first; slots beyond the entities
    there are zeros, so the observation is ``4 + 2 k_landmarks + 4 k_agents`` wide.

    ``terminate_on_success`` (mpe2 1.1's option): every agent terminates on the step after which
    every landmark has an agent closer than :data:`CAPTURE_RADIUS` (0.1), unless that step hits
    ``max_cycles`` (then the episode is truncated, as in mpe2).

    ``curriculum`` (mpe2 1.1's option): two stages, the params' ``curriculum_stage``: 0 without
    the collision penalty (the local reward is 0), 1 with it.
    """
    n = N
    # others[i] = the agents other than i, in index order.
    other_index = np.asarray([[j for j in range(n) if j != i] for i in range(n)], np.int32)

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos = state.agent_pos
        landmark_rel = state.landmark_pos[None, :, :] - pos[:, None, :]
        other_rel = pos[other_index] - pos[:, None, :]
        comm = state.comm[other_index]
        if num_landmark_neighbors is not None:
            landmark_rel = take_slots(landmark_rel, nearest(landmark_rel, num_landmark_neighbors))
        if num_agent_neighbors is not None:
            seen = nearest(other_rel, num_agent_neighbors)
            other_rel, comm = take_slots(other_rel, seen), take_slots(comm, seen)
        flat = [x.reshape(n, -1) for x in (landmark_rel, other_rel, comm)]
        return [jnp.concatenate([state.agent_vel, pos, *flat], -1)]

    landmarks_seen = n if num_landmark_neighbors is None else num_landmark_neighbors
    agents_seen = n - 1 if num_agent_neighbors is None else num_agent_neighbors
    observation_size = 4 + 2 * landmarks_seen + 4 * agents_seen

    def reward(state: MultiParticleState) -> jnp.ndarray:
        touching = (distances(state.agent_pos, state.agent_pos) < 0.3) & ~np.eye(n, dtype=bool)
        return -jnp.sum(touching, -1).astype(jnp.float32)

    def global_reward(state: MultiParticleState) -> jnp.ndarray:
        return -jnp.sum(jnp.min(distances(state.agent_pos, state.landmark_pos), 0))

    def benchmark(state: MultiParticleState) -> dict[str, jnp.ndarray]:
        # mpe2's (rew, collisions, min_dists, occupied_landmarks) of every agent: the collision
        # penalty counts whatever the curriculum stage, and local_ratio does not mix it in.
        touching = (distances(state.agent_pos, state.agent_pos) < 0.3) & ~np.eye(n, dtype=bool)
        collisions = jnp.sum(touching, -1).astype(jnp.int32)
        nearest_agent = jnp.min(distances(state.agent_pos, state.landmark_pos), 0)
        min_dists = jnp.broadcast_to(jnp.sum(nearest_agent), (n,))
        occupied = jnp.broadcast_to(jnp.sum(nearest_agent < CAPTURE_RADIUS).astype(jnp.int32), (n,))
        return {
            "reward": -min_dists - collisions.astype(jnp.float32),
            "collisions": collisions,
            "min_dists": min_dists,
            "occupied_landmarks": occupied,
        }

    def covered(state: MultiParticleState) -> jnp.ndarray:
        return jnp.all(jnp.min(distances(state.agent_pos, state.landmark_pos), 0) < CAPTURE_RADIUS)

    return Scenario(
        name="simple_spread",
        version=3,
        agent_names=tuple(f"agent_{i}" for i in range(n)),
        dim_c=2,
        agent_size=(0.15,) * n,
        agent_accel=(None,) * n,
        agent_max_speed=(None,) * n,
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(True,) * n,
        landmark_size=(0.05,) * n,
        landmark_collide=(False,) * n,
        landmark_spawn=(1.0,) * n,
        observe=observe,
        reward=reward,
        global_reward=global_reward,
        terminal=covered if terminate_on_success else None,
        curriculum=(False, True) if curriculum else None,
        benchmark=benchmark,
        agent_colors=constant_colors([[0.35, 0.35, 0.85]] * n),
        landmark_colors=constant_colors([[0.25, 0.25, 0.25]] * n),
        agent_roles=(f"0..{n - 1}: agent_i, identical (5 actions, observation {observation_size})",),
    )
