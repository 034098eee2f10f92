"""``simple_line_v1``: N agents spread evenly along the segment between two landmarks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, assigned_distances, constant_colors, distances
from lamella.envs.multi_agent.mpe.scenarios.simple_formation import MAX_AGENTS, placement_task
from lamella.envs.multi_agent.mpe.types import MultiParticleState

#: mpe2's ``TOTAL_SEP``: the distance between the two landmarks.
TOTAL_SEP = 1.25
#: mpe2's reset turns the second landmark's direction by 5 degrees until it is inside the arena.
_TURNS = np.radians(5.0) * np.arange(72)


def _place_landmarks(landmarks: jax.Array, draws: jax.Array) -> jax.Array:
    """mpe2's reset: landmark 0 uniform in ``[-0.25, 0.25]^2`` (its spawn box), landmark 1 at
    ``TOTAL_SEP`` from it in a uniform direction, turned by 5 degrees at a time until it lies
    strictly inside ``(-1, 1)^2``."""
    theta = 2.0 * np.pi * draws[0] + _TURNS
    candidates = landmarks[0] + TOTAL_SEP * jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
    inside = jnp.all(jnp.abs(candidates) < 1.0, axis=-1)
    return landmarks.at[1].set(candidates[jnp.argmax(inside)])


def make(N: int = 4, terminate_on_success: bool = False) -> Scenario:
    """N movable silent colliding agents (size 0.03) and two landmarks (size 0.02, not
    colliding) 1.25 apart; no communication.

    Observation (8): ``[self_vel, self_pos, landmark_0_rel, landmark_1_rel]``. The line's N places
    are ``landmark_0 + i / (N - 1) (landmark_1 - landmark_0)`` (all at landmark 0 when N = 1);
    agents are matched to places with the least total distance (mpe2: ``linear_sum_assignment``;
    here every permutation is tried, so ``N <= 8``). Reward, the same for every agent:
    ``-mean(clip(matched distances, 0, 2))``. ``terminate_on_success``: every agent terminates
    once each matched distance is below 0.05 (the time limit first, as in mpe2).
    """
    n = N
    if n > MAX_AGENTS:
        raise ValueError(
            f"MultiParticleEnv: simple_line N must be at most {MAX_AGENTS} (the assignment tries all N! "
            f"orders of the agents), got {n}."
        )
    fractions = (np.arange(n) / max(n - 1, 1)).astype(np.float32)[:, None]

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        rel = (state.landmark_pos[None, :, :] - state.agent_pos[:, None, :]).reshape(n, -1)
        return [jnp.concatenate([state.agent_vel, state.agent_pos, rel], -1)]

    def matched(state: MultiParticleState) -> jnp.ndarray:
        start, end = state.landmark_pos[0], state.landmark_pos[1]
        places = start + fractions * (end - start) if n > 1 else start[None]
        return assigned_distances(distances(state.agent_pos, places))

    reward, terminal = placement_task(matched, n, terminate_on_success)

    return Scenario(
        name="simple_line",
        version=1,
        agent_names=tuple(f"agent_{i}" for i in range(n)),
        dim_c=0,
        agent_size=(0.03,) * n,
        agent_accel=(None,) * n,
        agent_max_speed=(None,) * n,
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(True,) * n,
        landmark_size=(0.02, 0.02),
        landmark_collide=(False, False),
        landmark_spawn=(0.25, 0.25),
        observe=observe,
        reward=reward,
        terminal=terminal,
        place_landmarks=_place_landmarks,
        reset_draws=1,
        agent_colors=constant_colors([[0.35, 0.35, 0.85]] * n),
        landmark_colors=constant_colors([[0.25, 0.25, 0.25]] * 2),
        agent_roles=(f"0..{n - 1}: agent_i, identical (5 actions, observation 8)",),
    )
