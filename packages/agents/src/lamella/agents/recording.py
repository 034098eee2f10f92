"""Recording a training run's experience to flashbax Vaults, and reading it back.

``run_experiment(config, record_vault=True)`` (``lamella train ... --record-vault``) records
every env step the runner collects, one Vault per seed, at
``<record_vault>/<task>/seed_<n>`` (default ``<out_dir>/vault``). The runner provides the
experience through ``Runner.record_step`` (PPO, the off-policy loop, lamella-marl's runners); the driver gathers the
iterations of a chunk on device and appends them to the vaults between chunks, before the
checkpoint of that chunk.

A vault is one time series per parallel env: leaves ``(num_envs, steps, ...)``, where steps
``[i * T, (i + 1) * T)`` are iteration ``i``'s rollout of ``T`` steps. The built-in runners
record flashbax Vault's OG-MARL layout: ``observations``, ``actions``, ``rewards``,
``terminals``, ``truncations`` (multi-agent: an agent axis after the time axis, and
``infos`` with the action masks ``legals`` and, for MAPPO, the global ``state``). Step ``t``
holds the observation acted on, the action, the reward it earned and whether the episode
ended there; the next step of the same env starts the next episode after an end.

Many processes (``--num-processes``): every process gathers each chunk's experience from the
devices of all of them (a collective), and process 0 alone opens and writes the vaults, which
hold the same steps, in the same env order, as a one-process run on as many devices.

Interruptions: a vault's length is written after its data, so a run killed at any moment
leaves readable vaults; a resumed run writes each chunk at its iteration's position, so the
steps recorded after the checkpoint it resumes from are rewritten (identically: a resume
recomputes them exactly) and the vault ends where the run ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from lamella.agents import hosts
from lamella.agents.config import ConfigError, config_diff
from lamella.buffers import open_vault, read_vault, write_experience

__all__ = ["VaultRecorder", "read_recording", "recorded_runs", "resolve_record_dir", "vault_name"]


def vault_name(task: str) -> str:
    """The vault name of a task: the env id with path-unsafe characters replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in task)


def resolve_record_dir(
    requested: bool | str | os.PathLike[str] | None,
    stored: str | None,
    out_dir: str,
    resuming_progress: bool,
    task: str = "",
    fresh: bool = False,
) -> str | None:
    """Where a run records: ``requested`` (``True``: ``<out_dir>/vault``) checked against what a
    resumed run ``stored``; ``None`` keeps the stored choice (a resumed run goes on recording).

    Raises:
        ConfigError: a resumed run asked to record elsewhere, or to start recording part-way
            (``resuming_progress``: the run has trained since it began without recording).
        FileExistsError: a ``fresh`` run whose ``task`` already has vaults in the folder.
    """
    if requested is None or requested is False:
        return stored
    path = os.path.abspath(os.path.join(out_dir, "vault") if requested is True else os.fspath(requested))
    if stored is not None and os.path.abspath(stored) != path:
        raise ConfigError(
            f"Cannot resume with record_vault={path!r}: the run records to {stored!r}. Resume without "
            "--record-vault (it goes on recording there), or start a new run."
        )
    if stored is None and resuming_progress:
        raise ConfigError(
            "Cannot start recording a resumed run part-way: it trained without --record-vault, and a vault "
            "holds a run's experience from its first step. Start a new run with --record-vault."
        )
    if fresh and os.path.exists(os.path.join(path, vault_name(task))):
        raise FileExistsError(
            f"{os.path.join(path, vault_name(task))!r} already holds vaults of a run; record to another "
            "folder (--record-vault DIR) or remove it."
        )
    return path


class VaultRecorder:
    """The vaults of one run, one per member (``runs``: ``seed_<n>``).

    Args:
        directory: the recording folder (vaults at ``directory/<vault_name(task)>/<run>``).
        task: the run log's task (the env id).
        runs: the members' run names.
        experience: shapes (``jax.ShapeDtypeStruct``) of a chunk's recorded experience, leaves
            ``(members, chunk_iterations, T, num_envs, ...)``.
        metadata: JSON-compatible data stored in each vault (algorithm, config, ...).
    """

    def __init__(
        self,
        directory: str,
        task: str,
        runs: Sequence[str],
        experience: Any,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        leaves = jax.tree.leaves(experience)
        if not leaves or any(len(x.shape) < 4 for x in leaves):
            raise ConfigError(
                "Runner.record_step must return experience with leading axes (time, batch); got shapes "
                f"{[tuple(x.shape[2:]) for x in leaves]}."
            )
        self.directory = directory
        self.name = vault_name(task)
        self.runs = list(runs)
        self.steps_per_iteration = int(leaves[0].shape[2])
        # A vault is created from an example of one env's steps: (num_envs, 1, ...).
        self._example = jax.tree.map(lambda x: np.zeros((x.shape[3], 1, *x.shape[4:]), x.dtype), experience)
        self._metadata = {**(metadata or {}), "task": task, "steps_per_iteration": self.steps_per_iteration}
        self.vaults: list[Any] = []  # flashbax.vault.Vault

    def path(self, run: str) -> str:
        return os.path.join(self.directory, self.name, run)

    def open(self, iteration: int, fresh: bool) -> None:
        """Open (or create) every member's vault before the first chunk from ``iteration``; in a
        run of many processes on process 0 only (the others write nothing).

        Raises:
            FileExistsError: a fresh run whose vault already exists.
            ConfigError: a resumed run whose vault misses steps it recorded before the checkpoint,
                or was written by another run (its algorithm or a config value differs).
        """
        if not hosts.is_writer():
            return
        needed = iteration * self.steps_per_iteration
        for run in self.runs:
            path = self.path(run)
            exists = os.path.exists(path)
            if fresh and exists:
                raise FileExistsError(
                    f"{path!r} already holds a vault; record to another folder (--record-vault DIR) or remove it."
                )
            if needed and not exists:
                raise ConfigError(f"Cannot resume recording: {path!r} is missing (the run recorded there).")
            if exists:  # a resumed run's own vault (a fresh run refused one above)
                _check_same_run(path, {**self._metadata, "run": run})
            vault = open_vault(
                self.directory,
                self.name,
                uid=run,
                experience=self._example,
                metadata={**self._metadata, "run": run},
            )
            if vault.vault_index < needed:
                raise ConfigError(
                    f"Cannot resume recording: {path!r} holds {vault.vault_index} steps per env, the checkpoint "
                    f"at iteration {iteration} needs {needed}. Start a new run to record."
                )
            self.vaults.append(vault)

    def write(self, experience: Any, length: int, first_iteration: int) -> None:
        """Write a chunk's experience (leaves ``(members, capacity, T, num_envs, ...)``, the first
        ``length`` iterations filled) at iteration ``first_iteration``'s position. Every process
        of a many-process run calls it (the experience is gathered from all of them); process 0
        writes."""
        host = jax.device_get(hosts.global_values(experience))
        if not hosts.is_writer():
            return
        steps = length * self.steps_per_iteration
        for member, vault in enumerate(self.vaults):
            series = jax.tree.map(
                lambda x, m=member: np.swapaxes(x[m, :length].reshape(steps, *x.shape[3:]), 0, 1), host
            )
            write_experience(vault, series, at=first_iteration * self.steps_per_iteration)


def _json_ready(value: Any) -> Any:
    """``value`` as flashbax stores a vault's metadata: leaves that are not JSON scalars as text,
    then through JSON (tuples become lists)."""
    scalars = (bool, str, int, float, type(None))
    return json.loads(json.dumps(jax.tree.map(lambda x: x if isinstance(x, scalars) else str(x), value)))


def _check_same_run(path: str, metadata: dict[str, Any]) -> None:
    """Refuse to resume recording into the vault at ``path`` when another run wrote it: its stored
    algorithm, or a config value, differs from this run's ``metadata`` (a field the vault's
    config lacks is no difference: a newer lamella may add config fields)."""
    try:
        with open(os.path.join(path, "metadata.json"), encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        return  # flashbax itself reads the vault; what it cannot read it reports
    ours = _json_ready(metadata)
    differences = []
    if "algorithm" in stored and stored["algorithm"] != ours.get("algorithm"):
        differences.append(f"algorithm {stored['algorithm']!r} there, {ours.get('algorithm')!r} here")
    mine = ours.get("config") or {}
    # A field this run has and the vault's lacks reads as this run's value (as a resume reads it).
    differences += [
        f"{key}={there!r} there, {here!r} here"
        for key, (there, here) in config_diff(stored.get("config") or {}, mine, mine).items()
    ]
    if differences:
        raise ConfigError(
            f"Cannot resume recording: {path!r} was written by another run ({'; '.join(differences)}), "
            "and a resumed run appends only to its own vault. Start a new run to record (or resume the "
            "run that wrote it)."
        )


def recorded_runs(directory: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """``(vault name, run)`` of every vault under a recording folder, sorted."""
    root = os.fspath(directory)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"No recording folder {root!r}.")
    found = []
    for name in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, name)):
            for run in sorted(os.listdir(os.path.join(root, name))):
                if os.path.isfile(os.path.join(root, name, run, "metadata.json")):
                    found.append((name, run))
    return found


def read_recording(
    directory: str | os.PathLike[str], task: str | None = None, run: str = "seed_0"
) -> dict[str, Any]:
    """The experience one run recorded: a dict of numpy arrays, leaves ``(num_envs, steps, ...)``.

    Args:
        directory: the recording folder (``record_vault``; ``<out_dir>/vault`` by default), or
            the run directory whose ``vault/`` folder holds the recording.
        task: the env id (default: the only task recorded there).
        run: the member, ``seed_<n>``.
    """
    runs = recorded_runs(directory)
    inner = os.path.join(os.fspath(directory), "vault")
    if not runs and os.path.isdir(inner):  # a run directory: its recording folder
        directory, runs = inner, recorded_runs(inner)
    names = sorted({name for name, _ in runs})
    if not names:
        raise FileNotFoundError(
            f"No recorded vault in {os.fspath(directory)!r}. Give the recording folder: the run "
            "directory's vault/ (or the run's record_vault setting)."
        )
    if task is None:
        if len(names) != 1:
            raise ValueError(f"{os.fspath(directory)!r} holds vaults of {names}; pass task=.")
        name = names[0]
    else:
        name = vault_name(task)
    if (name, run) not in runs:
        raise FileNotFoundError(
            f"No vault {name}/{run} in {os.fspath(directory)!r}; recorded: {[f'{n}/{r}' for n, r in runs]}."
        )
    vault = open_vault(directory, name, uid=run)
    return jax.tree.map(np.asarray, read_vault(vault))
