"""Recording experience to disk and reading it back, with flashbax's Vault.

A Vault stores the time series of a flashbax trajectory buffer (leaves
``(num_envs, time, ...)``) in tensorstore/zarr files and grows along time. The
compiled loop fills a buffer on device; the host driver calls :func:`record`
between compiled chunks. Vault only sees the circular buffer, so call
:func:`record` at least every ``max_length_time_axis - 1`` steps or older steps are
overwritten before they reach the disk.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
from flashbax.vault import Vault

from lamella.buffers._src.episodes import EpisodeBuffer, EpisodeBufferState
from lamella.buffers._src.types import Transition

__all__ = ["Vault", "load_episode_buffer", "open_vault", "read_vault", "record", "write_experience"]


def _trajectory_state(state: Any) -> TrajectoryBufferState:
    if isinstance(state, EpisodeBufferState):
        return state.trajectory
    if isinstance(state, TrajectoryBufferState):
        return state
    raise TypeError(
        "lamella.buffers vault: expected an EpisodeBufferState or a flashbax trajectory/flat/item "
        f"buffer state, got {type(state).__name__}."
    )


def open_vault(
    directory: str | os.PathLike[str],
    name: str,
    uid: str = "0",
    buffer_state: Any = None,
    metadata: dict[str, Any] | None = None,
    compression: dict[str, Any] | None = None,
    experience: Any = None,
) -> Vault:
    """Create the vault ``directory/name/uid``, or open it if it exists.

    Args:
        directory: folder of vaults (made absolute; flashbax otherwise resolves
            it against the current working directory).
        name: vault name.
        uid: run identifier inside the vault (flashbax defaults to a timestamp;
            here a fixed default so the path is predictable).
        buffer_state: a buffer state whose structure the vault records; needed to
            create a vault, and, when opening, to read back the same pytree types
            (without it, :func:`read_vault` returns nested dicts).
        metadata: JSON-able extra metadata to store at creation.
        compression: tensorstore compressor spec (default gzip level 5).
        experience: instead of ``buffer_state``, an example of the experience itself (leaves
            ``(batch, time, ...)``; only the batch size, the trailing shapes and the dtypes count),
            as :func:`write_experience` writes it.

    Returns:
        A :class:`flashbax.vault.Vault`.
    """
    structure = experience if buffer_state is None else _trajectory_state(buffer_state).experience
    return _open(directory, name, uid, structure, metadata, compression)


def _open(
    directory: str | os.PathLike[str],
    name: str,
    uid: str,
    structure: Any,
    metadata: dict[str, Any] | None = None,
    compression: dict[str, Any] | None = None,
) -> Vault:
    """Open ``directory/name/uid``, or create it from ``structure`` (leaves ``(batch, time, ...)``).

    A new vault is built in a temporary folder beside its place and renamed into it, so a
    process killed while creating one leaves no half-written vault behind (only a
    ``.tmp-*`` folder, removed by the next creation of the same vault).
    """
    root = os.path.abspath(os.fspath(directory))
    path = os.path.join(root, name, uid)
    quiet = contextlib.redirect_stdout(io.StringIO())  # flashbax prints on every open
    if os.path.exists(path):
        with quiet:
            return Vault(vault_name=name, experience_structure=structure, rel_dir=root, vault_uid=uid)
    if structure is None:
        raise FileNotFoundError(f"open_vault: no vault at {path}; pass buffer_state= to create one.")
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for stale in os.listdir(os.path.join(root, name)):
        if stale.startswith(f".tmp-{uid}-"):
            shutil.rmtree(os.path.join(root, name, stale), ignore_errors=True)
    temporary = f".tmp-{uid}-{os.getpid()}"
    with quiet:
        Vault(
            vault_name=name,
            experience_structure=structure,
            rel_dir=root,
            vault_uid=temporary,
            compression=compression,
            metadata=metadata,
        )
    os.replace(os.path.join(root, name, temporary), path)
    with quiet:
        return Vault(vault_name=name, experience_structure=structure, rel_dir=root, vault_uid=uid)


def record(vault: Vault, buffer_state: Any) -> int:
    """Append the steps added to ``buffer_state`` since the last call; returns how many.

    Host-side (it reads ``current_index``): call it between compiled chunks.
    """
    trajectory = jax.device_get(_trajectory_state(buffer_state))
    return int(vault.write(trajectory))


def write_experience(vault: Vault, experience: Any, at: int | None = None) -> int:
    """Write ``experience`` (leaves ``(batch, time, ...)``, host or device arrays) into ``vault``
    at time index ``at`` (default: its end), and make the vault end after it; returns the steps
    written.

    Writing at an index before the end replaces what was recorded from there on: a training run
    resumed from a checkpoint rewrites the steps it recorded after that checkpoint (a resumed
    run recomputes them exactly). The data is written first and the vault's length last, so a
    process killed during the call leaves a readable vault of the previous length.

    Raises:
        ValueError: ``at`` is past the end of the vault (a gap in the time series), or the
            leaves disagree on the time axis.
    """
    leaves = jax.tree.leaves(experience)
    steps = {int(np.shape(x)[1]) for x in leaves}
    if len(steps) != 1:
        raise ValueError(
            f"write_experience: leaves of unequal time length {sorted(steps)}; expected (batch, time, ...)."
        )
    (length,) = steps
    start = vault.vault_index if at is None else int(at)
    if not 0 <= start <= vault.vault_index:
        raise ValueError(
            f"write_experience: at={start} is outside the vault's {vault.vault_index} recorded steps; "
            "a vault is written without gaps."
        )
    if length == 0:
        return 0
    state = TrajectoryBufferState(
        experience=jax.device_get(experience),
        current_index=jnp.asarray(length, jnp.int32),
        is_full=jnp.asarray(False),
    )
    vault.vault_index = start  # write() stores start + length as the new end
    return int(vault.write(state, source_interval=(0, length), dest_start=start))


def read_vault(vault: Vault, timesteps: int | None = None) -> Any:
    """The recorded experience, leaves ``(num_envs, time, ...)`` (the last ``timesteps`` if given)."""
    return vault.read(timesteps=timesteps).experience


def load_episode_buffer(buffer: EpisodeBuffer, experience: Any) -> EpisodeBufferState:
    """An episode buffer state holding recorded experience (the newest ``T`` steps per env).

    For offline RL: read a vault with :func:`read_vault`, then sample it with the
    n-step, episode or HER samplers. The episode table is rebuilt from the done flags.
    """
    if not isinstance(experience, Transition):
        raise TypeError(
            "load_episode_buffer: experience must be a Transition; open the vault with "
            "buffer_state= so read_vault returns Transition instead of dicts."
        )
    steps = experience.reward.shape[1]
    keep = min(steps, buffer.max_length_time_axis)
    recent = jax.tree.map(lambda x: x[:, steps - keep :], experience)
    example = jax.tree.map(lambda x: x[0, 0], experience)
    return buffer.add(buffer.init(example), recent)
