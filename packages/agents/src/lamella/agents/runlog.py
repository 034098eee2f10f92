"""The run log: ``metrics.json`` (marl-eval layout) and ``metrics.csv``, optionally TensorBoard.

The file contract is ``docs/run-log-format.md`` at the repository root::

    {environment: {task: {algorithm: {run: {"step_<i>": {"step_count": int, metric: [numbers]},
                                             "absolute_metrics": {metric: [numbers]}}}}}}

:class:`RunLog` keeps the evaluations of one experiment (one environment, task and algorithm,
one run per seed) and rewrites both files atomically after each evaluation, so a reader, or a
run that dies, never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from lamella.agents._files import atomic_write_text
from lamella.envs.errors import MissingExtraError

__all__ = [
    "CSV_HEADER",
    "RunLog",
    "env_family",
    "read_metrics",
    "refuse_existing_run_log",
    "require_tensorboard",
]

# A run's key: a run name, or an (algorithm, run) pair.
_Run: TypeAlias = str | tuple[str, str]

CSV_HEADER = (
    "environment",
    "task",
    "algorithm",
    "run",
    "step",
    "step_count",
    "metric",
    "value_index",
    "value",
)
ABSOLUTE = "absolute_metrics"

# Families of env ids that do not come from a lamella.envs sub-package (or are not registered
# in this process): matched on the id, case-insensitively, first match wins.
_FAMILY_BY_ID = (
    ("minatar", "minatar"),
    ("bsuite", "bsuite"),
    ("misc", "misc"),
    ("cartpole", "classic_control"),
    ("acrobot", "classic_control"),
    ("pendulum", "classic_control"),
    ("mountaincar", "classic_control"),
    ("brax", "brax"),
)


def env_family(env_id: str) -> str:
    """The ``environment`` level of the run log for ``env_id`` (``classic_control``, ``minatar``, ...).

    A registered lamella env is named after the ``lamella.envs`` sub-package that defines it
    (:func:`lamella.envs.registry.env_family`). Otherwise (not registered, or an adapter around
    another library) the id is matched against known names (``*-MinAtar`` -> ``minatar``,
    ``*-bsuite`` -> ``bsuite``, ``CartPole``/``Acrobot``/``Pendulum``/``MountainCar`` ->
    ``classic_control``); anything else is ``custom``. A task ``<id>:<settings>`` (the env spec
    form of ``lamella eval checkpoints --env``, as :func:`lamella.agents.driver.run_log_task` can
    name a task) is in the family of its id.
    """
    for candidate in dict.fromkeys((env_id, env_id.partition(":")[0])):
        try:
            from lamella.envs.registry import env_family as module_family

            family = module_family(candidate)
            if family != "custom":
                return family
        except Exception:  # a broken env must not stop the run log; fall back to the id
            pass
    lowered = env_id.lower()
    for needle, family in _FAMILY_BY_ID:
        if needle in lowered:
            return family
    return "custom"


def _finite_list(values: Any) -> list[float] | None:
    """Values as a list of Python numbers, or None if any is not finite."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, list | tuple):
        values = [values]
    flat: list[float] = []
    for value in values:
        if isinstance(value, list | tuple):
            nested = _finite_list(value)
            if nested is None:
                return None
            flat.extend(nested)
            continue
        number = float(value) if not isinstance(value, bool | int) else int(value)
        if not math.isfinite(number):
            return None
        flat.append(number)
    return flat


def require_tensorboard() -> None:
    """Raise :class:`~lamella.envs.errors.MissingExtraError` (a user error: one line from the
    ``lamella`` command) when tensorboardX, the ``tensorboard`` extra, is not installed."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            "TensorBoard logging needs tensorboardX: pip install 'lamella-agents[tensorboard]'."
        ) from None


def refuse_existing_run_log(directory: str | os.PathLike[str] | None, where: str, seed: int = 0) -> None:
    """Raise ``FileExistsError`` where ``directory`` already holds a run log (``metrics.json``).

    For the host loops, which start a fresh :class:`RunLog` per call: a second seed into the
    first one's folder replaced its log, the first seed gone without a word. (The driver has
    its own check, which also offers to resume.)
    """
    if directory is not None and os.path.exists(os.path.join(os.fspath(directory), "metrics.json")):
        raise FileExistsError(
            f"{where}: out_dir {os.fspath(directory)!r} already holds a run log (metrics.json), which this "
            f"run would replace. Give each run its own folder, e.g. out_dir=.../seed_{seed} (lamella eval "
            "aggregate reads the folders together), or remove the old one."
        )


class RunLog:
    """The evaluations of one experiment, written as ``metrics.json`` + ``metrics.csv``.

    Args:
        directory: the run directory (created if missing).
        environment: env family (see :func:`env_family`).
        task: env id.
        algorithm: runner name (``ppo``).
        runs: run names, one per seed (``seed_0``, ...); or ``(algorithm, run)`` pairs for a
            log that holds several algorithms (a sweep: one algorithm name per variant). The
            entries of ``runs`` are the keys of the ``{run: metrics}`` mappings passed in.
        tensorboard: also write scalars (the mean over episodes of each metric) with
            tensorboardX to ``directory/tensorboard/<run>`` (needs the ``tensorboard`` extra).
        writes: False keeps the log in memory only (:meth:`write` does nothing): the
            processes of a many-host run other than process 0, which writes the files.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        environment: str,
        task: str,
        algorithm: str,
        runs: Sequence[_Run],
        *,
        tensorboard: bool = False,
        writes: bool = True,
    ) -> None:
        self.directory = os.fspath(directory)
        self.writes = writes
        self.environment = environment
        self.task = task
        self.algorithm = algorithm
        self.runs = list(runs)
        # (algorithm, run) of each entry of ``runs``: where it goes in the nested layout.
        self._places = [
            (algorithm, run) if isinstance(run, str) else (str(run[0]), str(run[1])) for run in self.runs
        ]
        if len(set(self._places)) != len(self._places):
            raise ValueError(f"RunLog: runs must be distinct, got {self.runs}.")
        self.steps: list[dict[str, Any]] = []  # {"step_count": int, "metrics": {run: {name: [..]}}}
        self.absolute: dict[_Run, dict[str, list[float]]] | None = None
        self._warned: set[str] = set()
        self._writers: dict[_Run, Any] | None = None
        self._tensorboard = tensorboard
        self._tensorboard_done = 0
        if tensorboard:
            require_tensorboard()

    @property
    def json_path(self) -> str:
        return os.path.join(self.directory, "metrics.json")

    @property
    def csv_path(self) -> str:
        return os.path.join(self.directory, "metrics.csv")

    def _clean(self, metrics_by_run: Mapping[_Run, Mapping[str, Any]]) -> dict[_Run, dict[str, list[float]]]:
        unknown = sorted(set(metrics_by_run) - set(self.runs))
        if unknown:
            raise KeyError(f"RunLog: unknown run(s) {unknown}; this log has {self.runs}.")
        cleaned: dict[_Run, dict[str, list[float]]] = {}
        for run, metrics in metrics_by_run.items():
            cleaned[run] = {}
            for name, values in metrics.items():
                if name == "step_count":
                    raise ValueError("RunLog: 'step_count' is reserved; pass it as the step_count argument.")
                as_list = _finite_list(values)
                if as_list is None:
                    if name not in self._warned:
                        self._warned.add(name)
                        warnings.warn(
                            f"RunLog: metric {name!r} has a non-finite value; it is left out of the run log "
                            "wherever that happens (the format allows finite numbers only).",
                            stacklevel=3,
                        )
                    continue
                cleaned[run][name] = as_list
        return cleaned

    def add(self, step_count: int, metrics_by_run: Mapping[_Run, Mapping[str, Any]]) -> int:
        """Append one evaluation (``{run: {metric: values}}``) at ``step_count``; return its index."""
        if self.steps and step_count < self.steps[-1]["step_count"]:
            raise ValueError(
                f"RunLog: step_count {step_count} is before the last one ({self.steps[-1]['step_count']})."
            )
        self.steps.append({"step_count": int(step_count), "metrics": self._clean(metrics_by_run)})
        return len(self.steps) - 1

    def set_absolute(self, metrics_by_run: Mapping[_Run, Mapping[str, Any]]) -> None:
        """Set ``absolute_metrics`` (the final policy's evaluation) of each run."""
        self.absolute = self._clean(metrics_by_run)

    def truncate(self, num_steps: int) -> None:
        """Keep the first ``num_steps`` evaluations (used on resume) and drop ``absolute_metrics``."""
        if num_steps > len(self.steps):
            raise ValueError(f"RunLog: cannot keep {num_steps} evaluations, the log has {len(self.steps)}.")
        del self.steps[num_steps:]
        self.absolute = None
        self._tensorboard_done = min(self._tensorboard_done, num_steps)

    def to_json(self) -> dict[str, Any]:
        """The marl-eval nested dict."""
        algorithms: dict[str, dict[str, Any]] = {}
        for run, (algorithm, name) in zip(self.runs, self._places):
            entries: dict[str, Any] = {}
            for index, step in enumerate(self.steps):
                entries[f"step_{index}"] = {"step_count": step["step_count"], **step["metrics"].get(run, {})}
            if self.absolute is not None and run in self.absolute:
                entries[ABSOLUTE] = dict(self.absolute[run])
            algorithms.setdefault(algorithm, {})[name] = entries
        return {self.environment: {self.task: algorithms}}

    def csv_rows(self) -> list[tuple[Any, ...]]:
        """Rows of ``metrics.csv`` (without the header); ``step`` is the evaluation index, or
        ``absolute_metrics`` (with an empty ``step_count``) for the final evaluation; values
        are written as floats (``repr``, so they read back exactly)."""
        rows: list[tuple[Any, ...]] = []
        for run, (algorithm, run_name) in zip(self.runs, self._places):
            prefix = (self.environment, self.task, algorithm, run_name)
            for index, step in enumerate(self.steps):
                for name, values in step["metrics"].get(run, {}).items():
                    for value_index, value in enumerate(values):
                        rows.append(
                            (*prefix, index, step["step_count"], name, value_index, repr(float(value)))
                        )
            if self.absolute is not None and run in self.absolute:
                for name, values in self.absolute[run].items():
                    for value_index, value in enumerate(values):
                        rows.append((*prefix, ABSOLUTE, "", name, value_index, repr(float(value))))
        return rows

    def write(self) -> None:
        """Rewrite ``metrics.json`` and ``metrics.csv`` atomically (and flush TensorBoard)."""
        if not self.writes:
            return
        atomic_write_text(
            self.json_path, json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False) + "\n"
        )
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows(self.csv_rows())
        atomic_write_text(self.csv_path, buffer.getvalue())
        if self._tensorboard:
            self._write_tensorboard()

    def _write_tensorboard(self) -> None:
        from tensorboardX import SummaryWriter

        new = self.steps[self._tensorboard_done :]
        if not new:
            return
        if self._writers is None:
            # purge_step drops events a killed run wrote after its last checkpoint.
            self._writers = {
                run: SummaryWriter(
                    logdir=os.path.join(self.directory, "tensorboard", *self._tensorboard_dir(run, place)),
                    purge_step=new[0]["step_count"],
                )
                for run, place in zip(self.runs, self._places)
            }
        for step in new:
            for run, metrics in step["metrics"].items():
                for name, values in metrics.items():
                    if values:
                        self._writers[run].add_scalar(name, sum(values) / len(values), step["step_count"])
        for writer in self._writers.values():
            writer.flush()
        self._tensorboard_done = len(self.steps)

    def _tensorboard_dir(self, run: Any, place: tuple[str, str]) -> tuple[str, ...]:
        if isinstance(run, str):
            return (run,)
        safe = "".join(c if c.isalnum() or c in "-_.=," else "_" for c in place[0])
        return (safe, place[1])

    def close(self) -> None:
        """Close TensorBoard writers (the JSON and CSV files are complete after every write)."""
        if self._writers:
            for writer in self._writers.values():
                writer.close()
        self._writers = None

    def load(self) -> None:
        """Read this experiment's evaluations back from ``metrics.json`` (for resume)."""
        data = read_metrics(self.json_path)
        entries: dict[Any, Any] = {}
        tasks = data.get(self.environment, {})
        if self.task not in tasks and len(tasks) == 1:
            # A run logged before its config named its task differently (lamella-ued's maze sizes
            # joined the task name): it continues under the name its log already holds.
            self.task = next(iter(tasks))
        for run, (algorithm, name) in zip(self.runs, self._places):
            try:
                runs = data[self.environment][self.task][algorithm]
            except KeyError:
                raise ValueError(
                    f"{self.json_path} has no entry for {self.environment}/{self.task}/{algorithm}."
                ) from None
            if name not in runs:
                raise ValueError(f"{self.json_path} has no entries for run {name!r} of {algorithm!r}.")
            entries[run] = runs[name]
        count = min(sum(1 for k in entries[run] if k.startswith("step_")) for run in self.runs)
        self.steps = []
        for index in range(count):
            step_count = int(entries[self.runs[0]][f"step_{index}"]["step_count"])
            metrics = {
                run: {k: v for k, v in entries[run][f"step_{index}"].items() if k != "step_count"}
                for run in self.runs
            }
            self.steps.append({"step_count": step_count, "metrics": metrics})
        self.absolute = (
            {run: dict(entries[run][ABSOLUTE]) for run in self.runs}
            if all(ABSOLUTE in entries[run] for run in self.runs)
            else None
        )
        self._tensorboard_done = len(self.steps)


def read_metrics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``metrics.json`` file (the nested marl-eval dict)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise ValueError(f"{os.fspath(path)}: expected a JSON object at the top level.")
    return data
