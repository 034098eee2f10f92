"""Reading and writing the run-log format (docs/run-log-format.md).

The format is marl-eval's nested JSON: environment -> task -> algorithm -> run ->
``step_<i>`` / ``absolute_metrics`` -> metric -> list of numbers. Files written by
Mava, Stoix or any other marl-eval producer read the same way. Every value is
checked while reading; a file in the wrong shape raises :class:`RunLogError`
naming the file, the run and the field, never a silent skip.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError, EvalFileNotFoundError, one_or_many

__all__ = [
    "CSV_HEADER",
    "Evaluation",
    "Run",
    "RunLogError",
    "read_csv",
    "read_run_log",
    "read_run_logs",
    "runs_from_dict",
    "write_csv",
]

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
"""The columns of a ``metrics.csv`` file, in the order :func:`write_csv` writes them; :func:`read_csv`
finds them by name in the file's own header."""

_STEP_KEY = re.compile(r"^step_(\d+)$")
ABSOLUTE = "absolute_metrics"


class RunLogError(EvalError):
    """A run log that does not follow the format; the message names the file, run and field."""


class _NotFound(RunLogError, EvalFileNotFoundError):
    """A path without a run log (also a ``FileNotFoundError``)."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One evaluation of a run.

    Attributes:
        index: ``i`` of the ``step_<i>`` key (evaluations in order).
        step_count: environment steps taken so far (int).
        metrics: metric name -> float64 array of shape ``(episodes,)``.
    """

    index: int
    step_count: int
    metrics: Mapping[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run (one seed of one algorithm on one task).

    Attributes:
        environment: the environment family, e.g. ``classic_control``.
        task: the task (env id), e.g. ``CartPole-v1``.
        algorithm: the algorithm (runner) name, e.g. ``ppo``.
        run: the run's name, e.g. ``seed_0``.
        evaluations: the ``step_<i>`` evaluations, sorted by index.
        absolute_metrics: metric name -> float64 array ``(episodes,)`` of the final
            policy's evaluation, or ``None`` where the file has none.
        source: the file the run was read from.
    """

    environment: str
    task: str
    algorithm: str
    run: str
    evaluations: tuple[Evaluation, ...]
    absolute_metrics: Mapping[str, np.ndarray] | None
    source: str = ""

    @property
    def name(self) -> str:
        """``environment/task/algorithm/run``, the name errors use."""
        return f"{self.environment}/{self.task}/{self.algorithm}/{self.run}"


def _fail(source: str, where: str, message: str) -> RunLogError:
    prefix = f"{source}: " if source else ""
    return RunLogError(f"{prefix}{where}: {message}")


def _values(raw: Any, source: str, where: str, field: str) -> np.ndarray:
    """A metric's values as a float64 array; a single number is a list of one."""
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise _fail(source, where, f"field {field!r} is an empty list; write at least one number")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise _fail(
                source, where, f"field {field!r} holds {item!r}; expected a number or a list of numbers"
            )
        if not math.isfinite(item):
            raise _fail(source, where, f"field {field!r} holds {item!r}; numbers must be finite")
    return np.asarray(items, dtype=np.float64)


def _mapping(raw: Any, source: str, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise _fail(source, where, f"expected an object of {what}, found {type(raw).__name__}")
    return raw


def _read_run(environment: str, task: str, algorithm: str, run: str, raw: Any, source: str) -> Run:
    where = f"run {environment}/{task}/{algorithm}/{run}"
    body = _mapping(raw, source, where, "'step_<i>' / 'absolute_metrics' entries")
    evaluations = []
    absolute = None
    for key, entry in body.items():
        if key == ABSOLUTE:
            fields = _mapping(entry, source, f"{where}, {ABSOLUTE}", "metric lists")
            absolute = {
                name: _values(value, source, f"{where}, {ABSOLUTE}", name) for name, value in fields.items()
            }
            continue
        match = _STEP_KEY.match(key)
        if match is None:
            raise _fail(
                source, where, f"unexpected field {key!r}; expected 'step_<i>' or {ABSOLUTE!r} entries"
            )
        step_where = f"{where}, {key}"
        fields = _mapping(entry, source, step_where, "metric lists")
        if "step_count" not in fields:
            raise _fail(source, step_where, "field 'step_count' is missing (environment steps so far)")
        count = fields["step_count"]
        if isinstance(count, float) and count.is_integer():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise _fail(source, step_where, f"field 'step_count' is {count!r}; expected an int >= 0")
        metrics = {
            name: _values(value, source, step_where, name)
            for name, value in fields.items()
            if name != "step_count"
        }
        evaluations.append(Evaluation(int(match.group(1)), count, metrics))
    evaluations.sort(key=lambda e: e.index)
    if not evaluations and absolute is None:
        raise _fail(source, where, f"the run holds no 'step_<i>' evaluation and no {ABSOLUTE!r}")
    return Run(environment, task, algorithm, run, tuple(evaluations), absolute, source)


def runs_from_dict(data: Any, source: str = "") -> list[Run]:
    """Runs from a parsed marl-eval JSON object (environment -> task -> algorithm -> run).

    Args:
        data: the parsed JSON.
        source: the file name errors mention.

    Raises:
        RunLogError: a level that is not an object, a missing ``step_count``, a value that
            is not a finite number, an unexpected key; the message names the run and field.
    """
    runs = []
    for environment, tasks in _mapping(data, source, "top level", "environments").items():
        for task, algorithms in _mapping(tasks, source, f"environment {environment}", "tasks").items():
            task_where = f"task {environment}/{task}"
            for algorithm, named_runs in _mapping(algorithms, source, task_where, "algorithms").items():
                algo_where = f"algorithm {environment}/{task}/{algorithm}"
                for run, raw in _mapping(named_runs, source, algo_where, "runs").items():
                    runs.append(_read_run(environment, task, algorithm, run, raw, source))
    if not runs:
        raise _fail(source, "top level", "no runs found")
    return runs


def _find_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise _NotFound(f"{path}: no such file or directory; check the path")
    for name in ("metrics.json", "metrics.csv"):
        if os.path.isfile(os.path.join(path, name)):
            return [os.path.join(path, name)]
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if "metrics.json" in files:
            found.append(os.path.join(root, "metrics.json"))
        elif "metrics.csv" in files:
            found.append(os.path.join(root, "metrics.csv"))
    if not found:
        raise _NotFound(
            f"{path}: no metrics.json or metrics.csv in this directory or below it; pass run "
            "directories written by lamella train (or run-log files)"
        )
    return found


def read_run_log(path: str | os.PathLike[str]) -> list[Run]:
    """Read one run-log file (``.json`` or ``.csv``).

    Args:
        path: a marl-eval JSON file (``metrics.json``) or its CSV view (``metrics.csv``).

    Returns:
        The runs in the file, in file order.

    Raises:
        RunLogError: the file does not parse or is in the wrong shape.
    """
    path = os.fspath(path)
    if path.endswith(".csv"):
        return read_csv(path)
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        csv_view = os.path.join(os.path.dirname(path), "metrics.csv")
        fix = f"pass {csv_view} instead, or rerun" if os.path.isfile(csv_view) else "rerun or restore it"
        raise RunLogError(
            f"{path}: not valid JSON ({error}); the file is cut short or damaged: {fix}"
        ) from None
    return runs_from_dict(data, path)


def read_run_logs(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Run]:
    """Read run logs from files and directories (one, or a list of them) and merge them.

    A directory holding ``metrics.json`` (or ``metrics.csv``) is read; any other
    directory is searched below for those files.

    Raises:
        RunLogError: a file in the wrong shape, or the same run in two files.
    """
    runs: list[Run] = []
    seen: dict[tuple[str, str, str, str], str] = {}
    for path in one_or_many(paths, "read_run_logs"):
        for file in _find_files(os.fspath(path)):
            for run in read_run_log(file):
                key = (run.environment, run.task, run.algorithm, run.run)
                if key in seen:
                    raise RunLogError(
                        f"run {run.name} appears in both {seen[key]} and {file}; "
                        "rename one run or pass only one of the files"
                    )
                seen[key] = file
                runs.append(run)
    if not runs:
        raise RunLogError("no run logs given")
    return runs


def _csv_rows(runs: Sequence[Run]) -> Iterable[tuple[Any, ...]]:
    for run in runs:
        head = (run.environment, run.task, run.algorithm, run.run)
        for evaluation in run.evaluations:
            for metric, values in evaluation.metrics.items():
                for i, value in enumerate(values):
                    yield (*head, evaluation.index, evaluation.step_count, metric, i, repr(float(value)))
        for metric, values in (run.absolute_metrics or {}).items():
            for i, value in enumerate(values):
                yield (*head, ABSOLUTE, "", metric, i, repr(float(value)))


def write_csv(runs: Sequence[Run], path: str | os.PathLike[str]) -> None:
    """Write the CSV view of ``runs`` (header :data:`CSV_HEADER`, one row per value).

    ``step`` is the evaluation index ``i``, or ``absolute_metrics`` (with an empty
    ``step_count``) for the final evaluation. Written atomically.
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(CSV_HEADER)
        writer.writerows(_csv_rows(runs))
    os.replace(tmp, path)


def read_csv(path: str | os.PathLike[str]) -> list[Run]:
    """Read the CSV view of a run log (see :func:`write_csv`).

    Raises:
        RunLogError: a wrong header, or a row whose field does not parse; the message
            names the line, the run and the field.
    """
    path = os.fspath(path)
    tree: dict[str, Any] = {}
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv.reader(file)
        # Columns are found by the names in the file's header (the writer may order them or add
        # columns as it likes); the ones this reader needs must be there.
        header = tuple(next(reader, ()))
        missing = [name for name in CSV_HEADER if name not in header]
        if missing:
            raise RunLogError(
                f"{path}: header {','.join(header)!r} lacks the column(s) {', '.join(missing)}; "
                f"a run-log CSV needs {', '.join(CSV_HEADER)}"
            )
        column = [header.index(name) for name in CSV_HEADER]
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise RunLogError(f"{path}: line {line} has {len(row)} fields; expected {len(header)}")
            environment, task, algorithm, run, step, step_count, metric, value_index, value = (
                row[i] for i in column
            )
            where = f"line {line}, run {environment}/{task}/{algorithm}/{run}"
            entries = tree.setdefault(environment, {}).setdefault(task, {}).setdefault(algorithm, {})
            entries = entries.setdefault(run, {})
            if step == ABSOLUTE:
                fields = entries.setdefault(ABSOLUTE, {})
            else:
                if not step.isdigit():
                    raise _fail(path, where, f"field 'step' is {step!r}; expected an int or {ABSOLUTE!r}")
                fields = entries.setdefault(f"step_{step}", {})
                try:
                    count = int(step_count)
                except ValueError:
                    raise _fail(
                        path, where, f"field 'step_count' is {step_count!r}; expected an int"
                    ) from None
                if fields.setdefault("step_count", count) != count:
                    raise _fail(path, where, f"field 'step_count' changes within step {step}")
            try:
                index, number = int(value_index), float(value)
            except ValueError:
                raise _fail(
                    path,
                    where,
                    f"fields 'value_index', 'value' are {value_index!r}, {value!r}; expected int, number",
                ) from None
            values = fields.setdefault(metric, [])
            if index != len(values):
                raise _fail(
                    path, where, f"field 'value_index' is {index}; expected {len(values)} (rows in order)"
                )
            values.append(number)
    return runs_from_dict(tree, path)
