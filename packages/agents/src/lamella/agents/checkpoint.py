"""Checkpoints: a pytree of arrays plus JSON-like metadata, in a format that runs no code on load.

A checkpoint file is one msgpack map (plain data: maps, lists, strings, numbers, bytes)::

    {"format": "lamella-checkpoint", "format_version": 1,
     "metadata": {...},                       # JSON-compatible: config, iteration, seeds, versions
     "leaves": [{"path": "['params']['w']", "dtype": "float32", "shape": [4, 2],
                 "data": <raw little-endian bytes>, "prng_impl": None}, ...]}

Typed PRNG key arrays are stored as their ``jax.random.key_data`` with ``prng_impl`` naming
the implementation, and come back as typed keys. Loading never unpickles and never imports
anything named in the file. Restoring needs a *target* pytree (for example ``runner.init(key)``
or its ``jax.eval_shape``) that gives the structure; every leaf is checked against it by path,
shape and dtype.

Files are written atomically (temporary file, fsync, rename): a crash while saving leaves
the previous checkpoint intact.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from lamella.agents._files import atomic_write_bytes, remove_temp_files
from lamella.envs.errors import UserError

__all__ = [
    "CheckpointError",
    "checkpoint_file",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "prune_checkpoints",
    "read_metadata",
    "remove_stale_temp_files",
    "save_checkpoint",
]

FORMAT = "lamella-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"checkpoint_(\d+)\.msgpack$")


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be read, or does not fit the target structure."""


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _encode_leaf(path: str, leaf: Any) -> dict[str, Any]:
    prng_impl = None
    if _is_key(leaf):
        prng_impl = str(jax.random.key_impl(leaf))
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)  # tobytes() below is C order whatever the layout
    if sys.byteorder != "little":  # files are little-endian everywhere
        array = array.byteswap()
    return {
        "path": path,
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "data": array.tobytes(),
        "prng_impl": prng_impl,
    }


def _decode_leaf(entry: Mapping[str, Any]) -> np.ndarray:
    dtype = jnp.dtype(entry["dtype"])
    shape = tuple(entry["shape"])
    array = np.frombuffer(entry["data"], dtype=dtype)
    if sys.byteorder != "little":
        array = array.byteswap()
    if array.size != int(np.prod(shape, dtype=np.int64)):
        raise CheckpointError(f"Leaf {entry['path']}: {array.size} values stored for shape {shape}.")
    return array.reshape(shape).copy()


def save_checkpoint(
    directory: str | os.PathLike[str],
    state: Any,
    metadata: Mapping[str, Any],
    *,
    step: int,
    keep: int | None = 3,
) -> str:
    """Write ``state`` (a pytree of arrays) and ``metadata`` to ``directory/checkpoint_<step>.msgpack``.

    Args:
        directory: folder of the checkpoints (created if missing).
        state: pytree whose leaves are arrays (numeric or typed PRNG keys).
        metadata: JSON-compatible data stored beside the arrays (config, iteration, seeds, ...).
        step: a non-negative integer in the file name (usually the training iteration).
        keep: keep this many newest checkpoints in ``directory`` and delete older ones
            (None keeps all).

    Returns:
        The path written.
    """
    if step < 0:
        raise ValueError(f"save_checkpoint: step must be >= 0, got {step}.")
    if keep is not None and keep < 1:
        raise ValueError(f"save_checkpoint: keep must be >= 1 or None, got {keep}.")
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(state)
    leaves = []
    for key_path, leaf in leaves_with_paths:
        if not hasattr(leaf, "dtype"):
            raise TypeError(
                f"save_checkpoint: leaf {jax.tree_util.keystr(key_path)} is {type(leaf).__name__}, not an array; "
                "the state must be a pytree of arrays."
            )
        leaves.append(_encode_leaf(jax.tree_util.keystr(key_path), leaf))
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "metadata": dict(metadata),
        "leaves": leaves,
    }
    data = msgpack.packb(payload, use_bin_type=True)
    directory = os.fspath(directory)
    path = checkpoint_file(directory, step)
    atomic_write_bytes(path, data)
    prune_checkpoints(directory, keep)
    return path


def checkpoint_file(directory: str | os.PathLike[str], step: int) -> str:
    """The path :func:`save_checkpoint` writes for ``step``: ``directory/checkpoint_<step>.msgpack``."""
    return os.path.join(os.fspath(directory), f"checkpoint_{step:09d}.msgpack")


def prune_checkpoints(directory: str | os.PathLike[str], keep: int | None) -> list[str]:
    """Delete all but the ``keep`` newest checkpoints in ``directory`` (None keeps all).

    :func:`save_checkpoint` calls it after each write; the driver also calls it when a run
    resumes, since a run killed between a checkpoint's rename and this pruning keeps one
    file too many.

    Returns:
        The paths deleted.
    """
    if keep is not None and keep < 1:
        raise ValueError(f"prune_checkpoints: keep must be >= 1 or None, got {keep}.")
    if keep is None:
        return []
    old = list_checkpoints(directory)[:-keep]
    for path in old:
        os.unlink(path)
    return old


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[str]:
    """Delete the temporary files of checkpoint writes that never finished (a killed run).

    :func:`save_checkpoint` writes ``.checkpoint_<step>.msgpack.<random>.tmp`` and renames it;
    a process killed in between leaves the temporary file behind. Only one process writes a
    run's checkpoints, so when a run resumes every such file is stale.
    """
    return remove_temp_files(directory, "checkpoint_*.msgpack")


def list_checkpoints(directory: str | os.PathLike[str]) -> list[str]:
    """Checkpoint files in ``directory``, oldest first (by the step in their name)."""
    found = []
    for path in glob.glob(os.path.join(os.fspath(directory), "checkpoint_*.msgpack")):
        match = _NAME.search(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike[str]) -> str | None:
    """The newest checkpoint file in ``directory``, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _checkpoint_path(path: str | os.PathLike[str]) -> str:
    """``path`` itself, or for a folder the newest checkpoint in it or in its ``checkpoints/``
    (a run directory): a :class:`CheckpointError` when there is none."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    found = latest_checkpoint(path) or latest_checkpoint(os.path.join(path, "checkpoints"))
    if found is None:
        raise CheckpointError(
            f"{path} is a folder without a checkpoint (checkpoint_*.msgpack, in it or in its checkpoints/); "
            "give a checkpoint file or a run directory that has written one."
        )
    return found


def _read(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = _checkpoint_path(path)
    if not os.path.exists(path):
        raise CheckpointError(f"No checkpoint at {path}: give a checkpoint file or a run directory.")
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        # No ext_hook and no object_hook: msgpack only builds plain containers, strings,
        # numbers and bytes, so nothing in the file can name code to run.
        payload = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as error:  # msgpack raises several unrelated types for corrupt data
        raise CheckpointError(
            f"{os.fspath(path)} is not a readable lamella checkpoint: {error}.{_one_before(path)}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{os.fspath(path)} is not a lamella checkpoint (no {FORMAT!r} header).")
    if payload.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{os.fspath(path)} has checkpoint format version {payload.get('format_version')}; "
            f"this lamella-agents reads version {FORMAT_VERSION}."
        )
    return payload


def _one_before(path: str) -> str:
    """A sentence naming the checkpoint before ``path`` in its folder (a damaged newest one
    leaves the run to resume from there), or ``""``."""
    match = _NAME.search(os.path.basename(path))
    if match is None:
        return ""
    step = int(match.group(1))
    older = [
        p
        for p in list_checkpoints(os.path.dirname(path) or ".")
        if int(_NAME.findall(os.path.basename(p))[0]) < step
    ]
    if not older:
        return ""
    return f" The checkpoint before it: {older[-1]} (resume from it: --resume {older[-1]})."


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a checkpoint (a file, or a run directory: its newest), without building
    any arrays."""
    return dict(_read(path)["metadata"])


def load_checkpoint(path: str | os.PathLike[str], target: Any) -> tuple[Any, dict[str, Any]]:
    """Read a checkpoint into the structure of ``target``.

    Args:
        path: a file written by :func:`save_checkpoint`, or a folder: the newest checkpoint in it
            or in its ``checkpoints/`` (a run directory).
        target: a pytree with the same structure (arrays or ``jax.ShapeDtypeStruct``), for
            example ``jax.eval_shape(init, keys)``. Typed-key leaves come back as typed keys.

    Returns:
        ``(state, metadata)``: ``state`` has ``target``'s structure, with ``jax.Array`` leaves.

    Raises:
        CheckpointError: no checkpoint there, not a checkpoint, or a path, shape or dtype that does
            not match.
    """
    path = _checkpoint_path(path)
    payload = _read(path)
    stored = {entry["path"]: entry for entry in payload["leaves"]}
    target_leaves, treedef = jax.tree_util.tree_flatten_with_path(target)
    wanted = [jax.tree_util.keystr(p) for p, _ in target_leaves]
    missing = [p for p in wanted if p not in stored]
    extra = [p for p in stored if p not in set(wanted)]
    if missing or extra:
        raise CheckpointError(
            f"{os.fspath(path)} does not fit the target structure: missing {missing[:5]}, unexpected {extra[:5]}."
        )
    leaves = []
    for (_, like), name in zip(target_leaves, wanted):
        entry = stored[name]
        array = _decode_leaf(entry)
        if _is_key(like):
            if entry["prng_impl"] is None:
                raise CheckpointError(
                    f"Leaf {name}: the target is a PRNG key array, the checkpoint holds numbers."
                )
            key = jax.random.wrap_key_data(jnp.asarray(array), impl=entry["prng_impl"])
            if key.shape != tuple(like.shape) or key.dtype != like.dtype:
                raise CheckpointError(
                    f"Leaf {name}: stored {key.dtype}{list(key.shape)}, target {like.dtype}{list(like.shape)}."
                )
            leaves.append(key)
            continue
        if entry["prng_impl"] is not None:
            raise CheckpointError(f"Leaf {name}: the checkpoint holds PRNG keys, the target does not.")
        if array.shape != tuple(like.shape) or array.dtype != jnp.dtype(like.dtype):
            raise CheckpointError(
                f"Leaf {name}: stored {array.dtype}{list(array.shape)}, target {jnp.dtype(like.dtype)}{list(like.shape)}."
            )
        leaves.append(jnp.asarray(array))
    state = jax.tree_util.tree_unflatten(treedef, leaves)
    return state, dict(payload["metadata"])


def versions(algorithm: str | None = None) -> dict[str, str]:
    """Versions of the packages that shape a run (recorded in its checkpoints' metadata and its
    ``config.json``): Python, JAX, flax, optax, flashbax and evosax where installed, every
    installed ``lamella-*`` distribution (so lamella-gcrl's for a HER run, whose batch sampler it
    declares), and the distribution that declares ``algorithm``, a ``lamella.algorithms`` entry
    point of a plug-in named otherwise."""
    from importlib.metadata import PackageNotFoundError, distributions, version

    found = {"python": sys.version.split()[0]}
    for name in ("jax", "jaxlib", "flax", "optax", "flashbax", "evosax"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    lamella = {}
    for dist in distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith("lamella-"):
            lamella[name] = dist.version
    found.update(sorted(lamella.items()))
    if algorithm is not None:
        from lamella.agents.algorithms import algorithm_entries

        for entry in algorithm_entries():
            if entry.name == algorithm and entry.package and entry.package not in found:
                found[entry.package] = entry.version
    return found
