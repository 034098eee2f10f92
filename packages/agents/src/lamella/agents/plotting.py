"""The learning-curve plot of a run directory (``learning_curve.png``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from lamella.agents.runlog import read_metrics

__all__ = ["learning_curves", "plot_learning_curve"]


def learning_curves(
    metrics: Mapping[str, Any], metric: str = "mean_episode_return"
) -> dict[tuple[str, str, str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``{(environment, task, algorithm): {run: (step_counts, mean of metric per evaluation)}}``."""
    curves: dict[tuple[str, str, str], dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for environment, tasks in metrics.items():
        for task, algorithms in tasks.items():
            for algorithm, runs in algorithms.items():
                for run, entries in runs.items():
                    points = []
                    for name, entry in entries.items():
                        if not name.startswith("step_") or metric not in entry:
                            continue
                        values = np.atleast_1d(np.asarray(entry[metric], dtype=np.float64))
                        points.append((int(name[5:]), entry["step_count"], float(values.mean())))
                    points.sort()
                    if points:
                        x = np.array([p[1] for p in points], dtype=np.float64)
                        y = np.array([p[2] for p in points], dtype=np.float64)
                        curves.setdefault((environment, task, algorithm), {})[run] = (x, y)
    return curves


def plot_learning_curve(
    metrics_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str] | None = None,
    metric: str = "mean_episode_return",
) -> str:
    """Plot ``metric`` against environment steps from a ``metrics.json``.

    One panel per (task, algorithm): the mean over runs (seeds) as a line, the range between
    the lowest and highest run shaded, and each run as a thin line. Each point is the mean
    over that evaluation's episodes.

    Args:
        metrics_path: a ``metrics.json`` in the run-log format.
        out_path: the PNG to write; default ``learning_curve.png`` next to ``metrics_path``.
        metric: which metric to plot.

    Returns:
        The path of the PNG.
    """
    # A bare Figure renders with Agg and leaves pyplot's global backend alone.
    from matplotlib.figure import Figure

    curves = learning_curves(read_metrics(metrics_path), metric)
    if out_path is None:
        out_path = os.path.join(os.path.dirname(os.fspath(metrics_path)), "learning_curve.png")
    panels = max(len(curves), 1)
    figure = Figure(figsize=(6.4 * panels, 4.2))
    axes = figure.subplots(1, panels, squeeze=False)
    for axis, ((_, task, algorithm), runs) in zip(axes[0], sorted(curves.items())):
        # Runs can stop at different evaluations (a partial run); align on the shortest.
        length = min(len(x) for x, _ in runs.values())
        x = next(iter(runs.values()))[0][:length]
        ys = np.stack([y[:length] for _, y in runs.values()])
        if len(runs) > 1:
            for _, y in runs.values():
                axis.plot(x, y[:length], color="tab:blue", alpha=0.25, linewidth=0.8)
            axis.fill_between(
                x, ys.min(0), ys.max(0), color="tab:blue", alpha=0.18, linewidth=0, label="min–max over seeds"
            )
            axis.plot(x, ys.mean(0), color="tab:blue", linewidth=2.0, label=f"mean of {len(runs)} seeds")
        else:
            axis.plot(x, ys[0], color="tab:blue", linewidth=2.0, label=next(iter(runs)))
        axis.set_title(f"{algorithm} on {task} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
        axis.set_xlabel("environment steps")
        # Whether the evaluation acted greedily is the config's (eval_greedy), not the run log's.
        kind = "training" if metric.startswith("train_") else "evaluation"
        axis.set_ylabel(f"{metric.replace('_', ' ')} ({kind})")
        axis.grid(True, alpha=0.3)
        axis.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        axis.legend(loc="lower right", fontsize="small")
    if not curves:
        axes[0][0].text(0.5, 0.5, f"no {metric} in {os.fspath(metrics_path)}", ha="center", va="center")
        axes[0][0].set_axis_off()
    figure.tight_layout()
    figure.savefig(out_path, dpi=110)
    return os.fspath(out_path)
