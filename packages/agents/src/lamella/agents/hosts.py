"""Many hosts: one run over the devices of several processes, with ``jax.distributed``.

The same command runs on every process (one per host, or several on one machine); each says
where the coordinator (process 0) listens, how many processes there are and which one it is::

    lamella train ppo --devices 4 --coordinator-address 10.0.0.1:1234 --num-processes 2 --process-id 0
    lamella train ppo --devices 4 --coordinator-address 10.0.0.1:1234 --num-processes 2 --process-id 1

or the same three settings from the environment (:data:`ENV_VARS`), or from Python with
:func:`initialize` at the start of the program, before anything runs on a device. The
processes then train ONE experiment: the driver's mesh (:func:`lamella.agents.devices.make_mesh`)
spans the devices of every process, the runner's batch axis is split over all of them, and
every collective the per-device runner does (``DeviceAxis.mean`` ...) spans the processes, so
the run computes what one process with as many devices computes.

Process 0 alone writes the run directory (``config.json``, the run log, checkpoints, the
plot), with the same atomic writers as a one-process run; the other processes keep the run log
in memory and write nothing. Values that leave the devices are global: metrics are replicated
by the programs, and a checkpoint's state is gathered from every process
(:func:`global_values`) before process 0 writes it. The run directory must be one every process
can read at the same path (a shared file system, or one machine): a resumed run loads its
checkpoint on every process.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError

__all__ = [
    "ENV_VARS",
    "Cluster",
    "barrier",
    "global_values",
    "initialize",
    "is_writer",
    "make_cluster",
]

#: The environment variables :func:`make_cluster` reads for settings not given as arguments.
ENV_VARS = {
    "coordinator_address": "LAMELLA_COORDINATOR_ADDRESS",
    "num_processes": "LAMELLA_NUM_PROCESSES",
    "process_id": "LAMELLA_PROCESS_ID",
}

# What each setting is called on the command line, for messages.
_FLAGS = {
    "coordinator_address": "--coordinator-address",
    "num_processes": "--num-processes",
    "process_id": "--process-id",
}

_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where this process stands among the processes of one run (checked by :func:`make_cluster`).

    Attributes:
        coordinator_address: ``HOST:PORT`` where process 0 runs the coordination service
            (every process gives the same one).
        num_processes: how many processes train the run.
        process_id: this process, ``0 .. num_processes - 1``; process 0 writes the run directory.
    """

    coordinator_address: str
    num_processes: int
    process_id: int


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{_FLAGS[name]} must be an integer, got {value!r}.")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{_FLAGS[name]} must be an integer, got {value!r}.") from None


def make_cluster(
    coordinator_address: str | None = None,
    num_processes: int | str | None = None,
    process_id: int | str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Cluster | None:
    """The checked settings of a many-process run, each from its argument or else from its
    environment variable (:data:`ENV_VARS`); ``None`` when none is given anywhere (one process).

    Args:
        coordinator_address: ``HOST:PORT`` of process 0's coordination service.
        num_processes: the number of processes (>= 1).
        process_id: this process's index (``0 .. num_processes - 1``).
        environ: where the environment variables are read (default ``os.environ``).

    Raises:
        ConfigError: some settings given and others not, an address that is not
            ``HOST:PORT``, ``num_processes < 1``, or a ``process_id`` out of range. Nothing is
            started: call this before :func:`initialize` to report bad input at once.
    """
    environ = os.environ if environ is None else environ
    given = {
        "coordinator_address": coordinator_address,
        "num_processes": num_processes,
        "process_id": process_id,
    }
    values = {
        name: value if value is not None else (environ.get(ENV_VARS[name]) or None)
        for name, value in given.items()
    }
    missing = [name for name, value in values.items() if value is None]
    if len(missing) == len(values):
        return None
    if missing:
        have = [f"{_FLAGS[n]} ({ENV_VARS[n]})" for n in values if n not in missing]
        need = [f"{_FLAGS[n]} ({ENV_VARS[n]})" for n in missing]
        raise ConfigError(
            f"A run on many processes needs all three of --coordinator-address, --num-processes and "
            f"--process-id (or their environment variables); got {', '.join(have)} but not {', '.join(need)}. "
            "Give the missing ones, or none for a one-process run."
        )
    address = str(values["coordinator_address"]).strip()
    match = _HOST_PORT.match(address)
    if match is None or not 0 < int(match.group(1)) < 65536:
        raise ConfigError(
            f"--coordinator-address must be HOST:PORT (for example 10.0.0.1:1234, the address of process 0 "
            f"and a free port there), got {address!r}."
        )
    count = _integer("num_processes", values["num_processes"])
    if count < 1:
        raise ConfigError(f"--num-processes must be >= 1, got {count}.")
    index = _integer("process_id", values["process_id"])
    if not 0 <= index < count:
        raise ConfigError(
            f"--process-id must be in 0..{count - 1} (one per process, 0 for the coordinator's), got {index}."
        )
    return Cluster(address, count, index)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | str | None = None,
    process_id: int | str | None = None,
    *,
    cluster: Cluster | None = None,
) -> Cluster | None:
    """Join this process to a many-process run (``jax.distributed.initialize``), with settings
    from the arguments, else the environment (:func:`make_cluster`), or a checked ``cluster``.

    Call it at the start of the program, before anything runs on a device; ``lamella train``
    calls it for its flags. Nothing given anywhere: one process, nothing is done. Calling it
    again with the same settings does nothing. On CPU, the processes' collectives go through
    gloo (``jax_cpu_collectives_implementation``, the default of jax 0.10; set here where it is
    still off). Returns the cluster joined (``None``: one process).

    Raises:
        ConfigError: bad settings (see :func:`make_cluster`); already joined with other
            settings; or JAX already ran something in this process (then it can no longer join).
    """
    if cluster is None:
        cluster = make_cluster(coordinator_address, num_processes, process_id)
    if cluster is None:
        return None
    if jax.distributed.is_initialized():
        if (jax.process_count(), jax.process_index()) != (cluster.num_processes, cluster.process_id):
            raise ConfigError(
                f"This process already joined a run as process {jax.process_index()} of {jax.process_count()}; "
                f"it cannot join another as process {cluster.process_id} of {cluster.num_processes}."
            )
        return cluster
    if getattr(jax.config, "jax_cpu_collectives_implementation", "gloo") in (None, "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(cluster.coordinator_address, cluster.num_processes, cluster.process_id)
    except RuntimeError as error:
        if "before" not in str(error):
            raise
        raise ConfigError(
            "JAX already ran something in this process, so it cannot join other processes any more: call "
            "lamella.agents.hosts.initialize(...) at the start of the program, before any JAX computation. "
            f"(JAX: {error})"
        ) from error
    return cluster


def is_writer() -> bool:
    """Whether this process writes the run directory: process 0 (every one-process run)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process gets here (nothing to wait for in a one-process run)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def global_values(tree: Any) -> Any:
    """``tree`` with every array's global value on this host (NumPy arrays; typed PRNG keys
    stay typed keys). A leaf split over the devices of several processes cannot be read by one
    process (``jax.device_get`` refuses it); this gathers it from all of them. Every process
    must call it (it is a collective). In a one-process run, ``tree`` itself."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    def fetch(leaf: Any) -> Any:
        if not isinstance(leaf, jax.Array):
            return leaf
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = multihost_utils.process_allgather(jax.random.key_data(leaf), tiled=True)
            return jax.random.wrap_key_data(jnp.asarray(data), impl=jax.random.key_impl(leaf))
        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))

    return jax.tree.map(fetch, tree)
