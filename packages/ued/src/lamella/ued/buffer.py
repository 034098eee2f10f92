"""The prioritised level replay (PLR) buffer, as a pytree and pure functions.

Built once from its static settings, used inside compiled code::

    buffer = make_level_buffer(capacity=4000, levels_equal=maze.levels_equal,
                               prioritization="rank", temperature=0.3, staleness_coef=0.3,
                               replay_prob=0.5, min_fill_ratio=0.5)
    state = buffer.init(example_level)
    replay = buffer.should_replay(state, key)                       # bool ()
    state, slots, levels = buffer.sample(state, key, 32)            # 32 replayed levels
    state = buffer.update(state, slots, scores, best_returns)        # after replaying them
    state, slots = buffer.insert(state, new_levels, scores, best_returns)  # new levels

The replay distribution (Jiang et al. 2021) over the filled slots is
``P = (1 - staleness_coef) * P_score + staleness_coef * P_staleness``:

- ``rank``: ``h_i = 1 / rank_i`` (rank 1 = highest score; ties by slot), ``P_score ∝ h_i ** (1 / temperature)``;
- ``proportional``: ``P_score ∝ max(score_i, 0) ** (1 / temperature)`` (uniform if all are 0;
  computed on scores divided by the top one, so no power overflows or underflows float32);
- ``P_staleness ∝ staleness_i``, where a level's staleness is the number of levels handed to the
  student (replayed or new) since it was last replayed or inserted; ``P_score`` if all are 0.

Replayed levels are drawn one after another (a drawn level's staleness drops to 0 before the
next draw, as minimax and JaxUED do). A batch of new levels is inserted one level at a time: a
level equal to one in the buffer (``levels_equal``) updates that entry instead of taking a slot
(this also catches duplicates within a batch); otherwise it takes the next empty slot, or, once
the buffer is full, replaces the level with the lowest replay probability if its score is
strictly higher. Levels without a score (``-inf``: no episode completed) are not inserted, nor
are levels whose score is NaN or ``+inf``; a NaN best return counts as none (``-inf``).

**Differences from minimax** (``util/rl/plr.py`` at v0.2.0), on purpose:

- a new level starts with staleness 0; in minimax it inherits the staleness of the level it
  evicts (its ``update`` never resets ``ages``);
- ``best_return`` is the running best return ever seen on the level (what MaxMC needs); minimax
  stores the latest rollout's best return, so a level's ``R_max`` can go down;
- a replayed level whose rollout completed no episode keeps its old score (minimax overwrites it
  with the "ignore" value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from lamella.agents.config import is_swept
from lamella.envs import random as fast_random

__all__ = ["LevelBuffer", "LevelBufferState", "make_level_buffer"]

PRIORITIZATIONS = ("rank", "proportional")


class LevelBufferState(struct.PyTreeNode):
    """The level buffer's contents (``capacity`` slots, filled in order, never emptied).

    Attributes:
        levels: the levels, a pytree with leading axis ``capacity``.
        scores: float32 ``(capacity,)``: each level's latest score.
        best_returns: float32 ``(capacity,)``: the best return seen on each level (``-inf``: none).
        last_seen: int32 ``(capacity,)``: ``clock`` when the level was last replayed or inserted.
        num_edits: int32 ``(capacity,)``: edits from a DR level to this one (ACCEL; 0 for DR levels).
        size: int32 ``()``: filled slots (slots ``0 .. size - 1``).
        clock: int32 ``()``: levels handed to the student so far (replayed and new).
    """

    levels: Any
    scores: jax.Array
    best_returns: jax.Array
    last_seen: jax.Array
    num_edits: jax.Array
    size: jax.Array
    clock: jax.Array

    @property
    def capacity(self) -> int:
        return int(self.scores.shape[-1])

    @property
    def filled(self) -> jax.Array:
        """bool ``(capacity,)``: the slot holds a level."""
        return jnp.arange(self.scores.shape[-1]) < self.size

    @property
    def staleness(self) -> jax.Array:
        """int32 ``(capacity,)``: levels handed out since each was last seen (0 for empty slots)."""
        return jnp.where(self.filled, self.clock - self.last_seen, 0)


class LevelBuffer(NamedTuple):
    """A PLR level buffer's pure functions (see the module docs).

    Attributes:
        init: ``init(example_level) -> state``: an empty buffer for levels shaped like this one.
        replay_distribution: ``replay_distribution(state) -> float32 (capacity,)``.
        should_replay: ``should_replay(state, key) -> bool ()``: one Bernoulli(``replay_prob``)
            draw, False until the buffer is ``min_fill_ratio`` full.
        sample: ``sample(state, key, num) -> (state, slots, levels)``: ``num`` levels drawn one
            after another; their staleness is reset.
        update: ``update(state, slots, scores, best_returns, mask=None) -> state``: new scores of
            replayed levels (``best_returns`` are maxed in, NaN ignored; a non-finite score keeps
            the old one).
        insert: ``insert(state, levels, scores, best_returns, num_edits=None, mask=None) ->
            (state, slots)``: new levels; ``slots`` is where each went, -1 if it was not kept.
        capacity, prioritization, temperature, staleness_coef, replay_prob, min_fill_ratio:
            the settings (a traced scalar where a sweep varies it).

    ``insert`` and ``update`` raise ``ValueError`` when they are traced with arguments that do
    not fit: ``scores``, ``best_returns``, ``num_edits`` and ``mask`` give one value per level
    (per slot), and ``levels`` is a batch of levels of the ``init`` example's structure, shapes
    and dtypes.
    """

    init: Callable[[Any], LevelBufferState]
    replay_distribution: Callable[[LevelBufferState], jax.Array]
    should_replay: Callable[[LevelBufferState, jax.Array], jax.Array]
    sample: Callable[..., tuple[LevelBufferState, jax.Array, Any]]
    update: Callable[..., LevelBufferState]
    insert: Callable[..., tuple[LevelBufferState, jax.Array]]
    capacity: int
    prioritization: str
    temperature: float
    staleness_coef: float
    replay_prob: float
    min_fill_ratio: float


def _default_equal(a: Any, b: Any) -> jax.Array:
    leaves = jax.tree.map(lambda x, y: jnp.all(x == y), a, b)
    return jnp.all(jnp.stack(jax.tree.leaves(leaves)))


def _no_nan(best_returns: jax.Array) -> jax.Array:
    """float32 best returns with NaN as ``-inf`` (none): ``max(best, NaN)`` would be NaN for good,
    and so would the level's MaxMC score."""
    best_returns = jnp.asarray(best_returns, jnp.float32)
    return jnp.where(jnp.isnan(best_returns), -jnp.inf, best_returns)


def make_level_buffer(
    capacity: int,
    *,
    levels_equal: Callable[[Any, Any], jax.Array] | None = _default_equal,
    prioritization: str = "rank",
    temperature: float = 0.3,
    staleness_coef: float = 0.3,
    replay_prob: float = 0.5,
    min_fill_ratio: float = 0.5,
) -> LevelBuffer:
    """A PLR level buffer (see the module docs).

    Args:
        capacity: level slots.
        levels_equal: ``levels_equal(a, b) -> bool ()`` for two levels (the env's comparator);
            the default compares every leaf; ``None`` turns de-duplication off.
        prioritization: ``"rank"`` or ``"proportional"`` (scores must be >= 0: not MaxMC).
        temperature: ``beta`` of ``h ** (1 / beta)``, > 0.
        staleness_coef: ``rho`` in ``[0, 1]``, the weight of staleness.
        replay_prob: probability of a replay update once the buffer is warm, in ``[0, 1]``.
        min_fill_ratio: fraction of ``capacity`` filled before replay starts, in ``[0, 1]``.

    Raises:
        ValueError: a setting out of range, naming it and its range.
    """
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"make_level_buffer: capacity must be >= 1, got {capacity}.")
    if prioritization not in PRIORITIZATIONS:
        raise ValueError(
            f"make_level_buffer: prioritization must be one of {PRIORITIZATIONS}, got {prioritization!r}."
        )
    # A sweep (lamella sweep) traces the numbers it varies: each value was checked here once as a
    # plain number, and the traced ones reach the buffer's arithmetic only.
    if not is_swept(temperature) and not float(temperature) > 0:
        raise ValueError(f"make_level_buffer: temperature must be > 0, got {temperature}.")
    for name, value in (
        ("staleness_coef", staleness_coef),
        ("replay_prob", replay_prob),
        ("min_fill_ratio", min_fill_ratio),
    ):
        if not is_swept(value) and not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"make_level_buffer: {name} must be in [0, 1], got {value}.")
    # The filled slots replay waits for: the ratio times the capacity, rounded half to even, at
    # least 1. A traced ratio (a sweep's) is a traced count, compared with the buffer's size; both
    # ways compute in float32, so a sweep's member waits for the count its run alone waits for.
    if is_swept(min_fill_ratio):
        min_size: Any = jnp.maximum(jnp.round(min_fill_ratio * jnp.float32(capacity)).astype(jnp.int32), 1)
    else:
        min_size = max(1, int(np.round(np.float32(min_fill_ratio) * np.float32(capacity))))

    def check_batch(what: str, num: int) -> None:
        if num > capacity:
            raise ValueError(
                f"LevelBuffer.{what}: a batch of {num} levels does not fit a buffer of capacity "
                f"{capacity}; raise the buffer capacity to at least {num} or use fewer envs."
            )

    def check_streams(what: str, reference: str, shape: tuple[int, ...], item: str, **arrays: Any) -> None:
        for name, x in arrays.items():
            if x is not None and jnp.shape(x) != shape:
                raise ValueError(
                    f"LevelBuffer.{what}: {name} has shape {jnp.shape(x)} but {reference} {shape}; give one "
                    f"per {item}."
                )

    def check_levels(state: LevelBufferState, levels: Any, num: int) -> None:
        """The batch fits the stored levels: their structure, each leaf ``(num, *stored)`` and of a
        dtype they hold (a shape error from inside the insertion's scan otherwise; a float level
        stored in int slots would be cut silently)."""
        if str(jax.tree.structure(levels)) != str(jax.tree.structure(state.levels)):
            raise ValueError(
                f"LevelBuffer.insert: levels is a {type(levels).__name__} but the buffer holds "
                f"{type(state.levels).__name__} levels (its init example's structure: "
                f"{jax.tree.structure(state.levels)}); give a batch of levels of that structure."
            )
        stored_leaves = jax.tree.leaves(state.levels)
        for (path, x), stored in zip(
            jax.tree_util.tree_flatten_with_path(levels)[0], stored_leaves, strict=True
        ):
            name = f"levels{jax.tree_util.keystr(path)}"
            if jnp.shape(x) != (num, *stored.shape[1:]):
                raise ValueError(
                    f"LevelBuffer.insert: {name} has shape {jnp.shape(x)}, but the buffer holds {name} of "
                    f"shape {stored.shape[1:]} (its init example's); give a batch of {num} levels (one per "
                    "score), each shaped like the example."
                )
            if not np.can_cast(jnp.result_type(x), stored.dtype, casting="same_kind"):
                raise ValueError(
                    f"LevelBuffer.insert: {name} is {jnp.result_type(x)}, which the buffer's {stored.dtype} "
                    f"{name} cannot hold without changing values; give levels of the init example's dtypes."
                )

    def init(example_level: Any) -> LevelBufferState:
        levels = jax.tree.map(
            lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example_level
        )
        return LevelBufferState(
            levels=levels,
            scores=jnp.full((capacity,), -jnp.inf, jnp.float32),
            best_returns=jnp.full((capacity,), -jnp.inf, jnp.float32),
            last_seen=jnp.zeros((capacity,), jnp.int32),
            num_edits=jnp.zeros((capacity,), jnp.int32),
            size=jnp.zeros((), jnp.int32),
            clock=jnp.zeros((), jnp.int32),
        )

    def score_weights(state: LevelBufferState) -> jax.Array:
        filled = state.filled
        if prioritization == "rank":
            # Rank 1 is the highest score; a stable sort breaks ties by slot.
            keyed = jnp.where(filled, state.scores, -jnp.inf)
            order = jnp.argsort(-keyed, stable=True)
            ranks = (
                jnp.empty((capacity,), jnp.int32).at[order].set(jnp.arange(1, capacity + 1, dtype=jnp.int32))
            )
            weights = (1.0 / ranks.astype(jnp.float32)) ** (1.0 / temperature)
        else:
            # Scaled by the top score before the power: the same distribution, with no float32
            # overflow (inf / inf: NaN) or underflow (every weight 0: the uniform fallback).
            positive = jnp.maximum(jnp.where(filled, state.scores, 0.0), 0.0)
            top = positive.max()
            weights = (positive / jnp.where(top > 0, top, 1.0)) ** (1.0 / temperature)
        weights = jnp.where(filled, weights, 0.0)
        total = weights.sum()
        uniform = filled / jnp.maximum(filled.sum(), 1)
        return jnp.where(total > 0, weights / jnp.where(total > 0, total, 1.0), uniform)

    def replay_distribution(state: LevelBufferState) -> jax.Array:
        p_score = score_weights(state)
        if not is_swept(staleness_coef) and staleness_coef == 0:
            return p_score
        staleness = state.staleness.astype(jnp.float32)
        total = staleness.sum()
        p_stale = jnp.where(total > 0, staleness / jnp.where(total > 0, total, 1.0), p_score)
        return (1.0 - staleness_coef) * p_score + staleness_coef * p_stale

    def should_replay(state: LevelBufferState, key: jax.Array) -> jax.Array:
        warm = state.size >= min_size
        return jnp.logical_and(warm, fast_random.uniform(key, (), stream=2) < replay_prob)

    def sample(state: LevelBufferState, key: jax.Array, num: int) -> tuple[LevelBufferState, jax.Array, Any]:
        check_batch("sample", int(num))

        def draw(state: LevelBufferState, u: jax.Array) -> tuple[LevelBufferState, jax.Array]:
            # Inverse CDF: the first slot whose cumulative probability exceeds u.
            cdf = jnp.cumsum(replay_distribution(state))
            slot = jnp.minimum(jnp.sum(cdf <= u * cdf[-1]), capacity - 1).astype(jnp.int32)
            state = state.replace(
                last_seen=state.last_seen.at[slot].set(state.clock + 1), clock=state.clock + 1
            )
            return state, slot

        # Hashed uniforms (lamella.envs.random): a Threefry draw per level costs more to compile.
        uniforms = fast_random.uniform(key, (int(num),), stream=1, vector=True)
        state, slots = jax.lax.scan(draw, state, uniforms)
        return state, slots, jax.tree.map(lambda x: x[slots], state.levels)

    def update(
        state: LevelBufferState,
        slots: jax.Array,
        scores: jax.Array,
        best_returns: jax.Array,
        mask: jax.Array | None = None,
    ) -> LevelBufferState:
        check_streams(
            "update", "slots", jnp.shape(slots), "slot", scores=scores, best_returns=best_returns, mask=mask
        )
        # A slot of -1 (what insert returns for a level it did not keep) is no slot: -1 would
        # index the last one.
        real = slots >= 0
        ok = jnp.logical_and(jnp.isfinite(scores), real)
        if mask is not None:
            ok = jnp.logical_and(ok, mask)
        # Slots that are not updated write out of range and are dropped.
        target = jnp.where(ok, slots, capacity)
        best_returns = _no_nan(best_returns)
        new_scores = state.scores.at[target].set(scores, mode="drop")
        keep_best = real if mask is None else jnp.logical_and(mask, real)
        best_target = jnp.where(keep_best, slots, capacity)
        new_best = state.best_returns.at[best_target].max(best_returns, mode="drop")
        return state.replace(scores=new_scores, best_returns=new_best)

    def insert(
        state: LevelBufferState,
        levels: Any,
        scores: jax.Array,
        best_returns: jax.Array,
        num_edits: jax.Array | None = None,
        mask: jax.Array | None = None,
    ) -> tuple[LevelBufferState, jax.Array]:
        if jnp.ndim(scores) != 1:
            raise ValueError(
                f"LevelBuffer.insert: scores must be float (num,), one per level, got shape {jnp.shape(scores)}."
            )
        num = int(jnp.shape(scores)[0])
        check_batch("insert", num)
        check_streams(
            "insert", "scores", (num,), "level", best_returns=best_returns, num_edits=num_edits, mask=mask
        )
        check_levels(state, levels, num)
        if num_edits is None:
            num_edits = jnp.zeros((num,), jnp.int32)
        if mask is None:
            mask = jnp.ones((num,), bool)
        # The clock counts every level handed to the student: these were played.
        state = state.replace(clock=state.clock + jnp.sum(mask).astype(jnp.int32))

        def one(state: LevelBufferState, item: tuple[Any, ...]) -> tuple[LevelBufferState, jax.Array]:
            level, score, best, edits, valid = item
            valid = jnp.logical_and(valid, jnp.isfinite(score))
            if levels_equal is not None:
                same = jax.vmap(levels_equal, in_axes=(0, None))(state.levels, level)
                same = jnp.logical_and(same, state.filled)
                duplicate = same.any()
                match = jnp.argmax(same).astype(jnp.int32)
            else:
                duplicate, match = jnp.zeros((), bool), jnp.zeros((), jnp.int32)
            full = state.size >= capacity
            weakest = jnp.argmin(jnp.where(state.filled, replay_distribution(state), jnp.inf)).astype(
                jnp.int32
            )
            slot = jnp.where(full, weakest, state.size)
            replaces = jnp.logical_or(~full, score > state.scores[slot])
            take = valid & ~duplicate & replaces
            refresh = valid & duplicate
            target = jnp.where(take, slot, jnp.where(refresh, match, capacity))
            scores_new = state.scores.at[target].set(score, mode="drop")
            best_new = state.best_returns.at[jnp.where(take, slot, capacity)].set(best, mode="drop")
            best_new = best_new.at[jnp.where(refresh, match, capacity)].max(best, mode="drop")
            new_state = state.replace(
                levels=jax.tree.map(
                    lambda stored, x: stored.at[jnp.where(take, slot, capacity)].set(x, mode="drop"),
                    state.levels,
                    level,
                ),
                scores=scores_new,
                best_returns=best_new,
                last_seen=state.last_seen.at[target].set(state.clock, mode="drop"),
                num_edits=state.num_edits.at[jnp.where(take, slot, capacity)].set(edits, mode="drop"),
                size=jnp.where(take & ~full, state.size + 1, state.size),
            )
            return new_state, jnp.where(take | refresh, target, -1).astype(jnp.int32)

        return jax.lax.scan(
            one,
            state,
            (
                levels,
                jnp.asarray(scores, jnp.float32),
                _no_nan(best_returns),
                jnp.asarray(num_edits, jnp.int32),
                jnp.asarray(mask, bool),
            ),
        )

    return LevelBuffer(
        init=init,
        replay_distribution=replay_distribution,
        should_replay=should_replay,
        sample=sample,
        update=update,
        insert=insert,
        capacity=capacity,
        prioritization=prioritization,
        temperature=temperature if is_swept(temperature) else float(temperature),
        staleness_coef=staleness_coef if is_swept(staleness_coef) else float(staleness_coef),
        replay_prob=replay_prob if is_swept(replay_prob) else float(replay_prob),
        min_fill_ratio=min_fill_ratio if is_swept(min_fill_ratio) else float(min_fill_ratio),
    )
