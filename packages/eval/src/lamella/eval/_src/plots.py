"""Plots of bootstrap estimates (matplotlib, no pyplot state: safe in scripts and threads)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lamella.eval._src.errors import EvalError
from lamella.eval._src.estimates import Estimates, ImprovementEstimates, require_kind

__all__ = [
    "plot_interval_estimates",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
]

_LABELS = {"iqm": "IQM", "mean": "Mean", "median": "Median", "optimality_gap": "Optimality gap"}


def _save(figure: Figure, path: str | os.PathLike[str], dpi: int) -> str:
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    FigureCanvasAgg(figure)
    # savefig with a layout engine first draws the whole figure with drawing disabled, only to run
    # the layout; running the layout directly and then saving without the engine gives the same
    # positions and pixels (compared in the tests) without that extra pass over every artist.
    figure.set_dpi(dpi)
    engine = figure.get_layout_engine()
    if engine is not None:
        engine.execute(figure)
        figure.set_layout_engine("none")
    figure.savefig(path, dpi=dpi)
    return path


def _colors(names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def plot_interval_estimates(
    estimates: Estimates,
    path: str | os.PathLike[str],
    *,
    xlabel: str = "score",
    figsize: tuple[float, float] | None = None,
    dpi: int = 100,
) -> str:
    """One panel per statistic: each algorithm's confidence interval as a bar, the point
    estimate as a tick. Returns the path written (PNG, or any format matplotlib infers).

    Raises:
        EvalError: ``estimates`` not of :func:`interval_estimates` (profiles would be drawn as one
            panel per threshold), or of several calls merged.
    """
    require_kind(estimates, "plot_interval_estimates", "interval_estimates")
    algorithms = list(estimates.point)
    panels = len(estimates.labels)
    figsize = figsize or (3.2 * panels, 0.45 * len(algorithms) + 1.2)
    figure = Figure(figsize=figsize, layout="constrained")
    axes = figure.subplots(1, panels, sharey=True, squeeze=False)[0]
    colors = _colors(algorithms)
    rows = np.arange(len(algorithms))
    for k, (axis, label) in enumerate(zip(axes, estimates.labels)):
        # One bar container and one line collection per panel (not one per algorithm).
        low = np.array([estimates.lower[a][k] for a in algorithms])
        high = np.array([estimates.upper[a][k] for a in algorithms])
        point = np.array([estimates.point[a][k] for a in algorithms])
        axis.barh(rows, high - low, left=low, height=0.6, color=[colors[a] for a in algorithms], alpha=0.75)
        axis.vlines(point, rows - 0.3, rows + 0.3, color="k", linewidth=1.5)
        axis.set_title(_LABELS.get(str(label), str(label)))
        axis.set_xlabel(xlabel)
        axis.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(algorithms)), algorithms)
    axes[0].invert_yaxis()
    return _save(figure, path, dpi)


def plot_performance_profiles(
    profiles: Estimates,
    path: str | os.PathLike[str],
    *,
    xlabel: str = "score \N{GREEK SMALL LETTER TAU}",
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: int = 100,
) -> str:
    """Fraction of runs with score above tau, per algorithm, with confidence bands.

    The labels write tau as the Unicode letter, not TeX math: matplotlib's math-text parser
    costs about 0.05-0.09 s of CPU on its first use, a tenth of the plots of a fresh
    ``lamella eval aggregate``.

    Raises:
        EvalError: ``profiles`` not of :func:`performance_profiles`, or of several calls merged.
    """
    require_kind(profiles, "plot_performance_profiles", "performance_profiles")
    figure = Figure(figsize=figsize, layout="constrained")
    axis = figure.subplots()
    colors = _colors(list(profiles.point))
    for algorithm, point in profiles.point.items():
        taus = profiles.x[algorithm]
        axis.plot(taus, point, color=colors[algorithm], label=algorithm)
        axis.fill_between(
            taus, profiles.lower[algorithm], profiles.upper[algorithm], color=colors[algorithm], alpha=0.2
        )
    axis.set_xlabel(xlabel)
    axis.set_ylabel("fraction of runs with score > \N{GREEK SMALL LETTER TAU}")
    axis.set_ylim(0.0, 1.0)
    axis.grid(alpha=0.3)
    axis.legend()
    return _save(figure, path, dpi)


def plot_probability_of_improvement(
    improvement: ImprovementEstimates,
    path: str | os.PathLike[str],
    *,
    figsize: tuple[float, float] | None = None,
    dpi: int = 100,
) -> str:
    """P(X > Y) per pair with its confidence interval; 0.5 marked.

    Raises:
        EvalError: ``improvement`` not of :func:`probability_of_improvement_estimates`.
    """
    require_kind(improvement, "plot_probability_of_improvement", "probability_of_improvement_estimates")
    pairs = improvement.pairs
    figsize = figsize or (6.0, 0.45 * len(pairs) + 1.2)
    figure = Figure(figsize=figsize, layout="constrained")
    axis = figure.subplots()
    rows = np.arange(len(pairs))
    low, high = np.asarray(improvement.lower), np.asarray(improvement.upper)
    axis.barh(rows, high - low, left=low, height=0.6, color="tab:blue", alpha=0.7)
    axis.vlines(np.asarray(improvement.point), rows - 0.3, rows + 0.3, color="k", linewidth=1.5)
    axis.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    axis.set_yticks(range(len(pairs)), [f"P({x} > {y})" for x, y in pairs])
    axis.invert_yaxis()
    axis.set_xlim(0.0, 1.0)
    axis.set_xlabel("probability of improvement")
    axis.grid(axis="x", alpha=0.3)
    return _save(figure, path, dpi)


def plot_sample_efficiency(
    curves: Estimates,
    path: str | os.PathLike[str],
    *,
    statistic: str | int = 0,
    xlabel: str = "environment steps",
    ylabel: str | None = None,
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: int = 100,
) -> str:
    """An aggregate (``statistic``, a label or an index) against environment steps, with
    confidence bands.

    Raises:
        EvalError: ``curves`` not of :func:`sample_efficiency` (or of several calls merged), or a
            ``statistic`` they do not hold.
    """
    require_kind(curves, "plot_sample_efficiency", "sample_efficiency")
    labels = list(curves.labels)
    if (
        isinstance(statistic, int)
        and not isinstance(statistic, bool)
        and -len(labels) <= statistic < len(labels)
    ):
        k = statistic
    elif isinstance(statistic, str) and statistic in labels:
        k = labels.index(statistic)
    else:
        raise EvalError(
            f"plot_sample_efficiency: statistic {statistic!r} is not estimated; give one of {labels} "
            f"or an index below {len(labels)}"
        )
    figure = Figure(figsize=figsize, layout="constrained")
    axis = figure.subplots()
    colors = _colors(list(curves.point))
    for algorithm, point in curves.point.items():
        x = curves.x[algorithm]
        axis.plot(x, point[k], color=colors[algorithm], label=algorithm, marker="o", markersize=3)
        axis.fill_between(
            x, curves.lower[algorithm][k], curves.upper[algorithm][k], color=colors[algorithm], alpha=0.2
        )
    axis.set_xlabel(xlabel)
    label = str(curves.labels[k])
    axis.set_ylabel(ylabel or _LABELS.get(label, label))
    axis.grid(alpha=0.3)
    axis.legend()
    return _save(figure, path, dpi)
