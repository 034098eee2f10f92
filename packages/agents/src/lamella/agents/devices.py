"""Many devices: a runner's batch axis split over a mesh of devices with ``jax.shard_map``.

A runner that can run on several devices says so with a :class:`BatchSharding` in
``Runner.sharding``: which config setting is its batch axis (PPO: ``num_envs``), how to build
the runner one device runs (``make(DeviceAxis)``), and which leaves of its state carry that
axis (``state_axes``). The driver (``run_experiment(..., num_devices=4)``) then

* checks the request before anything compiles (:func:`check_devices`: devices present, batch
  divisible by the device count, and the runner's own checks when it builds its per-device
  runner),
* puts ``jax.shard_map`` over a one-axis :class:`jax.sharding.Mesh` (axis :data:`MESH_AXIS`)
  around its ``init`` and training chunk: each device runs the per-device runner on its block of
  the batch; the state's batch leaves are split over the devices, every other leaf (parameters,
  optimiser state, keys, counters) is replicated,
* evaluates with the unsharded runner (jit partitions it; evaluation needs only the replicated
  leaves), and records the layout in the run's ``config.json`` (:func:`device_layout`).

The per-device runner is ordinary code for a batch of ``size / num_devices`` with explicit
collectives over the mesh axis (:class:`DeviceAxis`): gradients and every statistic that
spans the batch are reduced with ``jax.lax.pmean`` / ``psum``, and randomness is drawn for the
whole batch and sliced (:func:`block_index`), so a run on D devices computes the same numbers
as one device with the same global batch, up to the order of floating-point sums.
``shard_map`` runs with ``check_vma=False``: under JAX's replication checking, the gradient of
a replicated parameter would already be summed over devices, and the runner's explicit
``pmean`` is the one reduction it should get.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from lamella.agents.config import ConfigError
from lamella.envs.wrappers import RunningMeanStd

__all__ = [
    "MESH_AXIS",
    "BatchSharding",
    "DeviceAxis",
    "block_index",
    "check_devices",
    "check_runner",
    "device_layout",
    "make_mesh",
    "runner_sharding",
    "state_partition",
]

MESH_AXIS = "devices"


class DeviceAxis(NamedTuple):
    """The mesh axis as the code of one device sees it. ``DeviceAxis()`` (one device) makes
    every method the identity, so a runner is written once for both.

    Attributes:
        name: the mesh axis name (:data:`MESH_AXIS`).
        size: the number of devices along it.
    """

    name: str = MESH_AXIS
    size: int = 1

    @property
    def sharded(self) -> bool:
        """More than one device: collectives are needed."""
        return self.size > 1

    def position(self) -> jax.Array:
        """int32 (): this device's position on the axis (0 on one device)."""
        return jax.lax.axis_index(self.name) if self.sharded else jnp.zeros((), jnp.int32)

    def local(self, size: int, what: str = "the batch") -> int:
        """Each device's share of a global ``size``; a ``ConfigError`` if it does not divide."""
        if size % self.size:
            raise ConfigError(
                f"{what} ({size}) must be a multiple of num_devices ({self.size}): each device takes an "
                f"equal block. Pick a multiple of {self.size}, or another num_devices."
            )
        return size // self.size

    def start(self, local_size: int) -> jax.Array:
        """int32 (): the global position of this device's first entry of a batch split in blocks
        of ``local_size``."""
        return self.position() * local_size

    def mean(self, tree: Any) -> Any:
        """Mean over devices of every leaf (``jax.lax.pmean``); the identity on one device."""
        return jax.lax.pmean(tree, self.name) if self.sharded else tree

    def sum(self, tree: Any) -> Any:
        """Sum over devices of every leaf (``jax.lax.psum``); the identity on one device."""
        return jax.lax.psum(tree, self.name) if self.sharded else tree

    def gather(self, tree: Any, axis: int = 0) -> Any:
        """Every device's block concatenated along ``axis`` (the global batch, on each device)."""
        if not self.sharded:
            return tree
        return jax.tree.map(lambda x: jax.lax.all_gather(x, self.name, axis=axis, tiled=True), tree)

    def take(self, tree: Any, axis: int = 0) -> Any:
        """This device's block along ``axis`` of arrays that hold the whole batch."""
        if not self.sharded:
            return tree

        def block(x: jax.Array) -> jax.Array:
            size = x.shape[axis] // self.size
            return jax.lax.dynamic_slice_in_dim(x, self.start(size), size, axis)

        return jax.tree.map(block, tree)

    def update_stats(self, stats: RunningMeanStd, batch: jax.Array) -> RunningMeanStd:
        """``stats`` with every sample of ``batch`` (any leading axes before the statistic's
        shape) added, pooled over the devices' equal blocks: the mean and variance of the whole
        batch (means of the blocks' moments), counted ``size`` times the block. On one device,
        ``stats.update_batch(batch)``."""
        if not self.sharded:
            return stats.update_batch(batch)
        flat = jnp.reshape(batch, (-1, *stats.mean.shape))
        mean = self.mean(flat.mean(0))
        var = self.mean(jnp.mean(jnp.square(flat - mean), 0))
        return stats.update_from_moments(mean, var, jnp.asarray(flat.shape[0] * self.size, jnp.float32))

    def axis_names(self, name: str | None) -> Any:
        """``name`` (a ``vmap`` axis name, or None) together with the mesh axis when sharded: what
        a statistic pooled over a vmapped batch pools over once the batch is split."""
        if not self.sharded:
            return name
        return self.name if name is None else (name, self.name)


def block_index(shape: Sequence[int], axis: int, start: Any, size: int) -> jax.Array:
    """uint32 flat positions, in an array of ``shape``, of its block ``start:start + size`` along
    ``axis``; the result has ``shape`` with ``size`` at ``axis``. With
    :func:`lamella.envs.random.bits`'s ``index``, a device draws exactly its block of the
    numbers one device draws for the whole batch."""
    shape = tuple(int(n) for n in shape)
    index = jnp.zeros((), jnp.uint32)
    stride = 1
    for dim in reversed(range(len(shape))):
        count = size if dim == axis else shape[dim]
        positions = jnp.arange(count, dtype=jnp.uint32)
        if dim == axis:
            positions = positions + jnp.asarray(start, jnp.uint32)
        view = [1] * len(shape)
        view[dim] = count
        index = index + positions.reshape(view) * np.uint32(stride)
        stride *= shape[dim]
    return index


class BatchSharding(NamedTuple):
    """How a runner splits its batch over devices (``Runner.sharding``).

    Attributes:
        batch: the config setting that sizes the batch axis (``"num_envs"``), for messages and
            the run log.
        size: its global size; ``num_devices`` must divide it.
        make: ``make(DeviceAxis) -> Runner``: the runner one device runs on its block (its
            ``step`` reduces over ``DeviceAxis.name``). It raises ``ConfigError`` for a device
            count its other sizes cannot take (minibatches that do not split evenly).
        state_axes: ``state_axes(state) -> pytree of int | None`` with the state's structure
            (one member, no seed axis): the axis of each leaf that is the batch axis, ``None``
            for a leaf every device holds whole (parameters, keys, counters). A prefix tree is
            enough (``None`` for a whole sub-tree).
    """

    batch: str
    size: int
    make: Callable[[DeviceAxis], Any]
    state_axes: Callable[[Any], Any]


def runner_sharding(
    devices: DeviceAxis,
    batch: str,
    size: int,
    make: Callable[[DeviceAxis], Any],
    state_axes: Callable[[Any], Any],
) -> BatchSharding | None:
    """What a runner built for ``devices`` puts in ``Runner.sharding``: its
    :class:`BatchSharding` when it is the whole-batch runner (one device), ``None`` when it is
    already one device's runner (a per-device runner is not split again)."""
    return None if devices.sharded else BatchSharding(batch, int(size), make, state_axes)


def make_mesh(num_devices: int) -> Mesh:
    """A one-axis mesh (:data:`MESH_AXIS`) of the first ``num_devices`` devices; with several
    processes (:mod:`lamella.agents.hosts`), of the first ``num_devices / processes`` of each
    process, in process order (the batch's blocks go to process 0's devices first)."""
    num_devices = int(num_devices)
    processes = jax.process_count()
    if processes == 1:
        return Mesh(np.array(jax.devices()[:num_devices]), (MESH_AXIS,))
    per_process = num_devices // processes
    chosen = [
        device
        for index in range(processes)
        for device in [d for d in jax.devices() if d.process_index == index][:per_process]
    ]
    return Mesh(np.array(chosen), (MESH_AXIS,))


def check_devices(num_devices: Any, sharding: BatchSharding | None, who: str = "The runner") -> int:
    """Check a device request before anything compiles; return it as an int.

    Raises:
        ConfigError: ``num_devices`` not a positive int; more devices than present (naming the
            CPU flag that simulates more); a runner without ``Runner.sharding``; a batch the
            count does not divide; with several processes, a count that is not an equal share
            of every process's devices.
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int | np.integer) or num_devices < 1:
        raise ConfigError(f"num_devices must be a positive int, got {num_devices!r}.")
    num_devices = int(num_devices)
    processes = jax.process_count()
    if processes > 1:
        local = jax.local_device_count()
        if num_devices % processes or num_devices // processes > local:
            raise ConfigError(
                f"num_devices={num_devices} cannot be split over {processes} processes with {local} device(s) "
                f"each: every process takes an equal share of the devices. Ask for a multiple of {processes} up "
                f"to {processes * local} (the default, every device of every process, is {processes * local})."
            )
    if num_devices == 1:
        return 1
    present = jax.devices()
    if num_devices > len(present):
        platform = present[0].platform
        hint = (
            f" On CPU, simulate {num_devices} devices by setting "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before jax is imported."
            if platform == "cpu"
            else ""
        )
        raise ConfigError(
            f"num_devices={num_devices}, but only {len(present)} {platform} device(s) are present. "
            f"Ask for at most {len(present)}.{hint}"
        )
    if sharding is None:
        raise ConfigError(
            f"{who} does not split its batch over devices (its Runner has no sharding); run it with "
            "num_devices=1."
        )
    if sharding.size % num_devices:
        lower = max(d for d in range(1, num_devices + 1) if sharding.size % d == 0)
        raise ConfigError(
            f"{sharding.batch}={sharding.size} is not divisible by num_devices={num_devices}: each device "
            f"takes an equal block of {sharding.batch}. Set {sharding.batch} to a multiple of {num_devices} "
            f"(for example {-(-sharding.size // num_devices) * num_devices}), or num_devices={lower}."
        )
    return num_devices


def check_runner(num_devices: Any, runner: Any, who: str = "The runner") -> tuple[int, DeviceAxis, Any]:
    """:func:`check_devices` for ``runner`` (its ``Runner.sharding``), then the runner one device
    runs (built here, so its own size checks raise now). Returns ``(num_devices, axis,
    per-device runner)``; on one device the per-device runner is ``runner`` itself.

    Raises:
        ConfigError: as :func:`check_devices`, or a size the runner cannot split (minibatches).
    """
    sharding = getattr(runner, "sharding", None)
    num_devices = check_devices(num_devices, sharding, who)
    axis = DeviceAxis(MESH_AXIS, num_devices)
    if num_devices == 1 or sharding is None:  # check_devices refuses no sharding on several devices
        return num_devices, axis, runner
    return num_devices, axis, sharding.make(axis)


def state_partition(state: Any, sharding: BatchSharding, leading: int = 1) -> Any:
    """``PartitionSpec`` per leaf of ``state`` (``leading`` population axes first): the batch
    axis split over :data:`MESH_AXIS`, everything else replicated."""
    one = jax.tree.map(lambda x: x, state)  # the structure; shapes are not needed

    def spec(axis: int | None, _: Any = None) -> PartitionSpec:
        if axis is None:
            return PartitionSpec()
        return PartitionSpec(*([None] * (leading + int(axis))), MESH_AXIS)

    axes = sharding.state_axes(one)
    return jax.tree.map(
        lambda axis, subtree: jax.tree.map(lambda _: spec(axis), subtree),
        axes,
        one,
        is_leaf=lambda x: x is None or isinstance(x, int),
    )


def device_layout(num_devices: int, sharding: BatchSharding | None) -> dict[str, Any]:
    """What the run log records about where a run ran (``config.json``'s ``devices``)."""
    devices = list(make_mesh(num_devices).devices.flat)
    layout: dict[str, Any] = {
        "num_devices": num_devices,
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "mesh_axis": MESH_AXIS if num_devices > 1 else None,
    }
    if jax.process_count() > 1:  # many hosts (lamella.agents.hosts); absent: one process
        layout["num_processes"] = jax.process_count()
    if sharding is not None:
        layout["batch"] = sharding.batch
        layout["batch_size"] = sharding.size
        layout["per_device"] = sharding.size // num_devices
    return layout
