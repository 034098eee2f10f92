"""An episode-aware buffer: flashbax's trajectory buffer plus a per-env episode table.

Storage (the choice, and why). Parallel envs step in lockstep, so experience
is a flashbax trajectory buffer: one circular time axis of length ``T`` per env,
``experience`` leaves shaped ``(num_envs, T, ...)``. This keeps flashbax's
``add`` and its state (which :class:`flashbax.vault.Vault` records as is), wastes
no padding on short episodes and needs no episode-slot allocation across envs.
Next to it lives a small episode table, so that any sampled step finds its
episode with two gathers:

* ``episode_id[env, t % T]``: a per-env episode counter for each stored step;
* ``episode_start[env, id % T]`` and ``episode_end[env, id % T]``: absolute time
  of the episode's first and last step (``_RUNNING`` while it has not ended).

Absolute time ``a`` counts steps added per env; step ``a`` lives at ``a % T``.
Episodes with a step still in the buffer have consecutive ids, at most ``T`` of
them, so ``id % T`` never collides between them. Starts are clipped to the oldest
stored step (an episode partly overwritten keeps its remaining steps), and ends
of running episodes to the newest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flashbax
import jax
import jax.numpy as jnp
from flashbax.buffers.trajectory_buffer import TrajectoryBufferState

from lamella.buffers._src import struct
from lamella.buffers._src.n_step import n_step_transition
from lamella.buffers._src.replay import _check_batch, _positive
from lamella.buffers._src.types import NStepTransition, Transition

PRNGKey = jax.Array
_RUNNING = jnp.iinfo(jnp.int32).max


@struct.dataclass
class EpisodeBufferState:
    """State of :func:`make_episode_buffer`.

    Attributes:
        trajectory: flashbax ``TrajectoryBufferState``; ``experience`` is a
            :class:`Transition` with leaves ``(num_envs, T, ...)``. Pass it to
            :func:`lamella.buffers.record` to write it to a Vault.
        episode_id: int32 ``(num_envs, T)``: per-env episode counter of each stored step.
        episode_start: int32 ``(num_envs, T)``: absolute time of the first step of
            episode ``id``, at ``id % T``.
        episode_end: int32 ``(num_envs, T)``: absolute time of its last step, at
            ``id % T``; int32 max while the episode runs.
        current_episode: int32 ``(num_envs,)``: id of the latest step's episode (-1 at first).
        episode_over: bool ``(num_envs,)``: the latest step ended its episode.
        steps_added: int32 ``()``: steps added per env so far (absolute time of the next step);
            absolute times are int32, so one buffer holds up to 2**31 - 1 steps per env over its life.
    """

    trajectory: TrajectoryBufferState
    episode_id: jax.Array
    episode_start: jax.Array
    episode_end: jax.Array
    current_episode: jax.Array
    episode_over: jax.Array
    steps_added: jax.Array


@dataclasses.dataclass(frozen=True)
class EpisodeBuffer:
    """Pure functions of an episode-aware buffer; see :func:`make_episode_buffer`.

    Attributes:
        num_envs: envs added in lockstep.
        max_length_time_axis: ``T``, steps kept per env.
        sample_batch_size: transitions per ``sample``.
        min_length_time_axis: steps per env before ``can_sample`` is True.
        init: ``init(example_transition) -> state``.
        add: ``add(state, transitions) -> state``; leaves ``(num_envs, steps, ...)``.
        sample: ``sample(state, key) -> Transition`` of ``sample_batch_size``
            transitions drawn uniformly from every stored step.
        can_sample: ``can_sample(state) -> bool array``.
    """

    num_envs: int
    max_length_time_axis: int
    sample_batch_size: int
    min_length_time_axis: int
    init: Callable[[Transition], EpisodeBufferState]
    add: Callable[[EpisodeBufferState, Transition], EpisodeBufferState]
    sample: Callable[[EpisodeBufferState, PRNGKey], Transition]
    can_sample: Callable[[EpisodeBufferState], jax.Array]


@struct.dataclass
class EpisodeBatch:
    """Whole episodes, padded to a fixed length.

    Attributes:
        transition: :class:`Transition` with leaves ``(batch, max_episode_length, ...)``;
            zeros where ``mask`` is False.
        mask: bool ``(batch, max_episode_length)``: True on the episode's steps.
        length: int32 ``(batch,)``: number of True entries of ``mask`` (episodes longer
            than ``max_episode_length`` keep their first steps).
        env_index: int32 ``(batch,)``: env the episode came from.
        start: int32 ``(batch,)``: absolute time of its first step.
    """

    transition: Transition
    mask: jax.Array
    length: jax.Array
    env_index: jax.Array
    start: jax.Array


def _done(transition: Transition, lead: int) -> jax.Array:
    """Episode-over flags with the leading ``lead`` axes; an agent axis is reduced with all()."""
    done = jnp.logical_or(transition.terminated, transition.truncated)
    if done.ndim > lead:
        done = jnp.all(done.reshape((*done.shape[:lead], -1)), axis=-1)
    return done


def make_episode_buffer(
    num_envs: int,
    max_length_time_axis: int,
    sample_batch_size: int,
    min_length_time_axis: int = 1,
) -> EpisodeBuffer:
    """A replay buffer of ``num_envs`` parallel time series that knows its episodes.

    Episode boundaries come from the done flags (``terminated | truncated``) of
    the added transitions; the episodes of each env are contiguous in time. Use it
    with :func:`make_n_step_sampler`, :func:`make_episode_sampler` and
    :func:`lamella.buffers.make_her_sampler`; its own ``sample`` draws single
    transitions uniformly.

    Args:
        num_envs: envs added in lockstep: every ``add`` has leading axes ``(num_envs, steps)``.
        max_length_time_axis: ``T``, steps kept per env (capacity ``num_envs * T``).
        sample_batch_size: transitions per ``sample`` (samplers may override it).
        min_length_time_axis: steps per env before ``can_sample`` is True.

    Returns:
        An :class:`EpisodeBuffer`. Jit ``add`` with ``donate_argnums=0`` to update
        the state in place.
    """
    owner = "make_episode_buffer"
    for name, value in [
        ("num_envs", num_envs),
        ("max_length_time_axis", max_length_time_axis),
        ("sample_batch_size", sample_batch_size),
        ("min_length_time_axis", min_length_time_axis),
    ]:
        _positive(name, value, owner)
    if min_length_time_axis > max_length_time_axis:
        raise ValueError(
            f"{owner}: min_length_time_axis ({min_length_time_axis}) must be <= "
            f"max_length_time_axis ({max_length_time_axis})."
        )
    T = max_length_time_axis
    core = flashbax.make_trajectory_buffer(
        add_batch_size=num_envs,
        sample_batch_size=sample_batch_size,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=min_length_time_axis,
        max_length_time_axis=T,
    )

    def init(example: Transition) -> EpisodeBufferState:
        if not isinstance(example, Transition):
            raise TypeError(
                f"{owner}: init needs one unbatched lamella.buffers.Transition, got {type(example).__name__}; "
                "build one with lamella.buffers.transition_like(obs, action)."
            )
        # Separate arrays: aliased leaves could not be donated to a jitted add.
        return EpisodeBufferState(
            trajectory=core.init(example),
            episode_id=jnp.zeros((num_envs, T), jnp.int32),
            episode_start=jnp.zeros((num_envs, T), jnp.int32),
            episode_end=jnp.full((num_envs, T), _RUNNING, jnp.int32),
            current_episode=jnp.full((num_envs,), -1, jnp.int32),
            episode_over=jnp.ones((num_envs,), jnp.bool_),
            steps_added=jnp.zeros((), jnp.int32),
        )

    def add(state: EpisodeBufferState, batch: Transition) -> EpisodeBufferState:
        if not isinstance(batch, Transition):
            raise TypeError(f"{owner}: add needs a lamella.buffers.Transition, got {type(batch).__name__}.")
        prefix = batch.reward.shape[:2]
        if len(prefix) != 2 or prefix[0] != num_envs or not 1 <= prefix[1] <= T:
            raise ValueError(
                f"{owner}: add needs leaves with leading axes (num_envs={num_envs}, steps) and "
                f"1 <= steps <= {T}; reward has shape {batch.reward.shape}. For one step per env, "
                "add a time axis: jax.tree.map(lambda x: x[:, None], transition)."
            )
        _check_batch(state.trajectory.experience, batch, ("num_envs", "steps"), owner)
        steps = prefix[1]
        done = _done(batch, 2)  # (num_envs, steps)
        envs = jnp.arange(num_envs)

        def one_step(carry, inputs):
            current, over, starts, ends = carry
            time, done_t = inputs
            episode = current + over.astype(jnp.int32)
            slot = episode % T
            starts = starts.at[envs, slot].set(jnp.where(over, time, starts[envs, slot]))
            ends = ends.at[envs, slot].set(
                jnp.where(done_t, time, jnp.where(over, _RUNNING, ends[envs, slot]))
            )
            return (episode, done_t, starts, ends), episode

        times = state.steps_added + jnp.arange(steps, dtype=jnp.int32)
        (current, over, starts, ends), ids = jax.lax.scan(
            one_step,
            (state.current_episode, state.episode_over, state.episode_start, state.episode_end),
            (times, done.T),
        )
        return EpisodeBufferState(
            trajectory=core.add(state.trajectory, batch),
            episode_id=state.episode_id.at[:, times % T].set(ids.T),
            episode_start=starts,
            episode_end=ends,
            current_episode=current,
            episode_over=over,
            steps_added=state.steps_added + steps,
        )

    def sample(state: EpisodeBufferState, key: PRNGKey) -> Transition:
        env, time = _sample_steps(state, key, sample_batch_size, num_envs, T)
        return _gather(state.trajectory.experience, env, time, T)

    def can_sample(state: EpisodeBufferState) -> jax.Array:
        return state.steps_added >= min_length_time_axis

    return EpisodeBuffer(
        num_envs=num_envs,
        max_length_time_axis=T,
        sample_batch_size=sample_batch_size,
        min_length_time_axis=min_length_time_axis,
        init=init,
        add=add,
        sample=sample,
        can_sample=can_sample,
    )


# Helpers shared by the samplers (all shapes static; everything gathers). ----------------


def _oldest(state: EpisodeBufferState, T: int) -> jax.Array:
    return jnp.maximum(state.steps_added - T, 0)


def _sample_steps(
    state: EpisodeBufferState, key: PRNGKey, batch: int, num_envs: int, T: int
) -> tuple[jax.Array, jax.Array]:
    """Uniform (env, absolute time) pairs over every stored step."""
    key_env, key_time = jax.random.split(key)
    env = jax.random.randint(key_env, (batch,), 0, num_envs)
    time = jax.random.randint(key_time, (batch,), _oldest(state, T), state.steps_added)
    return env, time


def _gather(tree: Any, env: jax.Array, time: jax.Array, T: int) -> Any:
    """``tree[env, time % T]`` for leaves ``(num_envs, T, ...)``; ``time`` may have extra axes."""
    env = env.reshape(env.shape + (1,) * (time.ndim - env.ndim))
    # One index into the flattened (num_envs * T) axis: a 1-D gather, measured faster on CPU than a 2-D one.
    flat = env * T + time % T
    return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:]))[flat], tree)


def _episode_bounds(
    state: EpisodeBufferState, env: jax.Array, time: jax.Array, T: int
) -> tuple[jax.Array, jax.Array]:
    """First and last stored absolute time of the episode containing step (env, time)."""
    slot = _gather(state.episode_id, env, time, T) % T
    start = jnp.maximum(_gather(state.episode_start, env, slot, T), _oldest(state, T))
    end = jnp.minimum(_gather(state.episode_end, env, slot, T), state.steps_added - 1)
    return start, end


def _batch_size(batch_size: int | None, buffer: EpisodeBuffer, owner: str) -> int:
    if not isinstance(buffer, EpisodeBuffer):
        raise TypeError(
            f"{owner}: needs a buffer from lamella.buffers.make_episode_buffer, got {type(buffer).__name__}."
        )
    batch_size = buffer.sample_batch_size if batch_size is None else batch_size
    _positive("batch_size", batch_size, owner)
    return batch_size


def make_n_step_sampler(
    buffer: EpisodeBuffer, n: int, gamma: float | jax.Array, batch_size: int | None = None
) -> Callable[[EpisodeBufferState, PRNGKey], NStepTransition]:
    """Sample n-step transitions that respect episode boundaries.

    Starts ``t`` are uniform over every stored step. From ``t``, up to ``n``
    rewards are summed with discount, stopping at the first step that ends the
    episode (terminated: ``discount = 0``; truncated: bootstrap from that step's
    ``next_obs`` with ``gamma^k``) or at the newest stored step (bootstrap from
    its ``next_obs``: it is a real successor, so this is exact). See
    :func:`lamella.buffers.n_step_transition` for the rules.

    Args:
        buffer: from :func:`make_episode_buffer`.
        n: the largest number of rewards summed.
        gamma: discount factor (a number, or a traced scalar inside a compiled program).
        batch_size: transitions per call (default the buffer's ``sample_batch_size``).

    Returns:
        ``sample(state, key) -> NStepTransition`` with leading axis ``batch_size``.
    """
    owner = "make_n_step_sampler"
    batch_size = _batch_size(batch_size, buffer, owner)
    _positive("n", n, owner)
    if n > buffer.max_length_time_axis:
        raise ValueError(f"{owner}: n ({n}) must be <= max_length_time_axis ({buffer.max_length_time_axis}).")
    try:
        number: float | None = float(gamma)
    except jax.errors.ConcretizationTypeError:  # traced: a sweep's gamma, checked by its caller
        number = None
    if number is not None and not 0.0 <= number <= 1.0:
        raise ValueError(f"{owner}: gamma must be in [0, 1], got {gamma}.")
    T, num_envs = buffer.max_length_time_axis, buffer.num_envs

    def sample(state: EpisodeBufferState, key: PRNGKey) -> NStepTransition:
        env, time = _sample_steps(state, key, batch_size, num_envs, T)
        window = time[:, None] + jnp.arange(n)
        valid = window < state.steps_added
        sequence = _gather(state.trajectory.experience, env, jnp.minimum(window, state.steps_added - 1), T)
        return jax.vmap(n_step_transition, in_axes=(0, None, 0))(sequence, gamma, valid)

    return sample


def make_episode_sampler(
    buffer: EpisodeBuffer,
    max_episode_length: int,
    batch_size: int | None = None,
    complete_only: bool = True,
) -> Callable[[EpisodeBufferState, PRNGKey], EpisodeBatch]:
    """Sample whole episodes, uniformly over episodes, padded with a mask.

    An episode is eligible when its first step is still stored and (with
    ``complete_only``) it has ended. Choosing among them costs one cumulative sum
    over the ``num_envs * T`` stored steps per call, then a binary search per
    sampled episode. With no eligible episode the mask is all False.

    Args:
        buffer: from :func:`make_episode_buffer`.
        max_episode_length: ``L``, the padded length; longer episodes keep their
            first ``L`` steps.
        batch_size: episodes per call (default the buffer's ``sample_batch_size``).
        complete_only: skip episodes still running.

    Returns:
        ``sample(state, key) -> EpisodeBatch``.
    """
    owner = "make_episode_sampler"
    batch_size = _batch_size(batch_size, buffer, owner)
    _positive("max_episode_length", max_episode_length, owner)
    T, num_envs = buffer.max_length_time_axis, buffer.num_envs

    def sample(state: EpisodeBufferState, key: PRNGKey) -> EpisodeBatch:
        # Absolute time of each physical slot, and whether it holds the first step of a stored episode.
        slot = jnp.arange(T)
        time = state.steps_added - 1 - jnp.mod(state.steps_added - 1 - slot, T)
        stored = (time >= 0) & (time >= _oldest(state, T))
        episode_slot = state.episode_id % T
        rows = jnp.arange(num_envs)[:, None]
        eligible = stored[None, :] & (state.episode_start[rows, episode_slot] == time[None, :])
        if complete_only:
            eligible &= state.episode_end[rows, episode_slot] != _RUNNING
        counts = jnp.cumsum(eligible.reshape(-1).astype(jnp.int32))
        total = counts[-1]
        pick = jax.random.randint(key, (batch_size,), 0, jnp.maximum(total, 1))
        flat = jnp.minimum(jnp.searchsorted(counts, pick, side="right"), num_envs * T - 1)
        env, start = flat // T, time[flat % T]
        _, end = _episode_bounds(state, env, start, T)
        length = jnp.where(total > 0, jnp.minimum(end - start + 1, max_episode_length), 0)
        steps = jnp.arange(max_episode_length)
        mask = steps[None, :] < length[:, None]
        window = jnp.minimum(start[:, None] + steps, state.steps_added - 1)
        episodes = _gather(state.trajectory.experience, env, window, T)
        episodes = jax.tree.map(
            lambda x: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 2)), x, jnp.zeros_like(x)),
            episodes,
        )
        return EpisodeBatch(
            transition=episodes,
            mask=mask,
            length=length.astype(jnp.int32),
            env_index=env.astype(jnp.int32),
            start=start.astype(jnp.int32),
        )

    return sample
