"""``collect_treasure_v1``: collectors pick up treasures and carry each to the deposit of its type."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs.multi_agent.mpe.core import Scenario, distances, other_index, relative, stable_order
from lamella.envs.multi_agent.mpe.types import MultiParticleState

#: mpe2's palette of treasure types (one per deposit, at most six).
TYPE_COLORS = np.asarray(
    [
        [0.212, 0.408, 0.776],
        [0.945, 0.553, 0.000],
        [0.169, 0.627, 0.173],
        [0.839, 0.149, 0.157],
        [0.580, 0.404, 0.741],
        [0.549, 0.337, 0.294],
    ],
    np.float32,
)
COLLECTOR_SIZE, DEPOSIT_SIZE, TREASURE_SIZE = 0.05, 0.075, 0.025
#: Where mpe2 parks a picked-up treasure until it respawns on the next step.
PARKED = -999.0
#: Half-width of the box treasures (re)spawn in.
TREASURE_SPAWN = 0.95
#: The global reward per pickup and per delivery, and the penalty per overlapping collector.
EVENT_REWARD, OVERLAP_PENALTY, SHAPING = 5.0, 5.0, 0.1


def respawn_draws(key: jax.Array, num_treasures: int) -> jax.Array:
    """The uniform numbers in [0, 1) a step draws from its key, float32 ``(num_treasures, 3)``:
    per treasure, its respawn position (x, y) and type, used where that treasure respawns."""
    return fast_random.uniform(key, (num_treasures, 3))


def split_items(items: jax.Array | None, num_collectors: int, num_treasures: int) -> tuple[jax.Array, ...]:
    """``(holding (C,), treasure_type (T,), alive (T,), events ())`` of ``MultiParticleState.items``."""
    assert items is not None, "a collect_treasure state holds items"
    c, t = num_collectors, num_treasures
    return items[:c], items[c : c + t], items[c + t : c + 2 * t], items[c + 2 * t]


def make(num_collectors: int = 6, num_deposits: int = 2, num_treasures: int = 6) -> Scenario:
    """Collectors first (size 0.05, mass 1), then deposits (size 0.075, mass 2.25), all movable,
    silent, accel 1.5, max speed 1.0, none colliding (mpe2's "ghost" agents); treasures are
    landmarks of size 0.025 that respawn uniformly in ``[-0.95, 0.95]^2`` with a uniform type.
    Deposit ``d`` accepts treasure type ``d``.

    ``MultiParticleState.items`` (int32, ``C + 2 T + 1``): what each collector holds (-1 nothing,
    else a type), each treasure's type, whether it is on the field (1) or picked up (0, parked at
    (-999, -999) as in mpe2), and the number of pickups and deliveries on the last step.

    After the physics, in mpe2's order: each treasure in turn is picked up by the first
    empty-handed collector touching it (a picked-up treasure respawns on the next step, at a
    place and with a type drawn from the step's key, and cannot be picked up on that step); then
    each holding collector touching the deposit of its type delivers. Reward: every agent gets
    ``5`` per pickup and per delivery of the step; a collector ``-5`` per other collector it
    overlaps and ``-0.1`` times its distance to the nearest treasure on the field (empty-handed)
    or to the deposit of its type (holding); a deposit ``-0.1`` times its distance to the nearest
    collector holding its type, or, if none does, to the collectors' centroid.

    Observation: ``[self_pos, self_vel]``, a collector's held type one-hot (``D``), then every
    other agent nearest first (relative position, velocity, ``[deposit type one-hot, held type
    one-hot]``, ``4 + 2 D``), then the treasures on the field nearest first and the picked-up
    ones after them as zeros (relative position, type one-hot, ``2 + D``): 86 for a collector
    and 84 for a deposit with the defaults.
    """
    c, d, t = num_collectors, num_deposits, num_treasures
    if d > len(TYPE_COLORS):
        raise ValueError(
            f"MultiParticleEnv: collect_treasure num_deposits must be at most {len(TYPE_COLORS)} "
            f"(mpe2's palette of treasure types), got {d}."
        )
    n = c + d
    collector = np.arange(n) < c
    others = other_index(range(n), range(n))  # (n, n - 1)
    types = np.arange(d)

    def encodings(holding: jax.Array) -> jax.Array:
        """Each agent's ``[deposit type one-hot, held type one-hot]``, ``(n, 2 D)``."""
        held = (holding[:, None] == types).astype(jnp.float32)  # (C, D); -1 holds nothing
        return jnp.concatenate(
            [
                jnp.concatenate([jnp.zeros((c, d)), held], -1),
                jnp.concatenate([jnp.eye(d), jnp.zeros((d, d))], -1),
            ]
        )

    def observe(state: MultiParticleState) -> list[jnp.ndarray]:
        holding, treasure_type, alive, _ = split_items(state.items, c, t)
        pos, vel = state.agent_pos, state.agent_vel
        rel = relative(pos)[np.arange(n)[:, None], others]  # (n, n - 1, 2), index order
        per_other = jnp.concatenate([rel, vel[others], encodings(holding)[others]], -1)
        # Nearest first, ties in index order (Python's sorted).
        order = stable_order(jnp.sqrt(jnp.sum(jnp.square(rel), -1)))
        per_other = jnp.take_along_axis(per_other, order[..., None], 1).reshape(n, -1)
        on_field = alive.astype(jnp.bool_)
        treasure_rel = state.landmark_pos[None, :, :] - pos[:, None, :]  # (n, T, 2)
        distance = jnp.sqrt(jnp.sum(jnp.square(treasure_rel), -1))
        order = stable_order(jnp.where(on_field, distance, 1e6))  # picked-up ones last
        per_treasure = jnp.concatenate(
            [
                treasure_rel,
                jnp.broadcast_to((treasure_type[:, None] == types).astype(jnp.float32), (n, t, d)),
            ],
            -1,
        )
        per_treasure = jnp.where(on_field[None, :, None], per_treasure, 0.0)
        per_treasure = jnp.take_along_axis(per_treasure, order[..., None], 1).reshape(n, -1)
        held = (holding[:, None] == types).astype(jnp.float32)
        collectors = jnp.concatenate([pos[:c], vel[:c], held, per_other[:c], per_treasure[:c]], -1)
        deposits = jnp.concatenate([pos[c:], vel[c:], per_other[c:], per_treasure[c:]], -1)
        return [collectors, deposits]

    def post_step(state: MultiParticleState, key: jax.Array) -> MultiParticleState:
        holding, treasure_type, alive, _ = split_items(state.items, c, t)
        draws = respawn_draws(key, t)
        collectors, deposits = state.agent_pos[:c], state.agent_pos[c:]
        landmarks = state.landmark_pos
        touching = distances(collectors, landmarks) < COLLECTOR_SIZE + TREASURE_SIZE  # (C, T)
        events = jnp.zeros((), jnp.int32)
        new_pos, new_type, new_alive = [], [], []
        for j in range(t):  # mpe2's loop over the treasures, in order
            on_field = alive[j] > 0
            takers = on_field & (holding < 0) & touching[:, j]
            taken = jnp.any(takers)
            first = takers & (jnp.cumsum(takers) == 1)  # the first empty-handed collector touching it
            holding = jnp.where(first, treasure_type[j], holding)
            events = events + taken.astype(jnp.int32)
            respawned = ~on_field
            place = (2.0 * draws[j, :2] - 1.0) * TREASURE_SPAWN
            new_pos.append(jnp.where(taken, PARKED, jnp.where(respawned, place, landmarks[j])))
            kind = jnp.minimum(jnp.floor(draws[j, 2] * d).astype(jnp.int32), d - 1)
            new_type.append(jnp.where(respawned, kind, treasure_type[j]))
            new_alive.append(jnp.where(taken, 0, 1))
        # Deliveries: a holding collector touching the deposit of its type (one per type).
        at_deposit = distances(collectors, deposits) < COLLECTOR_SIZE + DEPOSIT_SIZE  # (C, D)
        delivered = jnp.any(at_deposit & (holding[:, None] == types), -1)
        events = events + jnp.sum(delivered).astype(jnp.int32)
        holding = jnp.where(delivered, -1, holding)
        items = jnp.concatenate([holding, jnp.stack(new_type), jnp.stack(new_alive), events[None]]).astype(
            jnp.int32
        )
        return state.replace(landmark_pos=jnp.stack(new_pos).astype(jnp.float32), items=items)

    def reward(state: MultiParticleState) -> jnp.ndarray:
        holding, _, alive, events = split_items(state.items, c, t)
        shared = EVENT_REWARD * events.astype(jnp.float32)
        collectors, deposits = state.agent_pos[:c], state.agent_pos[c:]
        between = distances(collectors, collectors)
        overlaps = jnp.sum((between < 2 * COLLECTOR_SIZE) & ~np.eye(c, dtype=bool), -1)
        to_treasure = jnp.where(alive[None, :] > 0, distances(collectors, state.landmark_pos), jnp.inf)
        nearest_treasure = jnp.min(to_treasure, -1)
        to_own_deposit = jnp.sum(
            jnp.where(holding[:, None] == types, distances(collectors, deposits), 0.0), -1
        )
        shaping = jnp.where(
            holding < 0, jnp.where(jnp.isfinite(nearest_treasure), nearest_treasure, 0.0), to_own_deposit
        )
        collector_reward = -OVERLAP_PENALTY * overlaps - SHAPING * shaping + shared
        carrying = holding[None, :] == types[:, None]  # (D, C)
        to_carrier = jnp.min(jnp.where(carrying, distances(deposits, collectors), jnp.inf), -1)
        centroid = jnp.mean(collectors, 0)
        to_centroid = jnp.sqrt(jnp.sum(jnp.square(centroid[None, :] - deposits), -1))
        deposit_reward = -SHAPING * jnp.where(jnp.any(carrying, -1), to_carrier, to_centroid) + shared
        return jnp.concatenate([collector_reward, deposit_reward])

    def benchmark(state: MultiParticleState) -> dict[str, jnp.ndarray]:
        # mpe2: a collector's (held type or None, treasures on the field); a deposit's (collectors
        # holding its type, treasures on the field). Here apart: holding -1 for nothing and for
        # deposits, carriers 0 for collectors.
        holding, _, alive, _ = split_items(state.items, c, t)
        carriers = jnp.sum(holding[None, :] == types[:, None], -1).astype(jnp.int32)
        on_field = jnp.sum(alive).astype(jnp.int32)
        return {
            "holding": jnp.concatenate([holding, jnp.full((d,), -1, jnp.int32)]),
            "carriers": jnp.concatenate([jnp.zeros((c,), jnp.int32), carriers]),
            "treasures_on_field": jnp.full((n,), on_field),
        }

    def reset_items(draws: jax.Array) -> jax.Array:
        kinds = jnp.minimum(jnp.floor(draws * d).astype(jnp.int32), d - 1)
        return jnp.concatenate(
            [jnp.full((c,), -1, jnp.int32), kinds, jnp.ones((t,), jnp.int32), jnp.zeros((1,), jnp.int32)]
        )

    def agent_colors(state: MultiParticleState) -> jax.Array:
        holding = split_items(state.items, c, t)[0]
        held = 0.85 * jnp.asarray(TYPE_COLORS)[jnp.maximum(holding, 0)]
        collector_colors = jnp.where(holding[:, None] >= 0, held, 0.85)
        return jnp.concatenate([collector_colors, 0.35 * jnp.asarray(TYPE_COLORS[:d])])

    def landmark_colors(state: MultiParticleState) -> jax.Array:
        return jnp.asarray(TYPE_COLORS)[split_items(state.items, c, t)[1]]

    sizes = (4 + d + (n - 1) * (4 + 2 * d) + t * (2 + d), 4 + (n - 1) * (4 + 2 * d) + t * (2 + d))
    return Scenario(
        name="collect_treasure",
        version=1,
        agent_names=tuple(f"collector_{i}" if collector[i] else f"deposit_{i - c}" for i in range(n)),
        dim_c=2,
        agent_size=tuple(COLLECTOR_SIZE if k else DEPOSIT_SIZE for k in collector),
        agent_accel=(1.5,) * n,
        agent_max_speed=(1.0,) * n,
        agent_movable=(True,) * n,
        agent_silent=(True,) * n,
        agent_collide=(False,) * n,
        agent_mass=tuple(1.0 if k else 2.25 for k in collector),
        landmark_size=(TREASURE_SIZE,) * t,
        landmark_collide=(False,) * t,
        landmark_spawn=(TREASURE_SPAWN,) * t,
        observe=observe,
        reward=reward,
        reset_items=reset_items,
        item_draws=t,
        post_step=post_step,
        benchmark=benchmark,
        landmark_visible=lambda state: split_items(state.items, c, t)[2] > 0,
        agent_colors=agent_colors,
        landmark_colors=landmark_colors,
        agent_roles=(
            f"0..{c - 1}: collector_i, observation {sizes[0]}",
            f"{c}..{n - 1}: deposit_i (accepts treasure type i), observation {sizes[1]}",
        ),
    )
