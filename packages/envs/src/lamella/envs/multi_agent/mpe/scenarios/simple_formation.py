"""``simple_formation_v1``: N agents form a circle of radius 0.5 around a landmark."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, assigned_distances, constant_colors, distances
from lamella.envs.multi_agent.mpe.types import MultiParticleState

#: mpe2's ``TARGET_RADIUS`` (the circle) and ``DIST_THRESHOLD`` (success: every agent this close).
TARGET_RADIUS = 0.5
DIST_THRESHOLD = 0.05
#: The most agents: the assignment to the circle's places tries all N! permutations.
MAX_AGENTS = 8


def placement_task(
    matched: Callable[[MultiParticleState], jax.Array], n: int, terminate_on_success: bool
) -> tuple[Callable[[MultiParticleState], jax.Array], Callable[[MultiParticleState], jax.Array] | None]:
    """``(reward, terminal)`` of a task of ``n`` agents taking places (simple_formation,
    simple_line) from ``matched(state)``, each agent's distance to its matched place: the shared
    reward ``-mean(clip(distances, 0, 2))``, and with ``terminate_on_success`` the end of the task
    when every distance is below :data:`DIST_THRESHOLD`."""

    def reward(state: MultiParticleState) -> jax.Array:
        return jnp.broadcast_to(-jnp.mean(jnp.clip(matched(state), 0.0, 2.0)), (n,))

    def placed(state: MultiParticleState) -> jax.Array:
        return jnp.all(matched(state) < DIST_THRESHOLD)

    return reward, placed if terminate_on_success else None


def make(N: int = 4, terminate_on_success: bool = False) -> Scenario:
    """N movable silent colliding agents (size 0.05) and one landmark (size 0.03, reset in
    ``[-0.5, 0.5]^2``); no communication.

    Observation (6): ``[self_vel, self_pos, landmark_rel]``. The circle's N places are
    ``landmark + 0.5 (cos(t0 + 2 pi i / N), sin(t0 + 2 pi i / N))``, ``t0`` the smallest angle in
    ``[0, 2 pi)`` of an agent seen from the landmark; agents are matched to places with the least
    total distance (mpe2: ``linear_sum_assignment``; here every permutation is tried, so
    ``N <= 8``). Reward, the same for every agent: ``-mean(clip(matched distances, 0, 2))``.
    ``terminate_on_success``: every agent terminates once each matched distance is below 0.05
    (the time limit first, as in mpe2).
    """
    n = N
    if n > MAX_AGENTS:
        raise ValueError(
            f"MultiParticleEnv: simple_formation N must be at most {MAX_AGENTS} (the assignment tries "
            f"all N! orders of the agents), got {n}."
        )
    steps = 2 * np.pi * np.arange(n) / n

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        landmark_rel = state.landmark_pos[None, 0, :] - state.agent_pos
        return [jnp.concatenate([state.agent_vel, state.agent_pos, landmark_rel], -1)]

    def matched(state: MultiParticleState) -> jnp.ndarray:
        landmark = state.landmark_pos[0]
        rel = state.agent_pos - landmark
        angle = jnp.arctan2(rel[:, 1], rel[:, 0])
        angle = jnp.where(angle < 0, angle + 2 * np.pi, angle)
        theta = jnp.min(angle) + steps
        places = landmark + TARGET_RADIUS * jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
        return assigned_distances(distances(state.agent_pos, places))

    reward, terminal = placement_task(matched, n, terminate_on_success)

    return Scenario(
        name="simple_formation",
        version=1,
        agent_names=tuple(f"agent_{i}" for i in range(n)),
        dim_c=0,
        agent_size=(0.05,) * n,
        agent_accel=(None,) * n,
        agent_max_speed=(None,) * n,
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(True,) * n,
        landmark_size=(0.03,),
        landmark_collide=(False,),
        landmark_spawn=(0.5,),
        observe=observe,
        reward=reward,
        terminal=terminal,
        agent_colors=constant_colors([[0.35, 0.35, 0.85]] * n),
        landmark_colors=constant_colors([[0.25, 0.25, 0.25]]),
        agent_roles=(f"0..{n - 1}: agent_i, identical (5 actions, observation 6)",),
    )
