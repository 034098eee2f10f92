"""``simple_speaker_listener_v4``: a speaker tells a listener which landmark to go to."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario, constant_colors
from lamella.envs.multi_agent.mpe.types import MultiParticleState

LANDMARK_COLORS = np.asarray([[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]], np.float32)


def make() -> Scenario:
    """Agent 0 ``speaker_0`` (immovable, talks, ``dim_c=3``), agent 1 ``listener_0`` (moves,
    silent); 3 landmarks (size 0.04); nothing collides. ``goal[0]`` is the goal landmark.

    Observations: speaker (3) the goal landmark's colour; listener (11) ``[self_vel,
    landmark_rel (3), speaker_comm (3)]``. Actions: speaker 3 (a word), listener 5 (moves).
    Reward (shared): ``-|listener - goal landmark|^2``.
    """

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        speaker = jnp.asarray(LANDMARK_COLORS)[state.goal[0]]
        rel = (state.landmark_pos - state.agent_pos[1]).reshape(-1)
        listener = jnp.concatenate([state.agent_vel[1], rel, state.comm[0]])
        return [speaker[None], listener[None]]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        goal = state.landmark_pos[state.goal[0]]
        value = -jnp.sum(jnp.square(state.agent_pos[1] - goal))
        return jnp.stack([value, value])

    def agent_colors(state: MultiParticleState) -> jnp.ndarray:
        listener = jnp.asarray(LANDMARK_COLORS)[state.goal[0]] + 0.45
        return jnp.stack([jnp.full((3,), 0.25), listener])

    return Scenario(
        name="simple_speaker_listener",
        version=4,
        agent_names=("speaker_0", "listener_0"),
        dim_c=3,
        agent_size=(0.075, 0.075),
        agent_accel=(None, None),
        agent_max_speed=(None, None),
        agent_movable=(False, True),
        agent_silent=(False, True),
        agent_collide=(False, False),
        landmark_size=(0.04,) * 3,
        landmark_collide=(False,) * 3,
        landmark_spawn=(1.0,) * 3,
        observe=observe,
        reward=reward,
        benchmark=lambda state: {"reward": reward(state)},  # mpe2: the reward itself
        goal_choices=(3,),
        agent_colors=agent_colors,
        landmark_colors=constant_colors(LANDMARK_COLORS),
        agent_roles=(
            "0: speaker_0, immovable, 3 actions (words), observation 3 (goal colour)",
            "1: listener_0, moves silently, 5 actions, observation 11",
        ),
    )
