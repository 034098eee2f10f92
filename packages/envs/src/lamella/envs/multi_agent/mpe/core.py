"""The particle world shared by every MPE scenario: entities, actions, contact forces, integration.

The physics is ``mpe2==1.1.1``'s (``mpe2/_mpe_utils/core.py`` and ``simple_env.py``), vectorised
over entities. One world step, for the joint action of all agents:

1. decode each agent's action into a force ``u`` (movable agents) and an utterance ``c``
   (agents that talk);
2. the force on each movable agent is ``u`` plus the soft contact force of every other
   colliding entity, ``contact_force * (p_a - p_b) / |p_a - p_b| * k * log(1 + exp(-(|p_a - p_b|
   - size_a - size_b) / k))`` with ``k = contact_margin``;
3. integrate, position first: ``p += v * dt``, then ``v = v * (1 - damping) + F / m * dt`` (mass
   ``m``: 1 but in collect_treasure),
   then rescale ``v`` to ``max_speed`` where it is faster;
4. silent agents say zeros, the others their utterance.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.mpe.types import MultiParticleParams, MultiParticleState

__all__ = [
    "MOVE_ACTIONS",
    "Scenario",
    "boundary_penalty",
    "distances",
    "other_index",
    "relative",
    "world_step",
]

MOVE_ACTIONS = 5  # no_action, left, right, down, up
DEFAULT_ACCEL = 5.0  # mpe2's sensitivity when an agent sets no accel


@dataclasses.dataclass(frozen=True, eq=False)
class Scenario:
    """A scenario: the entities of the world and the functions of the state that make the task.

    Per-agent and per-landmark tuples are in mpe2's order (``world.agents``, ``world.landmarks``).

    Attributes:
        name: mpe2's module name without the version (``"simple_spread"``).
        version: mpe2's version suffix (``simple_spread_v3`` -> 3).
        agent_names: mpe2's agent names.
        dim_c: communication size (``world.dim_c``).
        agent_size, agent_accel, agent_max_speed: per agent; ``max_speed`` None for no limit.
        agent_movable, agent_silent, agent_collide: per agent.
        landmark_size, landmark_collide: per landmark.
        landmark_spawn: per landmark, the half-width of its uniform reset box.
        observe: ``state -> list`` of 2-D arrays, one per group of consecutive agents with
            observations of one size: ``(k, d)`` for the next ``k`` agents (unpadded).
        reward: ``state -> (n,)``, each agent's own reward (mpe2's ``scenario.reward``).
        global_reward: ``state -> ()``, the shared reward mixed in by ``local_ratio``; None for
            scenarios whose env takes no ``local_ratio``.
        goal_choices: one count per goal index: ``goal[g]`` is uniform in ``range(goal_choices[g])``.
        terminal: ``state -> ()`` bool, the task is done and every agent terminates (mpe2's
            ``scenario.is_terminal``, e.g. simple_spread's ``terminate_on_success``); None:
            episodes end only at ``max_cycles``.
        place_landmarks: ``(landmark positions (L, 2), uniform draws (reset_draws,)) ->
            landmark positions``: a reset that places landmarks otherwise than uniformly in
            their ``landmark_spawn`` boxes (simple_line's second landmark at a fixed distance
            from the first); None: the boxes alone.
        reset_draws: how many uniform numbers in [0, 1) ``place_landmarks`` takes.
        agent_mass: per agent (mpe2's ``initial_mass``): the force is divided by it; None: all 1.
        reset_items: ``uniform draws (item_draws,) -> items (K,)``, the initial
            ``MultiParticleState.items``; None: no items.
        item_draws: how many uniform numbers in [0, 1) ``reset_items`` takes.
        post_step: ``(state, key) -> state``, the scenario's own rules after the physics and
            before the reward (collect_treasure's pickups, deliveries and respawns, which draw
            from ``key``); None: none, and the step ignores its key.
        landmark_visible: ``state -> (L,)`` bool, the landmarks to draw; None: all.
        benchmark: ``state -> dict`` of arrays with a leading agent axis, mpe2's
            ``benchmark_data`` of every agent after a step (an env made with
            ``benchmark_data=True`` returns it as ``info["benchmark_data"]``); None: mpe2's is
            empty for the scenario.
        curriculum: per curriculum stage, whether the scenario's own reward (``reward``, before
            the ``local_ratio`` mix) counts: simple_spread with ``curriculum=True`` is
            ``(False, True)``, mpe2's stages without and with the collision penalty; the stage is
            the params' ``curriculum_stage``. None: no curriculum.
        agent_colors, landmark_colors: ``state -> (n, 3)`` / ``(L, 3)`` RGB in [0, 1] for rendering.
        agent_roles: one line per agent group for the docs (``"0: speaker"``).
    """

    name: str
    version: int
    agent_names: tuple[str, ...]
    dim_c: int
    agent_size: tuple[float, ...]
    agent_accel: tuple[float | None, ...]
    agent_max_speed: tuple[float | None, ...]
    agent_movable: tuple[bool, ...]
    agent_silent: tuple[bool, ...]
    agent_collide: tuple[bool, ...]
    landmark_size: tuple[float, ...]
    landmark_collide: tuple[bool, ...]
    landmark_spawn: tuple[float, ...]
    observe: Callable[[MultiParticleState], Any]
    reward: Callable[[MultiParticleState], jax.Array]
    agent_colors: Callable[[MultiParticleState], jax.Array]
    landmark_colors: Callable[[MultiParticleState], jax.Array]
    global_reward: Callable[[MultiParticleState], jax.Array] | None = None
    goal_choices: tuple[int, ...] = ()
    agent_roles: tuple[str, ...] = ()
    terminal: Callable[[MultiParticleState], jax.Array] | None = None
    place_landmarks: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    reset_draws: int = 0
    agent_mass: tuple[float, ...] | None = None
    reset_items: Callable[[jax.Array], jax.Array] | None = None
    item_draws: int = 0
    post_step: Callable[[MultiParticleState, jax.Array], MultiParticleState] | None = None
    landmark_visible: Callable[[MultiParticleState], jax.Array] | None = None
    curriculum: tuple[bool, ...] | None = None
    benchmark: Callable[[MultiParticleState], dict[str, jax.Array]] | None = None

    @property
    def num_agents(self) -> int:
        return len(self.agent_names)

    @property
    def num_landmarks(self) -> int:
        return len(self.landmark_size)

    def discrete_actions(self, i: int) -> int:
        """Agent ``i``'s number of discrete actions (mpe2's ``Discrete`` size)."""
        moves = MOVE_ACTIONS if self.agent_movable[i] else 1
        return moves * (self.dim_c if not self.agent_silent[i] else 1)

    def continuous_size(self, i: int) -> int:
        """Agent ``i``'s continuous action size (mpe2's ``Box`` size)."""
        return (MOVE_ACTIONS if self.agent_movable[i] else 0) + (0 if self.agent_silent[i] else self.dim_c)


def constant_colors(
    colors: Sequence[Sequence[float]] | np.ndarray,
) -> Callable[[MultiParticleState], jax.Array]:
    table = np.asarray(colors, np.float32)
    return lambda state: jnp.asarray(table)


def distances(a: jax.Array, b: jax.Array) -> jax.Array:
    """Euclidean distances between the rows of ``a`` ``(m, 2)`` and ``b`` ``(k, 2)``: ``(m, k)``."""
    delta = a[:, None, :] - b[None, :, :]
    return jnp.sqrt(jnp.square(delta[..., 0]) + jnp.square(delta[..., 1]))


def norm(v: jax.Array) -> jax.Array:
    """Euclidean norm over the last axis of size 2."""
    return jnp.sqrt(jnp.square(v[..., 0]) + jnp.square(v[..., 1]))


def boundary_penalty(pos: jax.Array) -> jax.Array:
    """mpe2's ``bound`` summed over both axes, per row of ``pos`` ``(m, 2)``: 0 inside 0.9,
    ``10 (|x| - 0.9)`` up to 1, then ``min(exp(2|x| - 2), 10)``."""
    x = jnp.abs(pos)
    penalty = jnp.where(
        x < 0.9, 0.0, jnp.where(x < 1.0, (x - 0.9) * 10.0, jnp.minimum(jnp.exp(2.0 * x - 2.0), 10.0))
    )
    return penalty[..., 0] + penalty[..., 1]


def other_index(rows: Sequence[int], columns: Sequence[int]) -> np.ndarray:
    """For each ``i`` in ``rows``, the entries of ``columns`` other than ``i``, in order: int32 ``(len(rows), k)``."""
    return np.asarray([[j for j in columns if j != i] for i in rows], np.int32).reshape(len(rows), -1)


def rows_without_self(values: jax.Array, rows: Sequence[int], columns: Sequence[int]) -> jax.Array:
    """For each ``i`` in ``rows``, ``values[i, j]`` for the ``j`` in ``columns`` other than ``i``, in
    order, flattened: ``(len(rows), -1)``. Static slices and one concatenation, no gather (a
    gather under ``vmap`` stops XLA on CPU from fusing the observation into one loop)."""
    out = []
    for i in rows:
        keep = [j for j in columns if j != i]
        # Runs of consecutive columns become one slice each.
        runs, start = [], 0
        for k in range(1, len(keep) + 1):
            if k == len(keep) or keep[k] != keep[k - 1] + 1:
                runs.append(values[i, keep[start] : keep[k - 1] + 1])
                start = k
        parts = [r.reshape(-1) for r in runs]
        out.append(jnp.concatenate(parts) if parts else jnp.zeros((0,), values.dtype))
    return jnp.stack(out)


def caught_counts(pos: jax.Array, touch: np.ndarray, adversary: np.ndarray) -> dict[str, jax.Array]:
    """mpe2's ``benchmark_data`` of the predator-prey scenarios (simple_tag, simple_world_comm):
    ``{"collisions": int32 (n,)}``, each adversary's count of good agents touching it (closer than
    ``touch``, the pair's summed sizes), 0 for a good agent."""
    caught = (distances(pos, pos) < touch) & adversary[:, None] & ~adversary[None, :]
    return {"collisions": jnp.sum(caught, -1).astype(jnp.int32)}


def relative(pos: jax.Array) -> jax.Array:
    """``rel[i, j] = pos[j] - pos[i]``, ``(n, n, 2)``."""
    return pos[None, :, :] - pos[:, None, :]


def nearest(rel: jax.Array, k: int | None) -> jax.Array:
    """mpe2's partial observability: per row, the ``k`` entries of ``rel`` ``(n, m, 2)`` (positions
    relative to the observer) nearest to the observer, closest first, as ``(n, k)`` indices into
    ``m`` (``m`` marks a zero-padded slot when ``k > m``); every entry in index order when ``k``
    is None."""
    n, m = rel.shape[:2]
    if k is None:
        return jnp.broadcast_to(jnp.arange(m), (n, m))
    distance = jnp.sqrt(jnp.square(rel[..., 0]) + jnp.square(rel[..., 1]))
    order = stable_order(distance)[:, : min(k, m)]
    return jnp.pad(order, ((0, 0), (0, k - order.shape[1])), constant_values=m)


def assigned_distances(dist: jax.Array) -> jax.Array:
    """The distances ``dist[i, perm[i]]`` ``(n,)`` of the assignment of ``n`` agents (rows) to ``n``
    targets (columns) with the least total distance: mpe2's ``linear_sum_assignment``, found by
    trying every permutation (``n!`` of them, so ``n`` is kept small by the scenarios)."""
    n = dist.shape[0]
    perms = np.asarray(list(itertools.permutations(range(n))), np.int32)  # (n!, n)
    chosen = dist[np.arange(n)[None, :], perms]  # (n!, n)
    return chosen[jnp.argmin(jnp.sum(chosen, axis=1))]


def stable_order(keys: jax.Array) -> jax.Array:
    """The indices that sort each row of ``keys`` ``(..., m)`` ascending, ties in index order:
    ``jnp.argsort(keys, axis=-1, stable=True)`` (Python's ``sorted``) for keys without NaN.
    Computed from ranks (each entry's count of entries sorting before it: ``m^2`` compares,
    elementwise under ``vmap``): XLA's CPU sort of many rows of a few entries costs about 2.5x
    as much (collect_treasure's observation, 7 entries per row)."""
    m = keys.shape[-1]
    earlier = np.arange(m)[None, :] < np.arange(m)[:, None]  # [j, k]: k comes before j in index order
    before = (keys[..., None, :] < keys[..., :, None]) | (
        (keys[..., None, :] == keys[..., :, None]) & earlier
    )  # [..., j, k]: entry k sorts before entry j
    rank = jnp.sum(before, -1)  # (..., m), a permutation of 0..m-1
    return jnp.sum(jnp.where(rank[..., None, :] == np.arange(m)[:, None], np.arange(m), 0), -1)


def take_slots(values: jax.Array, index: jax.Array) -> jax.Array:
    """``values[i, index[i, s]]`` for ``values`` ``(n, m, d)`` and ``index`` from :func:`nearest`,
    zeros where ``index == m`` (a padded slot)."""
    padded = jnp.pad(values, ((0, 0), (0, 1), (0, 0)))
    return jnp.take_along_axis(padded, index[..., None], 1)


def decode_actions(scenario: Scenario, action: jax.Array, continuous: bool) -> tuple[jax.Array, jax.Array]:
    """The force ``u`` ``(n, 2)`` (before accel) and utterance ``c`` ``(n, C)`` of a joint action.

    Discrete: agent ``i``'s action ``a`` is ``move = a % 5, word = a // 5`` when it moves and
    talks, ``move = a`` when it only moves, ``word = a`` when it only talks; move 1/2 push
    along -x/+x, 3/4 along -y/+y; the word is said one-hot. Continuous (entries clipped to
    [0, 1]): ``u = (a[2] - a[1], a[4] - a[3])`` for agents that move, and the utterance is the
    next ``C`` entries (the first ``C`` for agents that do not move).
    """
    n, dim_c = scenario.num_agents, scenario.dim_c
    movable = np.asarray(scenario.agent_movable)
    if continuous:
        action = jnp.clip(action.astype(jnp.float32), 0.0, 1.0)
        if movable.any():
            u = jnp.stack([action[:, 2] - action[:, 1], action[:, 4] - action[:, 3]], -1)
        else:
            u = jnp.zeros((n, 2), jnp.float32)
        rows = []
        for i in range(n):
            start = MOVE_ACTIONS if scenario.agent_movable[i] else 0
            if scenario.agent_silent[i] or dim_c == 0:
                rows.append(jnp.zeros((dim_c,), jnp.float32))
            else:
                rows.append(action[i, start : start + dim_c])
        comm = jnp.stack(rows) if n else jnp.zeros((0, dim_c), jnp.float32)
        return u, comm
    talks = ~np.asarray(scenario.agent_silent)
    move = jnp.where(movable & talks, action % MOVE_ACTIONS, action)
    word = jnp.where(movable, action // MOVE_ACTIONS, action)
    u = jnp.stack(
        [
            (move == 2).astype(jnp.float32) - (move == 1).astype(jnp.float32),
            (move == 4).astype(jnp.float32) - (move == 3).astype(jnp.float32),
        ],
        -1,
    )
    comm = (word[:, None] == jnp.arange(dim_c)[None, :]).astype(jnp.float32)
    return u, comm


def contact_forces(scenario: Scenario, state: MultiParticleState, params: MultiParticleParams) -> jax.Array:
    """The summed contact force on each agent, ``(n, 2)`` (zero for agents that touch nothing).

    One evaluation per unordered pair of colliding entities of which at least one moves (mpe2
    applies ``+F`` to the first and ``-F`` to the second), not per ordered pair.
    """
    n, num_landmarks = scenario.num_agents, scenario.num_landmarks
    # Entities 0..n-1 are the agents, n.. the landmarks; landmarks never move.
    collide = list(scenario.agent_collide) + list(scenario.landmark_collide)
    movable = list(scenario.agent_movable) + [False] * num_landmarks
    sizes = list(scenario.agent_size) + list(scenario.landmark_size)
    pairs = [
        (a, b)
        for a in range(n + num_landmarks)
        for b in range(a + 1, n + num_landmarks)
        if collide[a] and collide[b] and (movable[a] or movable[b])
    ]
    if not pairs:
        return jnp.zeros((n, 2), jnp.float32)
    pos = state.agent_pos if num_landmarks == 0 else jnp.concatenate([state.agent_pos, state.landmark_pos])
    first, second = np.asarray([a for a, _ in pairs]), np.asarray([b for _, b in pairs])
    # x and y apart: under vmap each is a (batch, pairs) array, which XLA on CPU vectorises well.
    px, py = pos[:, 0], pos[:, 1]
    dx, dy = px[first] - px[second], py[first] - py[second]  # (P,), constant indices
    dist = jnp.sqrt(jnp.square(dx) + jnp.square(dy))
    k = params.contact_margin
    size = np.asarray(sizes, np.float32)
    x = (size[first] + size[second] - dist) / k
    # log(1 + exp(x)), mpe2's logaddexp(0, x). Not log1p: XLA on CPU does not vectorise it, and
    # it cost more than the rest of the step; log(1 + e) differs only where e < 6e-8, a force
    # below 1e-8.
    penetration = (jnp.maximum(x, 0.0) + jnp.log(1.0 + jnp.exp(-jnp.abs(x)))) * k
    scale = params.contact_force * penetration / dist
    fx, fy = dx * scale, dy * scale  # on the first entity of each pair; minus that on the second
    per_agent = []
    for i in range(n):
        plus = [p for p, (a, _) in enumerate(pairs) if a == i and movable[i]]
        minus = [p for p, (_, b) in enumerate(pairs) if b == i and movable[i]]
        if not plus and not minus:
            per_agent.append(jnp.zeros((2,), jnp.float32))
            continue
        total = [
            sum((f[p] for p in plus), jnp.zeros((), jnp.float32))
            - sum((f[p] for p in minus), jnp.zeros((), jnp.float32))
            for f in (fx, fy)
        ]
        per_agent.append(jnp.stack(total))
    return jnp.stack(per_agent)


def world_step(
    scenario: Scenario,
    state: MultiParticleState,
    u: jax.Array,
    comm: jax.Array,
    params: MultiParticleParams,
) -> MultiParticleState:
    """One step of the physics (see the module docs); ``u`` before accel, ``comm`` as decoded."""
    accel = np.asarray([DEFAULT_ACCEL if a is None else a for a in scenario.agent_accel], np.float32)
    movable = np.asarray(scenario.agent_movable)
    force = u * accel[:, None] + contact_forces(scenario, state, params)
    if scenario.agent_mass is not None and any(m != 1.0 for m in scenario.agent_mass):
        force = force / np.asarray(scenario.agent_mass, np.float32)[:, None]
    pos = state.agent_pos + state.agent_vel * params.dt
    vel = state.agent_vel * (1.0 - params.damping) + force * params.dt
    limits = [s for s in scenario.agent_max_speed]
    if any(s is not None for s in limits):
        max_speed = np.asarray([np.inf if s is None else s for s in limits], np.float32)
        speed = norm(vel)
        too_fast = speed > max_speed
        vel = jnp.where(
            too_fast[:, None], vel / jnp.where(too_fast, speed, 1.0)[:, None] * max_speed[:, None], vel
        )
    if not movable.all():
        pos = jnp.where(movable[:, None], pos, state.agent_pos)
        vel = jnp.where(movable[:, None], vel, state.agent_vel)
    silent = np.asarray(scenario.agent_silent)
    if silent.any():
        comm = jnp.where(silent[:, None], 0.0, comm)
    return state.replace(agent_pos=pos, agent_vel=vel, comm=comm, time=state.time + 1)
