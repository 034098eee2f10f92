"""``simple_push_v3``: a good agent goes to its landmark; an adversary pushes it away."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, norm
from lamella.envs.multi_agent.mpe.types import MultiParticleState

LANDMARK_COLORS = np.asarray([[0.1, 0.9, 0.1], [0.1, 0.1, 0.9]], np.float32)


def make() -> Scenario:
    """Agent 0 the adversary, agent 1 good; both silent and colliding (size 0.05); 2 landmarks,
    not colliding. ``goal[0]`` is the goal landmark.

    Observations: good (19) ``[self_vel, goal_rel, own colour (3), landmark_rel (2), landmark
    colours (2 x 3), other_rel]``, whose colour is ``0.25`` plus ``0.5`` in channel
    ``goal + 1``; adversary (8) ``[self_vel, landmark_rel (2), other_rel]``. Rewards: good
    ``-|good - goal|``; adversary ``|good - goal| - |adversary - goal|``.
    """

    def good_color(state: MultiParticleState) -> jnp.ndarray:
        return 0.25 + 0.5 * (jnp.arange(3) == state.goal[0] + 1).astype(jnp.float32)

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        pos, vel = state.agent_pos, state.agent_vel
        goal = state.landmark_pos[state.goal[0]]
        good = jnp.concatenate(
            [
                vel[1],
                goal - pos[1],
                good_color(state),
                (state.landmark_pos - pos[1]).reshape(-1),
                jnp.asarray(LANDMARK_COLORS).reshape(-1),
                pos[0] - pos[1],
            ]
        )
        adversary = jnp.concatenate([vel[0], (state.landmark_pos - pos[0]).reshape(-1), pos[1] - pos[0]])
        return [adversary[None], good[None]]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        dist = norm(state.agent_pos - state.landmark_pos[state.goal[0]])
        return jnp.stack([dist[1] - dist[0], -dist[1]])

    def agent_colors(state: MultiParticleState) -> jnp.ndarray:
        return jnp.stack([jnp.asarray([0.75, 0.25, 0.25]), good_color(state)])

    return Scenario(
        name="simple_push",
        version=3,
        agent_names=("adversary_0", "agent_0"),
        dim_c=2,
        agent_size=(0.05, 0.05),
        agent_accel=(None, None),
        agent_max_speed=(None, None),
        agent_movable=(True, True),
        agent_silent=(True, True),
        agent_collide=(True, True),
        landmark_size=(0.05, 0.05),
        landmark_collide=(False, False),
        landmark_spawn=(1.0, 1.0),
        observe=observe,
        reward=reward,
        goal_choices=(2,),
        agent_colors=agent_colors,
        landmark_colors=lambda state: jnp.asarray(LANDMARK_COLORS),
        agent_roles=("0: adversary_0, observation 8 (padded)", "1: agent_0 (good), observation 19"),
    )
