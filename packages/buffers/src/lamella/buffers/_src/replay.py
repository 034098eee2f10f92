"""Item, flat, trajectory and prioritised buffers: flashbax, configured for lamella.

Each factory checks its arguments once (a clear error naming the fix) and
returns flashbax's own buffer object: ``init(example)``,
``add(state, batch)``, ``sample(state, key)``, ``can_sample(state)`` and, for
prioritised buffers, ``set_priorities(state, indices, priorities)`` (flashbax's,
behind a check of the priorities: see :func:`make_item_buffer`). All are
pure; wrap them in ``jax.jit(..., donate_argnums=0)`` (or run them inside a
compiled loop) so that ``add`` and ``set_priorities`` update the buffer in place
instead of copying it.
"""

from __future__ import annotations

import numbers
from typing import Any

import flashbax
import jax
import numpy as np

__all__ = ["make_flat_buffer", "make_item_buffer", "make_trajectory_buffer"]


def _positive(name: str, value: int, owner: str) -> None:
    # numbers.Integral: NumPy integers (from a config or np.arange sweep) are ints too.
    if not isinstance(value, numbers.Integral) or isinstance(value, bool | np.bool_) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}.")


def _check_batch(experience: Any, batch: Any, axes: tuple[str, ...], owner: str) -> None:
    """Refuse a batch for ``add`` unlike the example the buffer was initialised with.

    ``experience`` is the stored pytree (leaves ``(envs, T, ...)``); every leaf of ``batch``
    must be ``axes`` (the same sizes on every leaf) followed by its trailing shape, with its
    dtype. flashbax checks only the first axis and the dtypes, and writes a leaf of another
    trailing shape or time length by broadcasting it: silently wrong experience. Shapes are
    static, so this runs at trace time (free under jit, per buffer under vmap).
    """
    flatten = jax.tree_util.tree_flatten_with_path
    stored = {jax.tree_util.keystr(path): leaf for path, leaf in flatten(experience)[0]}
    given = {jax.tree_util.keystr(path): leaf for path, leaf in flatten(batch)[0]}
    problems = [f"field {name} is missing" for name in stored if name not in given]
    problems += [f"field {name} is not in the example given to init" for name in given if name not in stored]
    prefix = "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"
    leading: tuple[int, ...] | None = None
    for name in (name for name in stored if name in given):
        shape, trailing = tuple(np.shape(given[name])), tuple(stored[name].shape[2:])
        if len(shape) != len(axes) + len(trailing) or shape[len(axes) :] != trailing:
            problems.append(f"field {name} has shape {shape}, expected {prefix} + {trailing}")
        elif leading is None:
            leading = shape[: len(axes)]
        elif shape[: len(axes)] != leading:
            problems.append(f"field {name} has leading axes {shape[: len(axes)]}, other fields {leading}")
        dtype = getattr(given[name], "dtype", None)
        if dtype is not None and dtype != stored[name].dtype:
            problems.append(f"field {name} has dtype {dtype}, expected {stored[name].dtype}")
    if problems:
        raise ValueError(
            f"{owner}: add got a batch unlike the example given to init: "
            + "; ".join(problems[:8])
            + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
            + f". Every leaf must be the example's leaf with leading axes {prefix}; init "
            "takes one unbatched example, e.g. lamella.buffers.transition_like(obs, action) of one step."
        )


def _checked_add(buffer: Any, axes: tuple[str, ...], owner: str) -> Any:
    """flashbax's buffer, its ``add`` behind :func:`_check_batch`."""
    add = buffer.add

    def checked_add(state: Any, batch: Any) -> Any:
        _check_batch(state.experience, batch, axes, owner)
        return add(state, batch)

    return buffer.replace(add=checked_add)


def _made(
    kind: str,
    kwargs: dict[str, Any],
    prioritised: bool,
    priority_exponent: float,
    axes: tuple[str, ...],
    owner: str,
) -> Any:
    """flashbax's ``make_[prioritised_]<kind>_buffer(**kwargs)``, its ``add`` (and
    ``set_priorities``) behind lamella's checks."""
    if not prioritised:
        return _checked_add(getattr(flashbax, f"make_{kind}_buffer")(**kwargs), axes, owner)
    _check_priority_exponent(priority_exponent, owner)
    made = getattr(flashbax, f"make_prioritised_{kind}_buffer")(
        **kwargs, priority_exponent=priority_exponent, device=_priority_device()
    )
    return _checked_add(_checked_set_priorities(made), axes, owner)


def _priority_device() -> str:
    """flashbax picks its sum-tree update for 'cpu', 'gpu' or 'tpu'; use the default backend."""
    backend = jax.default_backend()
    return backend if backend in ("cpu", "gpu", "tpu") else "cpu"


def _check_priority_exponent(priority_exponent: float, owner: str) -> None:
    if not 0.0 <= float(priority_exponent) <= 1.0:
        raise ValueError(f"{owner}: priority_exponent must be in [0, 1], got {priority_exponent}.")


def _check_priorities(indices: Any, priorities: Any) -> None:
    """Refuse priorities that would corrupt flashbax's sum tree.

    A negative, NaN or infinite priority makes the tree's sums meaningless: every later
    ``sample`` returns the same (often never filled) slot with NaN probabilities. The
    shapes are checked always (at trace time, free under jit); the values only when they
    are concrete, i.e. ``set_priorities`` called outside jit. Under jit they are tracers
    and cannot be read without a host callback, so there they are the caller's contract.
    """
    if np.shape(priorities) != np.shape(indices):
        raise ValueError(
            f"set_priorities: priorities have shape {np.shape(priorities)} but indices have shape "
            f"{np.shape(indices)}; pass one priority per index (e.g. the TD errors of the sampled batch "
            "with sample(...).indices)."
        )
    try:
        values = np.asarray(priorities)
    except jax.errors.TracerArrayConversionError:  # traced (under jit): values unknown until run
        return
    bad = ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        where = np.flatnonzero(bad)
        raise ValueError(
            f"set_priorities: priorities must be finite and >= 0, got {where.size} bad value(s) "
            f"(e.g. {values.flat[where[0]]} at position {int(where[0])}); a negative, NaN or infinite "
            "priority corrupts the sum tree and every later sample. Pass jnp.abs(td_error) + 1e-6, "
            "and check the TD errors for NaN (a diverged learner)."
        )


def _checked_set_priorities(buffer: Any) -> Any:
    """flashbax's prioritised buffer, its ``set_priorities`` behind :func:`_check_priorities`."""
    set_priorities = buffer.set_priorities

    def checked_set_priorities(state: Any, indices: Any, priorities: Any) -> Any:
        _check_priorities(indices, priorities)
        return set_priorities(state, indices, priorities)

    return buffer.replace(set_priorities=checked_set_priorities)


def make_item_buffer(
    max_length: int,
    sample_batch_size: int,
    min_length: int | None = None,
    add_batches: bool = False,
    add_sequences: bool = False,
    prioritised: bool = False,
    priority_exponent: float = 0.6,
) -> Any:
    """A replay buffer of independent items, e.g. :class:`~lamella.buffers.Transition`.

    The usual off-policy buffer: a transition already carries its ``next_obs``, so
    items are sampled alone and never straddle an episode boundary.

    Args:
        max_length: capacity in items.
        sample_batch_size: items per ``sample``.
        min_length: items stored before ``can_sample`` is True (default ``sample_batch_size``).
        add_batches: ``add`` receives a leading batch axis (e.g. ``num_envs``).
        add_sequences: ``add`` receives a time axis (after the batch axis, if any).
        prioritised: sample in proportion to priority ** ``priority_exponent``;
            ``sample`` then also returns ``indices`` and ``probabilities`` and the
            buffer has ``set_priorities(state, indices, priorities)``. Priorities must
            be finite and >= 0, one per index: a wrong shape raises ``ValueError`` at
            trace time, and so do negative, NaN or infinite values when they are
            concrete (``set_priorities`` called outside jit). Under jit the values
            cannot be checked: a bad one there corrupts the sum tree (later samples
            return one slot with NaN probabilities), so pass ``jnp.abs(td_error) + eps``.
        priority_exponent: alpha of prioritised replay, in [0, 1].

    Returns:
        flashbax's item buffer (a ``TrajectoryBuffer`` of pure functions).
    """
    owner = "make_item_buffer"
    _positive("max_length", max_length, owner)
    _positive("sample_batch_size", sample_batch_size, owner)
    if sample_batch_size > max_length:
        raise ValueError(
            f"{owner}: sample_batch_size ({sample_batch_size}) must be <= max_length ({max_length}) "
            "(flashbax requires it)."
        )
    min_length = sample_batch_size if min_length is None else min_length
    _positive("min_length", min_length, owner)
    if min_length > max_length:
        raise ValueError(f"{owner}: min_length ({min_length}) must be <= max_length ({max_length}).")
    kwargs = dict(
        max_length=max_length,
        min_length=min_length,
        sample_batch_size=sample_batch_size,
        add_sequences=add_sequences,
        add_batches=add_batches,
    )
    axes = ("batch",) * add_batches + ("time",) * add_sequences
    return _made("item", kwargs, prioritised, priority_exponent, axes, owner)


def make_flat_buffer(
    max_length: int,
    sample_batch_size: int,
    min_length: int | None = None,
    add_batch_size: int | None = None,
    add_sequences: bool = False,
    prioritised: bool = False,
    priority_exponent: float = 0.6,
) -> Any:
    """A buffer of time steps sampled as consecutive pairs ``(first, second)``.

    For experience stored as single time steps (no ``next_obs``): ``sample``
    returns ``experience.first`` and ``experience.second``, the next step of the same
    env. The pair straddles an episode boundary when ``first`` ends an episode,
    so mask with ``first``'s done flag. For lamella :class:`Transition` (which
    carries ``next_obs``) prefer :func:`make_item_buffer`.

    Args:
        max_length: capacity in time steps over all envs; ``max_length //
            add_batch_size`` steps per env must be at least 2.
        sample_batch_size: pairs per ``sample``.
        min_length: steps stored before ``can_sample`` is True (default ``sample_batch_size``).
        add_batch_size: number of envs ``add`` receives at once (None: one env, no batch axis).
        add_sequences: ``add`` receives a time axis after the batch axis.
        prioritised: prioritised replay, as in :func:`make_item_buffer`.
        priority_exponent: alpha of prioritised replay, in [0, 1].

    Returns:
        flashbax's flat buffer.
    """
    owner = "make_flat_buffer"
    _positive("max_length", max_length, owner)
    _positive("sample_batch_size", sample_batch_size, owner)
    min_length = sample_batch_size if min_length is None else min_length
    _positive("min_length", min_length, owner)
    if sample_batch_size > max_length:
        raise ValueError(
            f"{owner}: sample_batch_size ({sample_batch_size}) must be <= max_length ({max_length}) "
            "(flashbax requires it)."
        )
    envs = 1 if add_batch_size is None else add_batch_size
    _positive("add_batch_size", envs, owner)
    if max_length // envs < 2:
        raise ValueError(
            f"{owner}: max_length // add_batch_size = {max_length} // {envs} must be >= 2 "
            "(a pair needs two steps of one env); raise max_length."
        )
    if min_length // envs + 1 > max_length // envs:
        raise ValueError(f"{owner}: min_length ({min_length}) is too large for max_length ({max_length}).")
    kwargs = dict(
        max_length=max_length,
        min_length=min_length,
        sample_batch_size=sample_batch_size,
        add_sequences=add_sequences,
        add_batch_size=add_batch_size,
    )
    axes = ("batch",) * (add_batch_size is not None) + ("time",) * add_sequences
    return _made("flat", kwargs, prioritised, priority_exponent, axes, owner)


def make_trajectory_buffer(
    num_envs: int,
    max_length_time_axis: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int = 1,
    min_length_time_axis: int | None = None,
    prioritised: bool = False,
    priority_exponent: float = 0.6,
) -> Any:
    """A buffer of ``num_envs`` time series, sampled as sub-sequences.

    ``add`` takes a batch with leading axes ``(num_envs, steps)`` that continues
    each env's series; ``sample`` returns ``(sample_batch_size,
    sample_sequence_length)`` windows of consecutive steps of one env (windows may
    cross episode boundaries: use the done flags, or
    :func:`lamella.buffers.n_step_transition`).

    Args:
        num_envs: envs added in lockstep (leading axis of every ``add``).
        max_length_time_axis: steps kept per env (a circular buffer).
        sample_batch_size: windows per ``sample``.
        sample_sequence_length: steps per window.
        period: spacing of the window starts (1: any start).
        min_length_time_axis: steps per env before ``can_sample`` (default the window length).
        prioritised: prioritised replay over windows; with ``period > 1``
            flashbax rounds ``max_length_time_axis`` down to a multiple of ``period``.
        priority_exponent: alpha of prioritised replay, in [0, 1].

    Returns:
        flashbax's trajectory buffer.
    """
    owner = "make_trajectory_buffer"
    for name, value in [
        ("num_envs", num_envs),
        ("max_length_time_axis", max_length_time_axis),
        ("sample_batch_size", sample_batch_size),
        ("sample_sequence_length", sample_sequence_length),
        ("period", period),
    ]:
        _positive(name, value, owner)
    min_length_time_axis = sample_sequence_length if min_length_time_axis is None else min_length_time_axis
    _positive("min_length_time_axis", min_length_time_axis, owner)
    if sample_sequence_length > max_length_time_axis:
        raise ValueError(
            f"{owner}: sample_sequence_length ({sample_sequence_length}) must be <= "
            f"max_length_time_axis ({max_length_time_axis})."
        )
    if min_length_time_axis < sample_sequence_length:
        raise ValueError(
            f"{owner}: min_length_time_axis ({min_length_time_axis}) must be >= "
            f"sample_sequence_length ({sample_sequence_length}): a window needs that many steps."
        )
    if min_length_time_axis > max_length_time_axis:
        raise ValueError(
            f"{owner}: min_length_time_axis ({min_length_time_axis}) must be <= "
            f"max_length_time_axis ({max_length_time_axis})."
        )
    if period > sample_sequence_length:
        raise ValueError(
            f"{owner}: period ({period}) > sample_sequence_length ({sample_sequence_length}) "
            "would leave steps that are never sampled; use period <= sample_sequence_length."
        )
    kwargs = dict(
        add_batch_size=num_envs,
        sample_batch_size=sample_batch_size,
        sample_sequence_length=sample_sequence_length,
        period=period,
        min_length_time_axis=min_length_time_axis,
        max_length_time_axis=max_length_time_axis,
    )
    if prioritised and max_length_time_axis % period:
        _check_priority_exponent(priority_exponent, owner)
        raise ValueError(
            f"{owner}: a prioritised buffer needs max_length_time_axis ({max_length_time_axis}) "
            f"divisible by period ({period})."
        )
    return _made("trajectory", kwargs, prioritised, priority_exponent, ("num_envs", "steps"), owner)
