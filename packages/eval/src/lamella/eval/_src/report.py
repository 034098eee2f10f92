"""``lamella eval report``: one self-contained HTML file over run directories.

The report holds, in this order (each a ``<section>`` with a fixed ``id``):

- ``runs``: the run directories and the runs in them;
- ``curves``: learning curves per task, the mean over runs of each algorithm with its
  stratified-bootstrap interval at every evaluation;
- ``aggregates``: IQM, mean, median and optimality gap of the (normalised) final scores with
  intervals, as a table and a plot;
- ``improvement``: the probability-of-improvement matrix (two or more algorithms);
- ``profiles``: performance profiles with interval bands;
- ``breakdown``: per-agent and per-level values (run-log keys ``<metric>_agent_<i>`` and
  ``<metric>_level_<i>``, written by multi-agent and UED runners), the levels named as the
  ``eval_levels`` of the run's ``config.json``;
- ``episodes``: a GIF of one episode of each run directory's final checkpoint (needs the
  ``lamella-eval[checkpoints]`` extra and a runner that can draw its episodes);
- ``config``: the configuration keys whose values differ between run directories;
- ``system``: device, versions and wall time of each run directory.

A section that has nothing to show (one algorithm for the improvement matrix, no checkpoints for
the episodes, ...) holds a note saying why instead. The numbers come from lamella-eval's own
aggregation (:mod:`lamella.eval._src.bootstrap`); the plots are Plotly figures with plotly.js
inlined once, the GIFs data URIs, so the file opens without a network. Plotly is the
``lamella-eval[report]`` extra, imported only here.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import html
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError, EvalFileNotFoundError, MissingExtraError

__all__ = ["SECTIONS", "RunDir", "find_run_dirs", "write_report"]

SECTIONS = (
    ("runs", "Runs"),
    ("curves", "Learning curves"),
    ("aggregates", "Aggregate scores"),
    ("improvement", "Probability of improvement"),
    ("profiles", "Performance profiles"),
    ("breakdown", "Per-agent and per-level breakdown"),
    ("episodes", "Episodes of the final checkpoints"),
    ("config", "Configuration differences"),
    ("system", "Devices, versions and wall time"),
)
"""``(id, title)`` of the report's sections, in order."""

_AXIS_KEY = re.compile(r"^(?P<base>.+)_(?P<axis>agent|level)_(?P<index>\d+)$")


@dataclasses.dataclass
class RunDir:
    """One run-log file and what lies beside it.

    Attributes:
        path: the directory holding the run log.
        log: the run-log file (``metrics.json`` or ``metrics.csv``).
        runs: the runs it holds (:class:`lamella.eval.Run`).
        config: the parsed ``config.json`` beside it, or None.
    """

    path: str
    log: str
    runs: list[Any]
    config: dict[str, Any] | None

    @property
    def label(self) -> str:
        return self.path


def require_report_extra() -> None:
    """Raise :class:`MissingExtraError` unless Plotly is installed."""
    import importlib.util

    if importlib.util.find_spec("plotly") is None:
        raise MissingExtraError(
            "lamella eval report needs plotly; install it with: pip install 'lamella-eval[report]'"
        )


def _read_config(directory: str) -> dict[str, Any] | None:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EvalError(f"{path}: not valid JSON ({error}); restore the file or move it away.") from None
    if not isinstance(data, dict):
        raise EvalError(f"{path}: expected a JSON object (the run's settings), found {type(data).__name__}.")
    return data


def find_run_dirs(paths: Sequence[str]) -> list[RunDir]:
    """The run directories under ``paths`` (each directory holding a run log), read.

    Raises:
        EvalFileNotFoundError: no paths, a missing path, or no run log anywhere.
        RunLogError: a run log in the wrong shape, or one run in two files.
    """
    from lamella.eval._src.runlog import RunLogError, _find_files, read_run_log

    if not paths:
        raise EvalFileNotFoundError("No runs given; pass run directories written by lamella train.")
    found: list[RunDir] = []
    skipped: list[str] = []
    for path in paths:
        if not os.path.exists(path):
            raise EvalFileNotFoundError(f"{path}: no such file or directory; check the path.")
        try:
            files = _find_files(path)
        except EvalFileNotFoundError:
            skipped.append(path)
            continue
        for file in files:
            if not file.endswith((".json", ".csv")):
                skipped.append(file)
                continue
            directory = os.path.dirname(file) or "."
            found.append(RunDir(directory, file, read_run_log(file), _read_config(directory)))
    if not found:
        raise EvalFileNotFoundError(
            f"No run log (metrics.json or metrics.csv) in {', '.join(paths)} or below; pass run "
            "directories written by lamella train, or run-log files."
        )
    if skipped:
        print(
            f"lamella eval report: skipped {', '.join(skipped)} (no metrics.json or metrics.csv)",
            file=sys.stderr,
        )
    seen: dict[tuple[str, str, str, str], str] = {}
    for run_dir in found:
        for run in run_dir.runs:
            key = (run.environment, run.task, run.algorithm, run.run)
            if key in seen:
                raise RunLogError(
                    f"run {run.name} appears in both {seen[key]} and {run_dir.log}; "
                    "rename one run or pass only one of the files"
                )
            seen[key] = run_dir.log
    return found


def _writer_version(run_dir: RunDir) -> str | None:
    versions = (run_dir.config or {}).get("versions")
    if isinstance(versions, dict):
        value = versions.get("lamella-agents")
        return str(value) if value is not None else None
    return None


def check_consistent(run_dirs: Sequence[RunDir], metric: str, allow_mixed_versions: bool = False) -> None:
    """Refuse run logs that cannot be compared: a metric some hold and others do not (logs of
    different formats, e.g. a marl-eval producer's ``episode_return`` beside lamella's
    ``mean_episode_return``), or logs written by different lamella-agents versions."""
    holders: list[tuple[RunDir, set[str]]] = []
    lacking: list[tuple[RunDir, set[str]]] = []
    available: set[str] = set()
    for run_dir in run_dirs:
        keys: set[str] = set()
        for run in run_dir.runs:
            keys.update(run.absolute_metrics or ())
            for evaluation in run.evaluations:
                keys.update(evaluation.metrics)
        available |= keys
        (holders if metric in keys else lacking).append((run_dir, keys))
    if not holders:
        raise EvalError(
            f"Unknown metric {metric!r}: no run holds it; the run logs hold {', '.join(sorted(available))}. "
            "Pass one of them with --metric."
        )
    if lacking:
        names = ", ".join(
            f"{d.log} (holds {', '.join(sorted(k for k in keys if not _AXIS_KEY.match(k))[:6])})"
            for d, keys in lacking
        )
        raise EvalError(
            f"Run logs of different formats: {holders[0][0].log} holds {metric!r} but {names} do not; "
            "report runs whose logs hold the same metric (pass --metric, or convert the other logs)."
        )
    versions: dict[str, list[str]] = {}
    for run_dir in run_dirs:
        version = _writer_version(run_dir)
        if version is not None:
            versions.setdefault(version, []).append(run_dir.path)
    if len(versions) > 1 and not allow_mixed_versions:
        listed = "; ".join(f"lamella-agents {v}: {', '.join(p)}" for v, p in sorted(versions.items()))
        raise EvalError(
            f"Run logs written by different versions ({listed}); rerun them with one version, or "
            "pass --allow-mixed-versions to compare them anyway (the report lists each run's versions)."
        )


# --- HTML helpers -------------------------------------------------------------------------------


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


class _Figures:
    """Plotly figures as ``<div>`` snippets (plotly.js is inlined once, in the page head)."""

    def __init__(self) -> None:
        import plotly.graph_objects as go

        self.go = go
        self.count = 0

    def html(self, figure: Any, height: int = 420) -> str:
        self.count += 1
        figure.update_layout(
            height=height, margin={"l": 60, "r": 20, "t": 50, "b": 50}, template="plotly_white"
        )
        return str(
            figure.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id=f"figure-{self.count}",
                config={"displaylogo": False, "responsive": True},
            )
        )


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _band(
    go: Any, x: Sequence[float], low: Sequence[float], high: Sequence[float], color: str, name: str
) -> Any:
    return go.Scatter(
        x=[*x, *reversed(x)],
        y=[*high, *reversed(low)],
        fill="toself",
        fillcolor=_rgba(color, 0.2),
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        legendgroup=name,
        name=f"{name} interval",
    )


# --- sections -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Options:
    metric: str
    reference: Any
    source: str
    reps: int
    confidence: float
    key: int
    truncate: bool
    gifs: bool
    gif_seed: int


def _runs_section(run_dirs: Sequence[RunDir]) -> str:
    rows = []
    for d in run_dirs:
        by_group: dict[tuple[str, str, str], list[Any]] = {}
        for run in d.runs:
            by_group.setdefault((run.environment, run.task, run.algorithm), []).append(run)
        for (environment, task, algorithm), runs in by_group.items():
            evaluations = max(len(r.evaluations) for r in runs)
            steps = max((r.evaluations[-1].step_count for r in runs if r.evaluations), default=0)
            rows.append([d.path, algorithm, f"{environment}/{task}", len(runs), evaluations, f"{steps:,}"])
    return _table(["run directory", "algorithm", "task", "runs", "evaluations", "environment steps"], rows)


def _curves_section(runs: Sequence[Any], opts: _Options, figures: _Figures) -> str:
    from lamella.eval._src.bootstrap import sample_efficiency
    from lamella.eval._src.runlog import RunLogError
    from lamella.eval._src.scores import curve_scores

    go = figures.go
    by_task: dict[str, list[Any]] = {}
    for run in runs:
        by_task.setdefault(f"{run.environment}/{run.task}", []).append(run)
    parts = []
    for task, task_runs in sorted(by_task.items()):
        without = sorted({r.algorithm for r in task_runs if not r.evaluations})
        kept = [r for r in task_runs if r.algorithm not in without]
        if without:
            parts.append(
                _note(f"{task}: {', '.join(without)} logged no step_<i> evaluation (no learning curve).")
            )
        if not kept:
            continue
        try:
            curves = curve_scores(kept, opts.metric, truncate=opts.truncate)
        except RunLogError as error:
            raise EvalError(f"Learning curves of {task}: {error}") from None
        estimates = sample_efficiency(
            curves.values,
            curves.step_counts,
            ("mean",),
            reps=opts.reps,
            confidence=opts.confidence,
            key=opts.key,
        )
        figure = go.Figure()
        for n, algorithm in enumerate(estimates.point):
            color = _COLORS[n % len(_COLORS)]
            x = estimates.x[algorithm].tolist()
            figure.add_trace(
                _band(
                    go,
                    x,
                    estimates.lower[algorithm][0].tolist(),
                    estimates.upper[algorithm][0].tolist(),
                    color,
                    algorithm,
                )
            )
            runs_count = curves.values[algorithm].shape[0]
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=estimates.point[algorithm][0].tolist(),
                    mode="lines+markers",
                    name=f"{algorithm} ({runs_count} runs)",
                    legendgroup=algorithm,
                    line={"color": color},
                )
            )
        figure.update_layout(
            title=f"{task}: mean {opts.metric} over runs, {opts.confidence:.0%} bootstrap interval",
            xaxis_title="environment steps",
            yaxis_title=opts.metric,
        )
        parts.append(figures.html(figure))
    if not parts:
        return _note("No run logged step_<i> evaluations, so there are no learning curves.")
    return "".join(parts)


def _final(runs: Sequence[Any], opts: _Options) -> tuple[Any, str]:
    """The final scores, normalised as asked, and a note where they could not be.

    Min-max normalisation (the default) is undefined on a task whose final scores are all equal:
    one run, or runs that all scored alike (CartPole solved by every seed). The report then shows
    the scores as they are, and says so, rather than failing (``aggregate`` raises instead).
    """
    from lamella.eval._src.scores import final_scores, minmax_bounds, normalize

    scores = final_scores(runs, opts.metric, opts.source)  # type: ignore[arg-type]
    if opts.reference == "minmax":
        low, high = minmax_bounds(scores)
        equal = [f"{task} ({low[m]:g})" for m, task in enumerate(scores.tasks) if low[m] == high[m]]
        if equal:
            return scores, (
                f"Not normalised: every final {opts.metric} is the same on {', '.join(equal)}, so min-max "
                "normalisation (the default) is undefined there; these sections show the scores as they "
                'are. Pass --normalize REFERENCE.json, {"task": [low, high]}, to normalise by reference '
                "scores."
            )
    if opts.reference is not None:
        scores = normalize(scores, opts.reference)  # type: ignore[assignment]
    return scores, ""


def _aggregate_sections(runs: Sequence[Any], opts: _Options, figures: _Figures) -> dict[str, str]:
    from lamella.eval._src import tables
    from lamella.eval._src.bootstrap import (
        interval_estimates,
        performance_profiles,
        probability_of_improvement_estimates,
    )
    from lamella.eval._src.estimates import STATISTICS
    from lamella.eval._src.runlog import RunLogError

    go = figures.go
    try:
        scores, unnormalised = _final(runs, opts)
    except RunLogError as error:
        note = _note(f"Not computed: {error}.")
        return {"aggregates": note, "improvement": note, "profiles": note}
    normalised = opts.reference is not None and not unnormalised
    label = f"{'normalised ' if normalised else ''}{opts.metric}"
    lead = _note(unnormalised) if unnormalised else ""
    out = {}

    # The optimality gap's threshold (1) is a normalised score: on raw returns it says nothing.
    statistics = STATISTICS if normalised else tuple(n for n in STATISTICS if n != "optimality_gap")
    estimates = interval_estimates(
        scores.values, statistics, reps=opts.reps, confidence=opts.confidence, key=opts.key
    )
    header, rows = tables.estimates_table(estimates)
    caption = (
        f"{label} ({scores.source}) over {len(scores.tasks)} task(s): point estimate "
        f"[{opts.confidence:.0%} stratified-bootstrap percentile interval, {opts.reps} replicates]"
        + ("" if normalised else "; no optimality gap: its threshold of 1 is a normalised score")
    )
    figure = go.Figure()
    for n, algorithm in enumerate(estimates.point):
        point = estimates.point[algorithm]
        figure.add_trace(
            go.Bar(
                x=list(estimates.labels),
                y=point.tolist(),
                name=algorithm,
                marker_color=_COLORS[n % len(_COLORS)],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (estimates.upper[algorithm] - point).tolist(),
                    "arrayminus": (point - estimates.lower[algorithm]).tolist(),
                },
            )
        )
    figure.update_layout(barmode="group", title=f"Aggregates of {label}", yaxis_title=label)
    out["aggregates"] = (
        f"{lead}<p>{_esc(caption)}</p>" + _table(header, rows, "aggregate") + figures.html(figure)
    )

    algorithms = list(scores.values)
    if len(algorithms) > 1:
        improvement = probability_of_improvement_estimates(
            scores.values, reps=opts.reps, confidence=opts.confidence, key=opts.key + 2
        )
        matrix = np.full((len(algorithms), len(algorithms)), np.nan)
        text = [["" for _ in algorithms] for _ in algorithms]
        for i, (x, y) in enumerate(improvement.pairs):
            a, b = algorithms.index(x), algorithms.index(y)
            matrix[a, b] = improvement.point[i]
            text[a][b] = (
                f"{improvement.point[i]:.2f} [{improvement.lower[i]:.2f}, {improvement.upper[i]:.2f}]"
            )
            if np.isnan(matrix[b, a]):  # P(Y > X) = 1 - P(X > Y) (ties count one half)
                matrix[b, a] = 1.0 - improvement.point[i]
                text[b][a] = (
                    f"{1 - improvement.point[i]:.2f} [{1 - improvement.upper[i]:.2f}, {1 - improvement.lower[i]:.2f}]"
                )
        figure = go.Figure(
            go.Heatmap(
                z=[[None if np.isnan(v) else float(v) for v in row] for row in matrix],
                x=algorithms,
                y=algorithms,
                text=text,
                texttemplate="%{text}",
                zmin=0.0,
                zmax=1.0,
                colorscale="RdBu",
                colorbar={"title": "P(row > column)"},
            )
        )
        figure.update_layout(
            title=f"P(row > column) on {label}", xaxis_title="column (Y)", yaxis_title="row (X)"
        )
        header, rows = tables.improvement_table(improvement)
        out["improvement"] = (
            lead + figures.html(figure, 380 + 30 * len(algorithms)) + _table(header, rows, "improvement")
        )
    else:
        out["improvement"] = _note(
            f"Only one algorithm ({algorithms[0]}): probability of improvement compares two or more."
        )

    values = np.concatenate([v.reshape(-1) for v in scores.values.values()])
    low, high = float(values.min()), float(values.max())
    taus = np.linspace(low, high if high > low else low + 1.0, 101)
    profiles = performance_profiles(
        scores.values, taus, reps=opts.reps, confidence=opts.confidence, key=opts.key + 1
    )
    figure = go.Figure()
    for n, algorithm in enumerate(profiles.point):
        color = _COLORS[n % len(_COLORS)]
        x = taus.tolist()
        figure.add_trace(
            _band(
                go,
                x,
                profiles.lower[algorithm].tolist(),
                profiles.upper[algorithm].tolist(),
                color,
                algorithm,
            )
        )
        figure.add_trace(
            go.Scatter(
                x=x,
                y=profiles.point[algorithm].tolist(),
                mode="lines",
                name=algorithm,
                legendgroup=algorithm,
                line={"color": color},
            )
        )
    figure.update_layout(
        title=f"Fraction of runs with {label} > tau",
        xaxis_title=f"tau ({label})",
        yaxis_title="fraction of runs",
        yaxis_range=[0, 1.02],
    )
    out["profiles"] = lead + figures.html(figure)
    return out


def _level_names(run_dirs: Sequence[RunDir]) -> dict[str, tuple[str, ...]]:
    """Run-log file -> the names of its evaluation levels: ``config.eval_levels`` of the
    ``config.json`` beside it (the UED runners' ``<metric>_level_<i>`` follow that order)."""
    names = {}
    for run_dir in run_dirs:
        config = (run_dir.config or {}).get("config")
        levels = config.get("eval_levels") if isinstance(config, dict) else None
        if isinstance(levels, str):  # a config.json written by hand: one level
            levels = [levels]
        if isinstance(levels, list) and levels and all(isinstance(n, str) and n for n in levels):
            names[run_dir.log] = tuple(levels)
    return names


def _axis_labels(axis: str, indices: set[int], names: Sequence[str] | None) -> dict[int, str]:
    """``index -> label``: the level's name where the run's config names exactly the levels its
    log holds (``name (level i)`` for a name given twice), else ``"<axis> <i>"``."""
    if axis != "level" or names is None or indices != set(range(len(names))):
        return {i: f"{axis} {i}" for i in indices}
    return {i: names[i] if names.count(names[i]) == 1 else f"{names[i]} (level {i})" for i in indices}


def _breakdown_section(
    runs: Sequence[Any], opts: _Options, figures: _Figures, level_names: dict[str, tuple[str, ...]]
) -> str:
    """Per-agent / per-level values of the final evaluation: mean over runs with intervals."""
    from lamella.eval._src.bootstrap import interval_estimates

    go = figures.go
    # (base, axis) -> group "algorithm @ task" -> (index, label) -> per-run values
    table: dict[tuple[str, str], dict[str, dict[tuple[int, str], list[float]]]] = {}
    for run in runs:
        final: dict[str, np.ndarray] = {}
        for evaluation in run.evaluations:
            final.update(evaluation.metrics)  # the last evaluation that logged a key wins
        final.update(run.absolute_metrics or {})
        group = f"{run.algorithm} @ {run.task}"
        found: dict[tuple[str, str], dict[int, float]] = {}
        for name, values in final.items():
            match = _AXIS_KEY.match(name)
            if match is None or _AXIS_KEY.match(match["base"]):  # two axes: not broken down here
                continue
            found.setdefault((match["base"], match["axis"]), {})[int(match["index"])] = float(np.mean(values))
        for (base, axis), by_index in found.items():
            labels = _axis_labels(axis, set(by_index), level_names.get(run.source))
            by_label = table.setdefault((base, axis), {}).setdefault(group, {})
            for index, value in by_index.items():
                by_label.setdefault((index, labels[index]), []).append(value)
    if not table:
        return _note(
            "The run logs hold no per-agent or per-level metrics (keys <metric>_agent_<i> or "
            "<metric>_level_<i>, written by multi-agent and UED runners)."
        )
    parts = []
    for (base, axis), by_group in sorted(table.items()):
        figure = go.Figure()
        rows = []
        notes = []
        for n, (group, by_label) in enumerate(sorted(by_group.items())):
            keys = sorted(by_label)
            sizes = {len(by_label[k]) for k in keys}
            if len(sizes) != 1:
                held = ", ".join(f"{label} in {len(by_label[(i, label)])}" for i, label in keys)
                notes.append(
                    f"{group}: not shown, its runs hold different {axis}s ({held} runs); report runs "
                    f"of one {axis} layout (the same eval_levels or number of agents) together."
                )
                continue
            matrices = {str(k): np.asarray(by_label[k])[:, None] for k in keys}
            estimates = interval_estimates(
                matrices, ("mean",), reps=opts.reps, confidence=opts.confidence, key=opts.key + 4
            )
            point = np.array([estimates.point[str(k)][0] for k in keys])
            lower = np.array([estimates.lower[str(k)][0] for k in keys])
            upper = np.array([estimates.upper[str(k)][0] for k in keys])
            figure.add_trace(
                go.Bar(
                    x=[label for _, label in keys],
                    y=point.tolist(),
                    name=f"{group} ({sizes.pop()} runs)",
                    marker_color=_COLORS[n % len(_COLORS)],
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": (upper - point).tolist(),
                        "arrayminus": (point - lower).tolist(),
                    },
                )
            )
            rows += [
                [group, label, f"{point[j]:.3f} [{lower[j]:.3f}, {upper[j]:.3f}]"]
                for j, (_, label) in enumerate(keys)
            ]
        figure.update_layout(
            barmode="group",
            title=f"{base} per {axis} (final evaluation, mean over runs, {opts.confidence:.0%} interval)",
            yaxis_title=base,
        )
        parts.append(
            f"<h3>{_esc(base)} per {_esc(axis)}</h3>"
            + "".join(_note(note) for note in notes)
            + (figures.html(figure, 380) if rows else "")
            + _table(["algorithm @ task", axis, f"mean [{opts.confidence:.0%} interval]"], rows, "breakdown")
        )
    return "".join(parts)


def _checkpoint_gifs(run_dir: RunDir, seed: int) -> list[tuple[str | None, str]]:
    """``(data URI or None, caption or the reason there is none)`` for one run directory: one
    episode of each config its final checkpoint holds (one, or each config of a sweep's program)."""
    import jax

    from lamella.agents import checkpoint as ckpt
    from lamella.agents.config import algorithm_table, config_from_dict
    from lamella.agents.runner import render_problem
    from lamella.envs.rendering import save_frames
    from lamella.eval._src import checkpoints as lib

    found = ckpt.latest_checkpoint(os.path.join(run_dir.path, "checkpoints"))
    if found is None:
        return [(None, "no checkpoints/checkpoint_*.msgpack in the run directory")]
    metadata = ckpt.read_metadata(found)
    algorithm = metadata.get("algorithm")
    table = algorithm_table()
    if algorithm not in table:
        return [(None, f"its algorithm {algorithm!r} is not installed (known: {', '.join(sorted(table))})")]
    config_cls, make_runner = table[algorithm]
    config = config_from_dict(config_cls, metadata["config"])
    members = lib._members(metadata)
    _, init, _ = lib._compiled(make_runner, config, len(members.seeds), members.variants)
    shapes = jax.eval_shape(init, members.keys())
    # Asked abstractly first: an env without a renderer is a note, not a crash of the report.
    problem = render_problem(make_runner(members.config(config, 0)), shapes, jax.random.key(seed))
    if problem is not None:
        return [(None, f"the {algorithm} runner cannot draw its episodes ({problem})")]
    state, _ = ckpt.load_checkpoint(found, shapes)
    # One compiled program for every config: the configs of a sweep's program differ only in
    # values its runner takes traced (as the driver trained them), passed here as arguments.
    draw = jax.jit(
        lambda values, member, key: make_runner(dataclasses.replace(config, **values)).render_episode(
            member, key
        )
    )
    out: list[tuple[str | None, str]] = []
    for index, label in enumerate(members.labels):
        values = dict(members.variants[index]) if members.variants is not None else {}
        # The members are laid out config after config, each config's seeds together.
        first = index * len(members.seeds)
        member = jax.tree.map(lambda x, i=first: x[i], state)
        frames, length = draw(values, member, jax.random.key(seed))
        frames = np.asarray(frames)[: int(length)]
        with tempfile.TemporaryDirectory() as tmp:
            path = save_frames(frames, os.path.join(tmp, "episode.gif"), fps=10)
            with open(path, "rb") as file:
                data = base64.b64encode(file.read()).decode("ascii")
        caption = (
            f"{label} on {config.env_id}, seed {members.seeds[0]}, {os.path.basename(found)} "
            f"(iteration {metadata.get('iteration')}): one episode as its runner draws it, "
            f"{int(length) - 1} steps"
        )
        out.append((f"data:image/gif;base64,{data}", caption))
    return out


def _episodes_section(run_dirs: Sequence[RunDir], opts: _Options) -> str:
    from lamella.eval._src.checkpoints import _find_spec

    if not opts.gifs:
        return _note("Episodes were not drawn (--no-gifs).")
    with_checkpoints = [d for d in run_dirs if os.path.isdir(os.path.join(d.path, "checkpoints"))]
    if not with_checkpoints:
        return _note("No run directory holds checkpoints, so there are no episodes to draw.")
    missing = [m.replace(".", "-") for m in ("lamella.envs", "lamella.agents") if _find_spec(m) is None]
    if not missing and _find_spec("imageio") is None:
        missing.append("imageio (lamella-envs[render])")
    if missing:
        return _note(
            f"Drawing the checkpoints' episodes needs {' and '.join(missing)}; install them with: "
            "pip install 'lamella-eval[checkpoints]' 'lamella-envs[render]'."
        )
    from lamella.envs.cli import load_plugins

    load_plugins()  # algorithms other packages register
    parts = []
    for run_dir in run_dirs:
        for uri, caption in _checkpoint_gifs(run_dir, opts.gif_seed):
            if uri is None:
                parts.append(_note(f"{run_dir.path}: no episode: {caption}."))
            else:
                parts.append(
                    f'<figure class="episode"><img class="episode-gif" alt="{_esc(caption)}" src="{uri}">'
                    f"<figcaption>{_esc(run_dir.path)}: {_esc(caption)}</figcaption></figure>"
                )
    return "".join(parts)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value}


def _config_section(run_dirs: Sequence[RunDir]) -> str:
    with_config = [d for d in run_dirs if d.config is not None]
    parts = []
    without = [d.path for d in run_dirs if d.config is None]
    if without:
        parts.append(_note(f"No config.json in {', '.join(without)}."))
    if not with_config:
        return "".join(parts) or _note("No run directory holds a config.json.")
    flat = [
        {
            **_flatten(d.config.get("config", {}), "config"),
            **({"algorithm": d.config["algorithm"]} if "algorithm" in d.config else {}),
        }
        for d in with_config
        if d.config is not None
    ]
    keys = sorted(set().union(*flat))
    missing = "(absent)"
    differing = [k for k in keys if len({json.dumps(f.get(k, missing), default=str) for f in flat}) > 1]
    same = [k for k in keys if k not in differing]
    header = ["setting", *(d.path for d in with_config)]
    if len(with_config) == 1:
        parts.append(_note("One run directory: nothing to compare; its settings are below."))
    elif differing:
        rows = [[k, *(f.get(k, missing) for f in flat)] for k in differing]
        parts.append(_table(header, rows, "config-diff"))
    else:
        parts.append(_note("Every run directory has the same settings."))
    rows = [[k, flat[0].get(k, missing)] for k in same]
    parts.append(
        f"<details><summary>{len(same)} settings shared by every run directory</summary>"
        + _table(["setting", "value"], rows, "config-same")
        + "</details>"
    )
    return "".join(parts)


def _wall_time(run_dir: RunDir) -> str:
    """From the run's start (lamella's driver writes config.json then) to the run log's last write:
    the run log records no duration; a resumed run's time includes the pause."""
    config_path = os.path.join(run_dir.path, "config.json")
    if os.path.isfile(config_path):
        seconds = os.path.getmtime(run_dir.log) - os.path.getmtime(config_path)
        if seconds >= 0:
            return f"{seconds:.1f} s (config.json to last {os.path.basename(run_dir.log)} write)"
    return "not recorded"


def _system_section(run_dirs: Sequence[RunDir]) -> str:
    rows = []
    for d in run_dirs:
        config = d.config or {}
        devices = config.get("devices")
        if isinstance(devices, dict):
            device = f"{devices.get('num_devices', 1)} x {devices.get('device_kind', '?')} ({devices.get('platform', '?')})"
        else:
            device = "not recorded"
        versions = config.get("versions")
        version_text = (
            ", ".join(f"{k} {v}" for k, v in versions.items())
            if isinstance(versions, dict)
            else "not recorded"
        )
        finished = datetime.datetime.fromtimestamp(os.path.getmtime(d.log), datetime.UTC).strftime(
            "%Y-%m-%d %H:%M UTC"
        )
        rows.append([d.path, device, version_text, _wall_time(d), finished])
    return _table(
        ["run directory", "device", "versions", "wall time", "run log last written"], rows, "system"
    )


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.note{color:#8a5a00;background:#fff8e6;padding:.4em .8em;border-left:3px solid #e0a800}
figure.episode{display:inline-block;margin:.5em 1em .5em 0;max-width:360px}
figure.episode img{max-width:100%;image-rendering:pixelated;border:1px solid #ddd}
nav a{margin-right:1em}
"""


def _is_page(path: str) -> bool:
    """Whether the file at ``path`` is an HTML page (an earlier report, which ``-o`` replaces)."""
    try:
        with open(path, "rb") as file:
            head = file.read(256).lstrip().lower()
    except OSError:
        return False
    return head.startswith((b"<!doctype html", b"<html"))


def write_report(
    paths: Sequence[str],
    out: str = "report.html",
    *,
    metric: str = "mean_episode_return",
    normalize: str = "minmax",
    source: str = "auto",
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    truncate: bool = False,
    gifs: bool = True,
    allow_mixed_versions: bool = False,
) -> str:
    """Write the HTML report of the run directories under ``paths`` to ``out``; return ``out``.

    Args: as for :func:`lamella.eval.cli.aggregate` (``normalize``, ``source``, ``reps``,
    ``confidence``, ``seed``, ``truncate``), plus ``gifs`` (draw one episode of each
    run directory's final checkpoint, of each config for a sweep's program) and ``allow_mixed_versions`` (compare run logs written by
    different lamella-agents versions).

    Raises:
        EvalError: no runs, a run log in the wrong shape, logs of different formats or versions,
            a metric no run holds, a bad option; :class:`MissingExtraError` without Plotly.
    """
    from lamella.eval._src.bootstrap import _check
    from lamella.eval.cli import _reference

    require_report_extra()
    _check(reps, confidence)
    if os.path.isdir(out):
        raise EvalError(f"-o {out!r} is a directory; pass a file name such as report.html.")
    if os.path.isfile(out) and not _is_page(out):
        raise EvalError(
            f"-o {out!r} is an existing file that is not an HTML page (a run log, a config?); the "
            "report would replace it: pass another file name, such as report.html."
        )
    try:  # before the work: a GIF of every checkpoint can take minutes
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    except OSError as error:
        raise EvalError(
            f"-o {out!r}: cannot write the report there ({error.strerror}); pass a file in a writable directory."
        ) from None
    reference = _reference(normalize)
    run_dirs = find_run_dirs(paths)
    check_consistent(run_dirs, metric, allow_mixed_versions)
    runs = [run for d in run_dirs for run in d.runs]
    key = int(np.random.SeedSequence(seed).generate_state(1)[0])
    opts = _Options(metric, reference, source, reps, confidence, key, truncate, gifs, seed)

    import plotly
    from plotly.offline import get_plotlyjs

    figures = _Figures()
    body = {
        "runs": _runs_section(run_dirs),
        "curves": _curves_section(runs, opts, figures),
        **_aggregate_sections(runs, opts, figures),
        "breakdown": _breakdown_section(runs, opts, figures, _level_names(run_dirs)),
        "episodes": _episodes_section(run_dirs, opts),
        "config": _config_section(run_dirs),
        "system": _system_section(run_dirs),
    }
    from lamella.eval.__about__ import __version__

    algorithms = sorted({r.algorithm for r in runs})
    tasks = sorted({f"{r.environment}/{r.task}" for r in runs})
    summary = (
        f"{len(run_dirs)} run directories, {len(runs)} runs, {len(algorithms)} algorithm(s) "
        f"({', '.join(algorithms)}), {len(tasks)} task(s) ({', '.join(tasks)}); metric {metric}."
    )
    nav = "".join(f'<a href="#{sid}">{_esc(title)}</a>' for sid, title in SECTIONS)
    sections = "".join(
        f'<section id="{sid}"><h2>{_esc(title)}</h2>{body[sid]}</section>' for sid, title in SECTIONS
    )
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>lamella report: {_esc(', '.join(algorithms))}</title><style>{_STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
        f"<h1>lamella run report</h1><p>{_esc(summary)}</p><nav>{nav}</nav>{sections}"
        f"<footer><p>Written {generated} by lamella-eval {__version__} with plotly {plotly.__version__}."
        "</p></footer></body></html>\n"
    )
    tmp = f"{out}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as file:
            file.write(page)
        os.replace(tmp, out)
    except OSError as error:
        raise EvalError(
            f"-o {out!r}: cannot write the report there ({error.strerror}); pass a file in a writable directory."
        ) from None
    print(f"{summary}\nwrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)")
    return out
