"""Score matrices from runs, and per-task normalisation.

A run's score at an evaluation is the mean of that evaluation's episode values.
Scores of one algorithm form a ``(runs, tasks)`` matrix (final scores) or a
``(runs, tasks, evaluations)`` array (learning curves), the layout rliable uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from lamella.eval._src.errors import EvalError
from lamella.eval._src.runlog import Evaluation, Run, RunLogError

__all__ = ["Curves", "Scores", "curve_scores", "final_scores", "normalize"]


@dataclasses.dataclass(frozen=True)
class Scores:
    """Final scores of several algorithms on the same tasks.

    Attributes:
        metric: the metric the scores come from.
        tasks: task names ``environment/task``, the column order.
        values: algorithm -> float64 array ``(runs, tasks)``.
        source: ``absolute_metrics`` or ``last evaluation`` (where the numbers come from).
    """

    metric: str
    tasks: tuple[str, ...]
    values: Mapping[str, np.ndarray]
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Curves:
    """Learning curves of several algorithms on the same tasks.

    Attributes:
        metric: the metric the scores come from.
        tasks: task names ``environment/task``.
        values: algorithm -> float64 array ``(runs, tasks, evaluations)``.
        step_counts: algorithm -> float64 array ``(evaluations,)``, the mean
            ``step_count`` of each evaluation over runs and tasks.
    """

    metric: str
    tasks: tuple[str, ...]
    values: Mapping[str, np.ndarray]
    step_counts: Mapping[str, np.ndarray]


def _group(runs: Sequence[Run]) -> tuple[tuple[str, ...], dict[str, dict[str, list[Run]]]]:
    """algorithm -> task -> runs (sorted by name), checking every algorithm has every task."""
    tasks = tuple(sorted({f"{r.environment}/{r.task}" for r in runs}))
    grouped: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        grouped.setdefault(run.algorithm, {}).setdefault(f"{run.environment}/{run.task}", []).append(run)
    for algorithm, by_task in grouped.items():
        missing = [t for t in tasks if t not in by_task]
        if missing:
            raise RunLogError(
                f"algorithm {algorithm!r} has no runs on task(s) {', '.join(missing)}; every algorithm "
                "needs runs on every task (drop the task's logs or add the missing runs)"
            )
        counts = {t: len(rs) for t, rs in by_task.items()}
        if len(set(counts.values())) > 1:
            raise RunLogError(
                f"algorithm {algorithm!r} has different numbers of runs per task ({counts}); "
                "the stratified bootstrap needs the same number of runs on every task"
            )
        for rs in by_task.values():
            rs.sort(key=lambda r: r.run)
    return tasks, grouped


def _metric(values: Mapping[str, np.ndarray] | None, metric: str, run: Run, where: str) -> float:
    if values is None or metric not in values:
        have = sorted(values) if values else []
        raise RunLogError(
            f"{run.source}: run {run.name}, {where}: field {metric!r} is missing (fields: {have})"
        )
    return float(np.mean(values[metric]))


def final_scores(
    runs: Sequence[Run], metric: str, source: Literal["auto", "absolute", "last"] = "auto"
) -> Scores:
    """Final score of each run: a ``(runs, tasks)`` matrix per algorithm.

    Args:
        runs: runs from :func:`read_run_logs`.
        metric: the metric name, e.g. ``mean_episode_return``.
        source: ``absolute`` uses ``absolute_metrics``; ``last`` the last ``step_<i>``
            evaluation; ``auto`` uses ``absolute_metrics`` where every run has it and the
            last evaluation otherwise (the choice is recorded in ``Scores.source``).

    Raises:
        RunLogError: a run without the metric (naming the run and field), an algorithm
            missing a task, or unequal numbers of runs per task.
    """
    if source not in ("auto", "absolute", "last"):
        raise EvalError(f"source must be 'auto', 'absolute' or 'last', got {source!r}")
    if source == "auto":
        every = all(r.absolute_metrics is not None and metric in r.absolute_metrics for r in runs)
        source = "absolute" if every else "last"
    tasks, grouped = _group(runs)
    values = {}
    for algorithm, by_task in grouped.items():
        matrix = np.empty((len(by_task[tasks[0]]), len(tasks)))
        for m, task in enumerate(tasks):
            for n, run in enumerate(by_task[task]):
                if source == "absolute":
                    if not run.absolute_metrics:
                        raise RunLogError(
                            f"{run.source}: run {run.name}: no 'absolute_metrics'; score the last "
                            "evaluation instead: source='last' (--source last)"
                        )
                    matrix[n, m] = _metric(run.absolute_metrics, metric, run, "absolute_metrics")
                else:
                    if not run.evaluations:
                        raise RunLogError(
                            f"{run.source}: run {run.name}: no 'step_<i>' evaluation; score its "
                            "absolute_metrics instead: source='absolute' (--source absolute)"
                        )
                    last = run.evaluations[-1]
                    matrix[n, m] = _metric(last.metrics, metric, run, f"step_{last.index}")
        values[algorithm] = matrix
    label = "absolute_metrics" if source == "absolute" else "last evaluation"
    return Scores(metric, tasks, values, label)


def _from_first_with(evaluations: Sequence[Evaluation], metric: str) -> Sequence[Evaluation]:
    """``evaluations`` from the first that holds ``metric`` on (all of them where none does, so
    that the missing field is named): a training metric (``train_loss``) first appears in the
    evaluation after the first update, the one before training (``step_0``) has none."""
    first = next((i for i, e in enumerate(evaluations) if e.metrics and metric in e.metrics), 0)
    return evaluations[first:]


def _check_step_grid(algorithm: str, task: str, runs: Sequence[Run], counts: np.ndarray) -> None:
    """Refuse runs of one algorithm on one task whose evaluations (``counts``: ``(runs,
    evaluations)``) lie at different environment steps: their curve would be drawn at the mean.
    Differences within 5% (a producer counting finished episodes' steps) are taken as equal."""
    close = np.isclose(counts, counts[:1], rtol=0.05, atol=0.0)
    if close.all():
        return
    n, s = (int(i[0]) for i in np.nonzero(~close))
    raise RunLogError(
        f"algorithm {algorithm!r} on {task}: evaluation {s} is at {counts[0, s]:.0f} steps in run "
        f"{runs[0].name} but {counts[n, s]:.0f} in {runs[n].name}; a learning curve averages runs "
        "evaluation by evaluation, so they need the same evaluation steps: report runs of the same "
        "settings together, or give runs of other settings another algorithm name"
    )


def curve_scores(runs: Sequence[Run], metric: str, truncate: bool = False) -> Curves:
    """Score of each run at each evaluation: ``(runs, tasks, evaluations)`` per algorithm.

    Evaluations are aligned by their index ``i`` (``step_<i>``), from the first that holds
    ``metric`` (training metrics start after the first update); a later one without it is an error.

    Args:
        runs: runs from :func:`read_run_logs`.
        metric: the metric name.
        truncate: where runs of an algorithm have different numbers of evaluations, keep
            the first ``min`` of them instead of raising.

    Raises:
        RunLogError: a run without evaluations or without the metric, (unless ``truncate``)
            runs of one algorithm with different numbers of evaluations, or runs of one
            algorithm on one task evaluated at different environment steps.
    """
    tasks, grouped = _group(runs)
    values, step_counts = {}, {}
    for algorithm, by_task in grouped.items():
        members = [r for t in tasks for r in by_task[t]]
        evaluations = {id(r): _from_first_with(r.evaluations, metric) for r in members}
        lengths = {r.name: len(evaluations[id(r)]) for r in members}
        shortest = min(lengths.values())
        if shortest == 0:
            empty = next(name for name, n in lengths.items() if n == 0)
            raise RunLogError(f"run {empty} has no 'step_<i>' evaluation; learning curves need them")
        if not truncate and len(set(lengths.values())) > 1:
            longest = max(lengths, key=lengths.__getitem__)
            short = min(lengths, key=lengths.__getitem__)
            raise RunLogError(
                f"algorithm {algorithm!r}: run {short} has {lengths[short]} evaluations but run "
                f"{longest} has {lengths[longest]}; finish the runs or pass truncate=True "
                "(--truncate) to keep the first evaluations of every run"
            )
        num_runs = len(by_task[tasks[0]])
        array = np.empty((num_runs, len(tasks), shortest))
        counts = np.empty((num_runs, len(tasks), shortest))
        for m, task in enumerate(tasks):
            for n, run in enumerate(by_task[task]):
                for s, evaluation in enumerate(evaluations[id(run)][:shortest]):
                    array[n, m, s] = _metric(evaluation.metrics, metric, run, f"step_{evaluation.index}")
                    counts[n, m, s] = evaluation.step_count
        for m, task in enumerate(tasks):
            _check_step_grid(algorithm, task, by_task[task], counts[:, m])
        values[algorithm] = array
        step_counts[algorithm] = counts.mean(axis=(0, 1))
    return Curves(metric, tasks, values, step_counts)


def minmax_bounds(scores: Scores | Curves) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``, each ``(tasks,)``: the smallest and largest score on each task over every
    algorithm, run (and evaluation); where they are equal, min-max normalisation is undefined."""
    num_tasks = len(scores.tasks)
    stacked = [np.moveaxis(v, 1, 0).reshape(num_tasks, -1) for v in scores.values.values()]
    all_values = np.concatenate(stacked, axis=1)
    return all_values.min(axis=1), all_values.max(axis=1)


def _reference_pair(task: str, pair: object) -> tuple[float, float]:
    """``(low, high)`` of a reference mapping's value for ``task``: two finite numbers."""
    values = None
    if not isinstance(pair, (str, bytes, Mapping)):
        try:
            values = np.asarray(pair)
        except (TypeError, ValueError):  # ragged nesting
            values = None
    if values is None or values.shape != (2,) or values.dtype.kind not in "iuf":
        raise EvalError(
            f"the reference scores of task {task!r} are {pair!r:.80}; expected a (low, high) pair of two "
            f"numbers, e.g. {{{task!r}: (random_return, expert_return)}}"
        )
    low, high = (float(v) for v in values)
    if not (np.isfinite(low) and np.isfinite(high)):
        raise EvalError(
            f"the reference scores of task {task!r} are ({low}, {high}); both must be finite numbers: "
            "give the task's (low, high) reference returns"
        )
    return low, high


def normalize(
    scores: Scores | Curves, reference: Mapping[str, tuple[float, float]] | Literal["minmax"] = "minmax"
) -> Scores | Curves:
    """Normalise scores per task: ``(score - low) / (high - low)``.

    Args:
        scores: final scores or curves.
        reference: ``"minmax"`` takes ``low``/``high`` as the smallest and largest score on
            the task over every algorithm, run (and evaluation); a mapping gives
            ``task -> (low, high)`` reference scores (e.g. random and expert returns), keyed by
            ``environment/task`` or by the bare task name. ``low`` is the score that becomes 0
            and ``high`` the one that becomes 1, so for a metric where lower is better (an
            episode length, a cost) give ``(worst, best)`` with ``worst > best``: normalised
            scores then grow with quality, as the aggregates assume.

    Raises:
        EvalError: a task without a reference, a reference that is not a pair of two finite
            numbers, or ``high == low`` (normalisation would divide by zero).
    """
    num_tasks = len(scores.tasks)
    if reference == "minmax":
        low, high = minmax_bounds(scores)
    elif isinstance(reference, Mapping):
        low, high = np.empty(num_tasks), np.empty(num_tasks)
        for m, task in enumerate(scores.tasks):
            bare = task.split("/", 1)[-1]
            pair = reference.get(task, reference.get(bare))
            if pair is None:
                raise EvalError(f"no reference scores for task {task!r}; give (low, high) for it")
            low[m], high[m] = _reference_pair(task, pair)
            if low[m] == high[m]:
                raise EvalError(
                    f"task {task!r} has low == high == {low[m]} in its reference scores; normalisation "
                    "would divide by zero: give two different scores, e.g. a random policy's and an "
                    "expert's return"
                )
    else:
        raise EvalError(f"reference must be 'minmax' or a mapping task -> (low, high), got {reference!r}")
    flat = np.flatnonzero(high == low)
    if flat.size:
        raise EvalError(
            f"task {scores.tasks[flat[0]]!r} has low == high == {low[flat[0]]}; normalisation would divide "
            "by zero (every score on it is equal): give reference scores, or do not normalise (--normalize none)"
        )
    shape = (1, num_tasks) + (1,) * (next(iter(scores.values.values())).ndim - 2)
    low, high = low.reshape(shape), high.reshape(shape)
    normalized = {a: (v - low) / (high - low) for a, v in scores.values.items()}
    return dataclasses.replace(scores, values=normalized)
