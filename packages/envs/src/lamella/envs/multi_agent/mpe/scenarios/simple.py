"""``simple_v3``: one agent goes to one landmark."""

from __future__ import annotations

import jax.numpy as jnp

from lamella.envs.multi_agent.mpe.core import Scenario, constant_colors
from lamella.envs.multi_agent.mpe.types import MultiParticleState


def make() -> Scenario:
    """One movable silent agent and one landmark, nothing collides.

    Observation (4): ``[self_vel, landmark_rel]``. Reward: ``-|agent - landmark|^2``.
    """

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        return [jnp.concatenate([state.agent_vel, state.landmark_pos - state.agent_pos], -1)]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        return -jnp.sum(jnp.square(state.agent_pos - state.landmark_pos[0]), -1)

    return Scenario(
        name="simple",
        version=3,
        agent_names=("agent_0",),
        dim_c=0,
        agent_size=(0.05,),
        agent_accel=(None,),
        agent_max_speed=(None,),
        agent_movable=(True,),
        agent_silent=(True,),
        agent_collide=(False,),
        landmark_size=(0.05,),
        landmark_collide=(False,),
        landmark_spawn=(1.0,),
        observe=observe,
        reward=reward,
        agent_colors=constant_colors([[0.25, 0.25, 0.25]]),
        landmark_colors=constant_colors([[0.75, 0.25, 0.25]]),
        agent_roles=("0: agent_0, moves (5 actions), observation 4",),
    )
