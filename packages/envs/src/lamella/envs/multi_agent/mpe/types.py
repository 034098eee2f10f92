"""State and params of :class:`~lamella.envs.multi_agent.mpe.MultiParticleEnv`."""

from __future__ import annotations

import jax

from lamella.envs import struct

__all__ = [
    "MultiParticleCurriculumParams",
    "MultiParticleParams",
    "MultiParticleSharedParams",
    "MultiParticleState",
]


class MultiParticleState(struct.PyTreeNode):
    """State of a multi-agent particle world (one scenario of ``mpe2==1.1.1``).

    ``n`` is the number of agents, ``L`` the number of landmarks (every
    non-agent entity: landmarks, obstacles, food, forests, in mpe2's
    ``world.landmarks`` order), ``C`` the scenario's communication size
    (``world.dim_c``), ``G`` its number of goal indices (0 to 2).

    Attributes:
        agent_pos: float32 ``(n, 2)``, agent positions (``state.p_pos``).
        agent_vel: float32 ``(n, 2)``, agent velocities (``state.p_vel``); stays
            0 for immovable agents (speakers).
        landmark_pos: float32 ``(L, 2)``, landmark positions. No landmark of
            these scenarios moves.
        comm: float32 ``(n, C)``, what each agent said on the last step
            (``state.c``): a one-hot word (discrete actions), the raw comm entries
            of the action (continuous actions), zeros for silent agents and
            at reset.
        goal: int32 ``(G,)``, the scenario's hidden choices, indices into the
            landmarks (see each scenario's docs: the goal landmark of
            speaker_listener, adversary and push; one per agent in reference;
            goal and key in crypto).
        time: int32 ``()``, world steps taken in this episode (mpe2's ``steps``).
        items: int32 ``(K,)``, the scenario's discrete state that changes within an episode:
            in collect_treasure what each collector holds, each treasure's type and whether
            it is on the field, and the step's pickups and deliveries (see its docs); None in
            the other scenarios (no leaf, so their states and checkpoints are as before).
    """

    agent_pos: jax.Array
    agent_vel: jax.Array
    landmark_pos: jax.Array
    comm: jax.Array
    goal: jax.Array
    time: jax.Array
    items: jax.Array | None = None


class MultiParticleParams(struct.PyTreeNode):
    """Traced parameters of :class:`~lamella.envs.multi_agent.mpe.MultiParticleEnv`.

    Attributes:
        max_cycles: int, world steps after which every agent is truncated
            (mpe2's ``max_cycles``, 25).
        dt: float, integration step (0.1).
        damping: float, velocity damping per step (0.25).
        contact_force: float, stiffness of the soft contact force (100.0; >= 0, a negative one
            would pull touching entities together).
        contact_margin: float, softness of the contact penetration (1e-3).
    """

    max_cycles: int = struct.field(default=25, bounds=(1, None))
    dt: float = struct.field(default=0.1, above=0.0)
    damping: float = struct.field(default=0.25, bounds=(0.0, 1.0))
    contact_force: float = struct.field(default=100.0, bounds=(0.0, None))
    contact_margin: float = struct.field(default=1e-3, above=0.0)


class MultiParticleSharedParams(MultiParticleParams):
    """Params of the scenarios with a shared reward (simple_spread, simple_reference).

    Attributes:
        local_ratio: float, weight of an agent's own reward against the shared
            one, ``reward = global * (1 - local_ratio) + local * local_ratio``
            (mpe2's default 0.5). The other scenarios' params have no such field.
        max_cycles, dt, damping, contact_force, contact_margin: as
            :class:`MultiParticleParams`.
    """

    local_ratio: float = struct.field(default=0.5, bounds=(0.0, 1.0))


class MultiParticleCurriculumParams(MultiParticleSharedParams):
    """Params of simple_spread made with ``curriculum=True`` (mpe2 1.1's curriculum).

    Attributes:
        curriculum_stage: int, the stage (traced: a training loop moves on without a new
            compile, and a batch of envs may be at different stages): 0 no collision penalty,
            1 (and above, clipped as mpe2's ``set_curriculum_stage`` clamps) the penalty back.
            mpe2's ``advance_curriculum()`` is ``params.replace(curriculum_stage=1)``.
        local_ratio, max_cycles, dt, damping, contact_force, contact_margin: as
            :class:`MultiParticleSharedParams`.
    """

    curriculum_stage: int = 0
