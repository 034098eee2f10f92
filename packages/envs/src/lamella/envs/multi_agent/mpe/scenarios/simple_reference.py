"""``simple_reference_v3``: two agents each know the other's goal landmark and must tell it."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, constant_colors, norm
from lamella.envs.multi_agent.mpe.types import MultiParticleState

LANDMARK_COLORS = np.asarray([[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]], np.float32)


def make() -> Scenario:
    """Two agents that move and talk (``dim_c=10``), 3 landmarks, nothing collides.

    ``goal[i]`` is the landmark agent ``i`` knows about, which the *other* agent should reach.
    Observation (21): ``[self_vel, landmark_rel (3), colour of landmark goal[i] (3), other's comm
    (10)]``. Actions: 50 (``move + 5 * word``) or continuous 15 (5 moves, 10 comm).
    Local reward of agent ``i``: ``-|other agent - landmark goal[i]|``; global: their mean;
    mixed by ``local_ratio``.
    """

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        rel = (state.landmark_pos[None, :, :] - state.agent_pos[:, None, :]).reshape(2, -1)
        color = jnp.asarray(LANDMARK_COLORS)[state.goal]
        return [jnp.concatenate([state.agent_vel, rel, color, state.comm[::-1]], -1)]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        return -norm(state.agent_pos[::-1] - state.landmark_pos[state.goal])

    def global_reward(state: MultiParticleState) -> jnp.ndarray:
        return jnp.mean(reward(state))

    def agent_colors(state: MultiParticleState) -> jnp.ndarray:
        # mpe2 paints each agent in the colour of the landmark the other one knows for it.
        return jnp.asarray(LANDMARK_COLORS)[state.goal[::-1]]

    return Scenario(
        name="simple_reference",
        version=3,
        agent_names=("agent_0", "agent_1"),
        dim_c=10,
        agent_size=(0.05, 0.05),
        agent_accel=(None, None),
        agent_max_speed=(None, None),
        agent_movable=(True, True),
        agent_silent=(False, False),
        agent_collide=(False, False),
        landmark_size=(0.05,) * 3,
        landmark_collide=(False,) * 3,
        landmark_spawn=(1.0,) * 3,
        observe=observe,
        reward=reward,
        global_reward=global_reward,
        goal_choices=(3, 3),
        agent_colors=agent_colors,
        landmark_colors=constant_colors(LANDMARK_COLORS),
        agent_roles=("0, 1: agent_i, identical (50 actions = 5 moves x 10 words, observation 21)",),
    )
