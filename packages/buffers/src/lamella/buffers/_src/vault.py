"""Recording experience to disk and reading it back, with flashbax's Vault.

A Vault stores the time series of a flashbax trajectory buffer (leaves
``(num_envs, time, ...)``) in tensorstore/zarr files and grows along time. The
compiled loop fills a buffer on device; the host driver calls :func:`record`
between compiled chunks. Vault only sees the circular buffer, so call
:func:`record` at least every ``max_length_time_axis`` steps: older steps are
overwritten before they reach the disk, and :func:`record` refuses to write a
series with a hole in it.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import shutil
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flashbax.buffers.prioritised_trajectory_buffer import PrioritisedTrajectoryBufferState
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

    Raises:
        ValueError: the vault exists and was written with another experience structure than
            ``buffer_state`` / ``experience`` (a field missing or extra, or another dtype, batch
            size or trailing shape); the message lists each difference. Or ``metadata`` uses
            the vault's own keys (``version``, ``structure_shape``, ``structure_dtype``).
        FileNotFoundError: no vault there and no structure to create one; the message names the
            vaults that are there.
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
    for what, part in (("name", name), ("uid", uid)):
        if not isinstance(part, str) or part in ("", ".", "..") or os.sep in part or "/" in part:
            raise ValueError(
                f"open_vault: {what} must be one folder name (not empty, no '/'), got {part!r}; put "
                "parent folders in directory=."
            )
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise TypeError(
                f"open_vault: metadata must be a dict of JSON-able values, got {type(metadata).__name__}."
            )
        for key in _VAULT_KEYS & metadata.keys():
            # flashbax merges metadata over its own keys: the vault would be created unreadable.
            raise ValueError(
                f"open_vault: metadata key {key!r} is the vault's own (flashbax stores {sorted(_VAULT_KEYS)} "
                "beside the metadata and would replace it); rename it, e.g. 'run_version'."
            )
    root = os.path.abspath(os.fspath(directory))
    path = os.path.join(root, name, uid)
    quiet = contextlib.redirect_stdout(io.StringIO())  # flashbax prints on every open
    if os.path.exists(path):
        if not os.path.isfile(os.path.join(path, "metadata.json")):
            raise FileExistsError(
                f"open_vault: {path} exists but is not a vault (no metadata.json); remove it, or record "
                "under another directory, name or uid."
            )
        if structure is not None:
            _check_structure(path, structure)
        with quiet:
            return Vault(vault_name=name, experience_structure=structure, rel_dir=root, vault_uid=uid)
    if structure is None:
        raise FileNotFoundError(f"open_vault: no vault at {path}; {_vaults_beside(root, name)}")
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


_VAULT_KEYS = frozenset({"version", "structure_shape", "structure_dtype"})  # flashbax's metadata.json


def _vaults_beside(root: str, name: str) -> str:
    """What to do about a missing vault: the vaults there (a reader's wrong name or uid), or how to create one."""

    def vaults(folder: str) -> list[str]:
        if not os.path.isdir(folder):
            return []
        return sorted(
            entry
            for entry in os.listdir(folder)
            if os.path.isfile(os.path.join(folder, entry, "metadata.json"))
        )

    if uids := vaults(os.path.join(root, name)):
        return f"uids there: {', '.join(map(repr, uids))} (pass uid=); or pass buffer_state= to create it."
    names = sorted(
        entry
        for entry in (os.listdir(root) if os.path.isdir(root) else [])
        if vaults(os.path.join(root, entry))
    )
    if names:
        return (
            f"no vault named {name!r} in {root}; names there: {', '.join(map(repr, names))}; or pass "
            "buffer_state= to create it."
        )
    return "pass buffer_state= to create one."


def _key_name(key: Any) -> str:
    """One step of a pytree path, named as flashbax names a Vault's stored fields."""
    for attribute in ("name", "key", "idx"):  # GetAttrKey, DictKey / FlattenedIndexKey, SequenceKey
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _stored_fields(tree: Any, prefix: str = "") -> dict[str, Any]:
    """The nested dicts of a Vault's metadata, flattened to ``{"obs.observation": value}``."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    fields: dict[str, Any] = {}
    for key, value in tree.items():
        fields.update(_stored_fields(value, f"{prefix}.{key}" if prefix else str(key)))
    return fields


def _check_structure(path: str, structure: Any, owner: str = "open_vault") -> None:
    """Refuse an experience structure other than the one the vault at ``path`` was written with.

    flashbax accepts it and fails later: a KeyError for an extra field, a tensorstore error on
    the first write for another shape or dtype, and a missing field is silently never read.
    Only the batch size, the trailing shapes and the dtypes count, not the time axis.
    """
    try:
        with open(os.path.join(path, "metadata.json")) as file:
            metadata = json.load(file)
        shapes = _stored_fields(metadata["structure_shape"])
        dtypes = _stored_fields(metadata["structure_dtype"])
        found = {name: (tuple(ast.literal_eval(shapes[name])), dtypes[name]) for name in shapes}
    except (OSError, ValueError, KeyError, SyntaxError):
        return  # not a vault flashbax can open either: let it say why
    leaves, _ = jax.tree_util.tree_flatten_with_path(jax.eval_shape(lambda: structure))
    given = {
        ".".join(_key_name(k) for k in key_path): (leaf.shape, leaf.dtype.name) for key_path, leaf in leaves
    }
    problems = [
        f"field {name!r} is in the vault but not in the structure given"
        for name in sorted(found.keys() - given.keys())
    ]
    problems += [
        f"field {name!r} is in the structure given but not in the vault"
        for name in sorted(given.keys() - found.keys())
    ]
    for name in sorted(found.keys() & given.keys()):
        (vault_shape, vault_dtype), (shape, dtype) = found[name], given[name]
        if dtype != vault_dtype:
            problems.append(f"field {name!r} has dtype {dtype} given, {vault_dtype} in the vault")
        if len(shape) < 2 or (shape[0], *shape[2:]) != (vault_shape[0], *vault_shape[2:]):
            problems.append(
                f"field {name!r} has shape {shape} given, {vault_shape} in the vault "
                "(leaves are (batch, time, ...); only the time axis may differ)"
            )
    if problems:
        remedy = (
            "Open it with the structure it was written with (or with neither buffer_state= nor "
            "experience= to read nested dicts), or record this experience under another name or uid."
            if owner == "open_vault"
            else "Write experience of the vault's structure (leaves (batch, time, ...)), or open another "
            "vault for this one."
        )
        raise ValueError(
            f"{owner}: the vault at {path} was written with another experience structure: "
            + "; ".join(problems)
            + f". {remedy}"
        )


# Per Vault object: the buffer slot of the next step to record, and the steps the buffer had added
# per env then (None where a full flashbax state could not say). A new Vault object starts at
# slot 0 and step 0, as flashbax's own write does.
_RECORDED: weakref.WeakKeyDictionary[Vault, tuple[int, int | None]] = weakref.WeakKeyDictionary()


def _steps_added(buffer_state: Any, trajectory: TrajectoryBufferState) -> int | None:
    """Steps added per env over the buffer's life, or None where the state cannot tell.

    Episode and prioritised states count them; a plain flashbax state only until it is full
    (then ``current_index`` gives them modulo the time axis).
    """
    if isinstance(buffer_state, EpisodeBufferState):
        return int(buffer_state.steps_added)
    if isinstance(buffer_state, PrioritisedTrajectoryBufferState):
        return int(buffer_state.running_index)
    return None if bool(trajectory.is_full) else int(trajectory.current_index)


def record(vault: Vault, buffer_state: Any) -> int:
    """Append the steps added to ``buffer_state`` since the last call; returns how many.

    Host-side (it reads ``current_index``): call it between compiled chunks, at least every
    ``T`` steps (``T``: the buffer's time axis, ``max_length_time_axis``; ``max_length`` for
    an item buffer). Up to ``T`` new steps are all written, in order.

    A vault reopened with steps in it (a resumed run) and an episode or prioritised buffer
    state (which count their steps) continues from the vault's step count: the vault is taken
    to hold that buffer's first steps.

    Raises:
        ValueError: more than ``T`` steps were added since the last call (or, for a vault
            just opened, since the buffer started or the vault's last step), so the oldest were overwritten before they
            reached the vault; or the buffer holds fewer steps than at the last call (another
            buffer). Nothing is written then. An episode or prioritised buffer state counts
            its steps, so the check is exact; a plain flashbax state does not, so once it
            has filled up at a previous call, ``T`` or more steps added since cannot be told
            from fewer (``T`` then looks like none): there, record at least every ``T - 1``
            steps, or record an episode buffer.
    """
    trajectory = jax.device_get(_trajectory_state(buffer_state))
    length = int(np.shape(jax.tree.leaves(trajectory.experience)[0])[1])
    index = int(trajectory.current_index)
    now = _steps_added(buffer_state, trajectory)
    held = int(vault.vault_index)
    if vault in _RECORDED:
        start, before = _RECORDED[vault]
    elif held and now is not None:
        # A vault reopened (a resumed run) with a buffer that counts its steps: the vault holds
        # this buffer's first `held` steps, so the new ones follow them.
        start, before = held % length, held
    else:
        start, before = 0, 0
    at_least = ""
    if now is not None and before is not None:
        new = now - before
        if new < 0 and vault not in _RECORDED:
            raise ValueError(
                f"record: the vault at {getattr(vault, '_base_path', 'this path')} already holds {before} steps "
                f"per env, but buffer_state has added {now}: record continues a vault opened again only with "
                "the buffer of the run that recorded it, restored at or after the vault's last step. A new run "
                "records into another uid (or remove the vault); a run resumed from an older step rewrites "
                "the vault from there with write_experience(vault, experience, at=step)."
            )
        if new < 0:
            raise ValueError(
                f"record: buffer_state has added {now} steps per env, fewer than the {before} recorded "
                "from it into this vault: a Vault object records one buffer. To record another "
                "buffer, open the vault again with open_vault."
            )
    elif before is not None:  # a flashbax state full since the last record: at least this many
        new, at_least = length + index - before, "at least "
    else:
        new = (index - start) % length
    if new > length:
        raise ValueError(
            f"record: {at_least}{new} steps per env were added since the last record into this vault "
            f"(or since the buffer started, for a vault just opened), but the buffer keeps only its "
            f"newest {length}: {at_least}{new - length} steps were overwritten and would be missing from "
            f"the vault. Call record at least every {length} steps (e.g. after each compiled chunk of "
            f"at most {length} steps), or give the buffer a longer time axis (max_length_time_axis)."
        )
    written = _write_ring(vault, trajectory, start, new, length)
    _RECORDED[vault] = (index, now)
    return written


def _write_ring(vault: Vault, trajectory: TrajectoryBufferState, start: int, steps: int, length: int) -> int:
    """Write ``steps`` steps of the circular time axis from slot ``start`` on, at the vault's end.

    Explicit intervals rather than flashbax's default (from the last slot it saw to
    ``current_index``), which writes nothing when exactly ``length`` steps were added.
    """
    if steps == 0:
        return 0
    end = start + steps
    if end <= length:
        return int(vault.write(trajectory, source_interval=(start, end)))
    written = vault.write(trajectory, source_interval=(start, length))
    return int(written + vault.write(trajectory, source_interval=(0, end - length)))


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
    # flashbax's Vault keeps its folder in a private attribute; without it, tensorstore still refuses
    # most mismatches (but writes a smaller batch into the first rows, leaving the others stale).
    path = getattr(vault, "_base_path", None)
    if path is not None:
        _check_structure(os.fspath(path), experience, owner="write_experience")
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
    """The recorded experience, leaves ``(num_envs, time, ...)`` (the last ``timesteps`` if given).

    Raises:
        ValueError: ``timesteps`` is negative or more than the vault holds.
        TypeError: ``timesteps`` is not an int.
    """
    if timesteps is not None and (
        isinstance(timesteps, bool | np.bool_) or not isinstance(timesteps, int | np.integer)
    ):
        raise TypeError(f"read_vault: timesteps must be an int or None, got {timesteps!r}.")
    if timesteps is not None and not 0 <= timesteps <= vault.vault_index:
        raise ValueError(
            f"read_vault: timesteps={timesteps} must be in [0, {vault.vault_index}]: the vault holds "
            f"{vault.vault_index} steps per env. Pass timesteps=None to read them all."
        )
    return vault.read(timesteps=timesteps).experience


def load_episode_buffer(buffer: EpisodeBuffer, experience: Any) -> EpisodeBufferState:
    """An episode buffer state holding recorded experience (the newest ``T`` steps per env).

    For offline RL: read a vault with :func:`read_vault`, then sample it with the
    n-step, episode or HER samplers. The episode table is rebuilt from the done flags.
    """
    if not isinstance(experience, Transition):
        fields = f" (fields {sorted(experience)})" if isinstance(experience, dict) else ""
        if isinstance(experience, dict) and {"observations", "actions", "terminals"} <= experience.keys():
            remedy = (
                "this looks like a vault recorded by `lamella train ... --record-vault` (OG-MARL's names), "
                "which holds no next observation per step, so no Transition: read it with "
                "lamella.agents.recording.read_recording or lamella.marl.read_offline."
            )
        else:
            remedy = "open the vault with buffer_state= so read_vault returns Transition instead of dicts."
        raise TypeError(
            f"load_episode_buffer: experience must be a Transition, got {type(experience).__name__}{fields}; "
            + remedy
        )
    steps = experience.reward.shape[1]
    if steps == 0:
        raise ValueError(
            "load_episode_buffer: experience holds no steps (an empty vault?); record some before loading it."
        )
    keep = min(steps, buffer.max_length_time_axis)
    recent = jax.tree.map(lambda x: x[:, steps - keep :], experience)
    example = jax.tree.map(lambda x: x[0, 0], experience)
    return buffer.add(buffer.init(example), recent)
