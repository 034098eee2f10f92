"""``simple_crypto_v3``: Alice sends Bob a goal encrypted with a shared key; Eve listens in."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.core import Scenario
from lamella.envs.multi_agent.mpe.types import MultiParticleState

DIM_C = 4


def make() -> Scenario:
    """Agent 0 ``eve_0`` (adversary), 1 ``bob_0`` (listener), 2 ``alice_0`` (speaker); all
    immovable, all talk (``dim_c=4``); 2 landmarks whose colours are the one-hot vectors
    ``e_0, e_1`` of length 4. ``goal = (goal landmark, key landmark)``.

    Observations: Alice (8) ``[goal colour, key]``, Bob (8) ``[key, Alice's comm]``, Eve (4)
    ``[Alice's comm]``. Actions: 4 words each (continuous: 4 comm entries).
    Rewards: Eve ``-|c_eve - goal colour|^2``; Alice and Bob ``-|c_bob - goal colour|^2 +
    |c_eve - goal colour|^2``, where each term counts only if that agent said something
    (an all-zero utterance, possible with continuous actions, counts 0).
    """
    colors = np.eye(DIM_C, dtype=np.float32)[:2]

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        goal_color = jnp.asarray(colors)[state.goal[0]]
        key = jnp.asarray(colors)[state.goal[1]]
        alice = state.comm[2]
        return [alice[None], jnp.stack([jnp.concatenate([key, alice]), jnp.concatenate([goal_color, key])])]

    def reward(state: MultiParticleState) -> jnp.ndarray:
        goal_color = jnp.asarray(colors)[state.goal[0]]
        error = jnp.sum(jnp.square(state.comm - goal_color), -1)
        said = jnp.any(state.comm != 0.0, -1)
        error = jnp.where(said, error, 0.0)
        good = error[0] - error[1]
        return jnp.stack([-error[0], good, good])

    def benchmark(state: MultiParticleState) -> dict[str, jnp.ndarray]:
        # mpe2: every agent's utterance and the goal's colour (its goal_a, the same for all).
        goal_color = jnp.asarray(colors)[state.goal[0]]
        return {"comm": state.comm, "goal_color": jnp.broadcast_to(goal_color, state.comm.shape)}

    def agent_colors(state: MultiParticleState) -> jnp.ndarray:
        bob = jnp.asarray(colors[:, :3])[state.goal[0]]
        return jnp.stack([jnp.asarray([0.75, 0.25, 0.25]), bob, jnp.full((3,), 0.25)])

    return Scenario(
        name="simple_crypto",
        version=3,
        agent_names=("eve_0", "bob_0", "alice_0"),
        dim_c=DIM_C,
        agent_size=(0.05,) * 3,
        agent_accel=(None,) * 3,
        agent_max_speed=(None,) * 3,
        agent_movable=(False,) * 3,
        agent_silent=(False,) * 3,
        agent_collide=(False,) * 3,
        landmark_size=(0.05, 0.05),
        landmark_collide=(False, False),
        landmark_spawn=(1.0, 1.0),
        observe=observe,
        reward=reward,
        benchmark=benchmark,
        goal_choices=(2, 2),
        agent_colors=agent_colors,
        landmark_colors=lambda state: jnp.asarray(colors[:, :3]),
        agent_roles=(
            "0: eve_0 (adversary), observation 4 (padded)",
            "1: bob_0 (listener), observation 8",
            "2: alice_0 (speaker), observation 8",
        ),
    )
