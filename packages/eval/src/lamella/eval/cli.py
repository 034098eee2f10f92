"""``lamella eval``: sub-commands of the ``lamella`` command (entry point ``lamella.commands``).

``lamella eval aggregate RUN_DIR... --metric mean_episode_return`` reads run logs,
computes the aggregates with stratified-bootstrap confidence intervals, and writes
plots (PNG) and tables (Markdown, CSV, LaTeX) to ``--out-dir``.

``lamella eval checkpoints RUN_DIR_OR_CHECKPOINT... --envs CartPole-v1 CartPole-v1:length=1.0
--episodes 100 --out results.csv`` evaluates saved checkpoints on test envs (needs the
``lamella-eval[checkpoints]`` extra: lamella-envs and lamella-agents, imported only by this
command).

Mistakes in the input raise :class:`~lamella.eval.EvalError`, which the ``lamella`` command
prints as one line (exit status 2, no traceback; ``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np

from lamella.eval._src.errors import EvalError, EvalFileNotFoundError

__all__ = ["aggregate", "checkpoints", "register", "report"]


def _write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def _write_tables(out_dir: str, stem: str, table: Any, caption: str) -> list[str]:
    from lamella.eval._src import tables

    return [
        _write(os.path.join(out_dir, f"{stem}.md"), tables.to_markdown(table)),
        _write(os.path.join(out_dir, f"{stem}.csv"), tables.to_csv(table)),
        _write(os.path.join(out_dir, f"{stem}.tex"), tables.to_latex(table, caption)),
    ]


def _curves_csv(estimates: Any) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")  # quotes a sweep's name, ppo[lr=0.1,num_envs=4]
    writer.writerow(["algorithm", "evaluation", "step_count", "statistic", "point", "lower", "upper"])
    for algorithm, point in estimates.point.items():
        for k, label in enumerate(estimates.labels):
            for s in range(point.shape[1]):
                # float(): numpy 2's repr of its scalars is "np.float64(0.5)", not a number; a
                # step count in full (":g" wrote 1234567 as 1.23457e+06).
                step = float(estimates.x[algorithm][s])
                writer.writerow(
                    [
                        algorithm,
                        s,
                        int(step) if step.is_integer() else repr(step),
                        label,
                        repr(float(point[k, s])),
                        repr(float(estimates.lower[algorithm][k, s])),
                        repr(float(estimates.upper[algorithm][k, s])),
                    ]
                )
    return out.getvalue()


def _select(estimates: Any, algorithms: list[str], statistic: str) -> Any:
    """``estimates`` of one statistic, the algorithms in the given order (for the ranking plot)."""
    import dataclasses

    k = list(estimates.labels).index(statistic)

    def pick(values: Any) -> dict[str, Any]:
        return {a: values[a][k : k + 1] for a in algorithms}

    return dataclasses.replace(
        estimates,
        labels=(statistic,),
        point=pick(estimates.point),
        lower=pick(estimates.lower),
        upper=pick(estimates.upper),
    )


def _has_run_log(path: str) -> bool:
    for _, _, files in os.walk(path):
        if "metrics.json" in files or "metrics.csv" in files:
            return True
    return False


def _run_log_paths(paths: list[str]) -> list[str]:
    """The paths that hold run logs; directories and files without one are skipped with a note.

    ``lamella eval aggregate runs/*`` meets the folders ``lamella demo`` and ``lamella animate``
    write (``runs/demo``, ``runs/gifs``) and stray files: they are named on stderr and skipped.
    A path that does not exist, or no run log among all paths, is an error.
    """
    kept: list[str] = []
    skipped: list[str] = []
    for path in paths:
        if not os.path.exists(path):
            raise EvalFileNotFoundError(f"{path}: no such file or directory; check the path.")
        if os.path.isdir(path):
            (kept if _has_run_log(path) else skipped).append(path)
        else:
            (kept if path.endswith((".json", ".csv")) else skipped).append(path)
    if not kept:
        raise EvalFileNotFoundError(
            f"No run log (metrics.json or metrics.csv) in {', '.join(paths)} or below; pass run "
            "directories written by lamella train, or run-log files."
        )
    if skipped:
        print(
            f"lamella eval aggregate: skipped {', '.join(skipped)} (no metrics.json or metrics.csv)",
            file=sys.stderr,
        )
    return kept


def _check_metric(runs: Any, metric: str) -> None:
    available: set[str] = set()
    for run in runs:
        available.update(run.absolute_metrics or ())
        for evaluation in run.evaluations:
            available.update(evaluation.metrics)
    if metric not in available:
        raise EvalError(
            f"Unknown metric {metric!r}: no run holds it; the run logs hold {', '.join(sorted(available))}. "
            "Pass one of them with --metric."
        )


def _reference(normalize: str) -> Any:
    """``"minmax"``, None, or the ``{task: (low, high)}`` of a JSON file."""
    if normalize == "minmax":
        return "minmax"
    if normalize == "none":
        return None
    try:
        with open(normalize, encoding="utf-8") as file:
            data = json.load(file)
    except FileNotFoundError:
        raise EvalFileNotFoundError(
            f"--normalize {normalize!r}: no such file; pass minmax, none, or a JSON file "
            '{"task": [low, high], ...}.'
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EvalError(f"--normalize {normalize!r}: not valid JSON ({error}).") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, int | float) for x in v)
        for v in data.values()
    ):
        raise EvalError(
            f'--normalize {normalize!r}: expected an object {{"task": [low, high], ...}} of numbers.'
        )
    return {task: (float(pair[0]), float(pair[1])) for task, pair in data.items()}


def aggregate(
    paths: list[str],
    metric: str = "mean_episode_return",
    out_dir: str = "eval",
    *,
    normalize: str = "minmax",
    source: str = "auto",
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    truncate: bool = False,
    plots: bool = True,
) -> list[str]:
    """Aggregate run logs into plots and tables; return the files written.

    Args:
        paths: run directories, ``metrics.json``/``metrics.csv`` files, or folders holding them.
        metric: the metric to aggregate.
        out_dir: where the plots and tables go.
        normalize: ``minmax`` (per task, over all algorithms and runs), ``none``, or a JSON
            file ``{"task": [low, high], ...}`` of reference scores.
        source: ``auto``, ``absolute`` or ``last`` (see :func:`lamella.eval.final_scores`).
        reps: bootstrap replicates.
        confidence: interval coverage.
        seed: bootstrap seed.
        truncate: cut learning curves to the shortest run instead of raising.
        plots: write the PNG plots (matplotlib); False writes the tables only.
    """
    import lamella.eval as le
    from lamella.eval._src import tables

    def plot(name: str, *args: Any, **kwargs: Any) -> None:
        if plots:  # matplotlib is imported only here
            from lamella.eval._src import plots as plotting

            written.append(getattr(plotting, name)(*args, **kwargs))

    from lamella.eval._src.bootstrap import _check

    _check(reps, confidence)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise EvalError(f"--out-dir {out_dir!r} is a file, not a directory; pass another --out-dir.")
    reference = _reference(normalize)
    runs = le.read_run_logs(_run_log_paths(paths))
    _check_metric(runs, metric)
    scores = le.final_scores(runs, metric, source)  # type: ignore[arg-type]
    if reference is not None:
        scores = le.normalize(scores, reference)  # type: ignore[assignment]
    label = f"{'normalised ' if reference is not None else ''}{metric}"
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as error:
        raise EvalError(
            f"--out-dir {out_dir!r} cannot be made ({error.strerror}); pass a directory in a writable place."
        ) from None
    written: list[str] = []
    key = np.random.SeedSequence(seed).generate_state(1)[0].item()

    estimates = le.interval_estimates(scores.values, reps=reps, confidence=confidence, key=key)
    plot("plot_interval_estimates", estimates, os.path.join(out_dir, "aggregates.png"), xlabel=label)
    caption = (
        f"{label} ({scores.source}); {len(scores.tasks)} tasks; point estimate "
        f"[{confidence:.0%} stratified-bootstrap percentile interval, {reps} replicates]"
    )
    aggregate_table = tables.estimates_table(estimates)
    written += _write_tables(out_dir, "aggregates", aggregate_table, caption)

    values = np.concatenate([v.reshape(-1) for v in scores.values.values()])
    taus = np.linspace(values.min(), values.max(), 101)
    profiles = le.performance_profiles(scores.values, taus, reps=reps, confidence=confidence, key=key + 1)
    plot(
        "plot_performance_profiles", profiles, os.path.join(out_dir, "performance_profiles.png"), xlabel=label
    )

    if len(scores.values) > 1:
        # The ranking (a sweep's configs, or any algorithms) by IQM, best first.
        ranking = tables.ranking_table(estimates, "iqm")
        written += _write_tables(out_dir, "ranking", ranking, f"ranking by IQM of {label}; {caption}")
        ranked = [row[1] for row in ranking[1]]
        plot(
            "plot_interval_estimates",
            _select(estimates, ranked, "iqm"),
            os.path.join(out_dir, "ranking.png"),
            xlabel=f"IQM {label}",
        )
        improvement = le.probability_of_improvement_estimates(
            scores.values, reps=reps, confidence=confidence, key=key + 2
        )
        plot(
            "plot_probability_of_improvement",
            improvement,
            os.path.join(out_dir, "probability_of_improvement.png"),
        )
        written += _write_tables(
            out_dir,
            "probability_of_improvement",
            tables.improvement_table(improvement),
            f"P(x > y) on {label}",
        )

    if all(run.evaluations for run in runs):
        curves = le.curve_scores(runs, metric, truncate=truncate)
        if reference is not None:
            curves = le.normalize(curves, reference)  # type: ignore[assignment]
        efficiency = le.sample_efficiency(
            curves.values, curves.step_counts, ("iqm", "mean"), reps=reps, confidence=confidence, key=key + 3
        )
        plot(
            "plot_sample_efficiency",
            efficiency,
            os.path.join(out_dir, "sample_efficiency.png"),
            statistic="iqm",
            ylabel=f"IQM {label}",
        )
        written.append(_write(os.path.join(out_dir, "sample_efficiency.csv"), _curves_csv(efficiency)))

    print(
        f"{len(runs)} runs, {len(scores.values)} algorithms, {len(scores.tasks)} tasks; scores from {scores.source}"
    )
    print(tables.to_markdown(aggregate_table), end="")
    if len(scores.values) > 1:
        print("ranking by IQM (best first):")
        print(tables.to_markdown(ranking), end="")
    for path in written:
        print(f"wrote {path}")
    return written


def checkpoints(
    paths: list[str],
    envs: list[str] | None = None,
    *,
    suite: str | None = None,
    episodes: int = 100,
    out: str = "checkpoint_results.csv",
    seed: int = 0,
    run_log: str | None = None,
    summary: str | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
) -> list[str]:
    """Evaluate checkpoints on test envs or a test suite, write the CSV (and the run log, the
    summary); return the files written.

    See :func:`lamella.eval.evaluate_checkpoints` for ``paths``, ``envs``, ``suite``,
    ``episodes`` and ``seed``; ``out`` is the results CSV, ``run_log`` a directory for
    ``metrics.json`` / ``metrics.csv`` in the run-log format, ``summary`` a path prefix for
    ``<summary>.csv`` and ``<summary>.json``, the means over seeds with bootstrap confidence
    intervals (``reps`` replicates, ``confidence`` coverage; with a suite, by default
    ``<out without .csv>_summary``). With a suite the summary table is printed.
    """
    from lamella.eval._src import checkpoints as lib
    from lamella.eval._src import tables
    from lamella.eval._src.bootstrap import _check

    _check(reps, confidence)
    if run_log is not None:
        lib._check_run_log_dir(run_log)  # before evaluating: that can take minutes
    if suite is not None and summary is None:
        summary = (out[:-4] if out.endswith(".csv") else out) + "_summary"
    results = lib.evaluate_checkpoints(paths, envs, suite=suite, episodes=episodes, seed=seed)
    written = [lib.write_results_csv(results, out)]
    if run_log is not None:
        written += lib.write_results_run_log(results, run_log)
    if summary is not None:
        summaries = lib.summarize_results(results, reps=reps, confidence=confidence, seed=seed)
        written += lib.write_summary(summaries, summary, results)
    if suite is not None:
        print(
            f"suite {suite}: mean over seeds [{confidence:.0%} bootstrap interval over seeds, {reps} replicates]"
        )
        print(tables.to_markdown(lib.summary_table(summaries)), end="")
    else:
        width = max(len(r.test_env + r.overrides) for r in results) + 2
        for r in results:
            if r.seed != "mean":
                continue
            env = r.test_env + (f":{r.overrides.replace(';', ',')}" if r.overrides else "")
            success = "" if r.success_rate is None else f"  success {r.success_rate:.3f}"
            print(
                f"{r.algorithm} {r.checkpoint}  on {env:<{width}} return {r.mean_return:.2f} "
                f"+- {r.std_return:.2f} over seeds ({r.episodes} episodes){success}"
            )
    for path in written:
        print(f"wrote {path}")
    return written


def _checkpoints_command(args: argparse.Namespace) -> int:
    from lamella.eval._src.checkpoints import require_checkpoints_extra

    require_checkpoints_extra()
    # Algorithms that other packages register (lamella-gcrl's sac, ...) come with their plug-ins.
    from lamella.envs.cli import load_plugins

    load_plugins()
    checkpoints(
        args.paths,
        args.envs,
        suite=args.suite,
        episodes=args.episodes,
        out=args.out,
        seed=args.seed,
        run_log=args.run_log,
        summary=args.summary,
        reps=args.reps,
        confidence=args.confidence,
    )
    return 0


def _aggregate_command(args: argparse.Namespace) -> int:
    aggregate(
        args.run_dirs,
        args.metric,
        args.out_dir,
        normalize=args.normalize,
        source=args.source,
        reps=args.reps,
        confidence=args.confidence,
        seed=args.seed,
        truncate=args.truncate,
        plots=not args.no_plots,
    )
    return 0


def report(paths: list[str], out: str = "report.html", **options: Any) -> str:
    """Write the HTML report of ``lamella eval report`` (see :mod:`lamella.eval._src.report`);
    the module, and Plotly, are imported only here."""
    from lamella.eval._src.report import write_report

    return write_report(paths, out, **options)


def _report_command(args: argparse.Namespace) -> int:
    report(
        args.run_dirs,
        args.out,
        metric=args.metric,
        normalize=args.normalize,
        source=args.source,
        reps=args.reps,
        confidence=args.confidence,
        seed=args.seed,
        truncate=args.truncate,
        gifs=not args.no_gifs,
        allow_mixed_versions=args.allow_mixed_versions,
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``eval`` (with ``aggregate`` and ``checkpoints``) to the ``lamella`` command's sub-parsers."""
    parser = subparsers.add_parser(
        "eval", help="aggregate run logs (bootstrap CIs, plots, tables); evaluate checkpoints"
    )
    add_commands(parser.add_subparsers(dest="eval_command", required=True))


def add_commands(commands: Any) -> None:
    """Add ``aggregate``, ``report`` and ``checkpoints`` to a sub-parser set (``lamella eval``'s, or
    ``python -m lamella.eval``'s)."""
    agg = commands.add_parser(
        "aggregate",
        help="IQM/mean/median/optimality gap with CIs, probability of improvement, profiles, curves",
        description="Read run logs (marl-eval JSON or the CSV view) and write plots and tables.",
    )
    agg.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories or metrics.json/.csv files"
    )
    agg.add_argument("--metric", default="mean_episode_return")
    agg.add_argument("--out-dir", default="eval", help="where plots and tables are written (default: eval)")
    agg.add_argument(
        "--normalize",
        default="minmax",
        help="minmax (per task, default), none, or a JSON file {task: [low, high]} of reference scores",
    )
    agg.add_argument(
        "--source", choices=("auto", "absolute", "last"), default="auto", help="which evaluation is final"
    )
    agg.add_argument("--reps", type=int, default=2000, help="bootstrap replicates (default 2000)")
    agg.add_argument("--confidence", type=float, default=0.95)
    agg.add_argument("--seed", type=int, default=0)
    agg.add_argument("--truncate", action="store_true", help="cut learning curves to the shortest run")
    agg.add_argument("--no-plots", action="store_true", help="write the tables only (no matplotlib)")
    agg.set_defaults(func=_aggregate_command)

    rep = commands.add_parser(
        "report",
        help="one self-contained HTML report: curves, aggregates, improvement, profiles, episodes, configs",
        description=(
            "Write one HTML file (no network needed to open it) over run directories: learning "
            "curves with bootstrap intervals, the aggregate table, the probability-of-improvement "
            "matrix, performance profiles, per-agent and per-level breakdowns, a GIF of each run's "
            "final checkpoint, config differences, and each run's device, versions and wall time. "
            "Needs plotly: pip install 'lamella-eval[report]'."
        ),
    )
    rep.add_argument("run_dirs", nargs="+", metavar="RUN", help="run directories or metrics.json/.csv files")
    rep.add_argument("-o", "--out", default="report.html", help="the HTML file (default: report.html)")
    rep.add_argument("--metric", default="mean_episode_return")
    rep.add_argument("--normalize", default="minmax", help="as for aggregate: minmax, none, or a JSON file")
    rep.add_argument("--source", choices=("auto", "absolute", "last"), default="auto")
    rep.add_argument("--reps", type=int, default=2000, help="bootstrap replicates (default 2000)")
    rep.add_argument("--confidence", type=float, default=0.95)
    rep.add_argument("--seed", type=int, default=0, help="bootstrap and episode seed (default 0)")
    rep.add_argument("--truncate", action="store_true", help="cut learning curves to the shortest run")
    rep.add_argument("--no-gifs", action="store_true", help="do not draw the checkpoints' episodes")
    rep.add_argument(
        "--allow-mixed-versions",
        action="store_true",
        help="report run logs written by different lamella-agents versions",
    )
    rep.set_defaults(func=_report_command)

    chk = commands.add_parser(
        "checkpoints",
        help="evaluate saved checkpoints on test envs, per seed and averaged over seeds, to CSV",
        description=(
            "Evaluate checkpoints (lamella train run directories or checkpoint files) with the "
            "runner's own evaluation (greedy, or sampled where its config says eval_greedy=false, as the "
            "marl and UED runners do) on each test env, all seeds of a run in one vmapped call. "
            "A test env is ENV_ID or ENV_ID:key=value,key=value (params fields or constructor "
            "arguments, e.g. CartPole-v1:length=1.0,gravity=9.0); its observation and action "
            "spaces must match the checkpoint's."
        ),
    )
    chk.add_argument(
        "paths",
        nargs="+",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="run directories (newest checkpoint) or files",
    )
    chk.add_argument(
        "--envs",
        nargs="+",
        metavar="ENV[:key=value,...]",
        help="test envs (default: each checkpoint's training env)",
    )
    chk.add_argument(
        "--suite",
        metavar="SUITE",
        help=(
            "a test suite instead of --envs: a suite name (minimax-test, minimax-fixed, "
            "minimax-13x13, perfect-mazes: lamella-ued's named mazes; foraging-5x5, foraging-8x8: its "
            "named Level-Based Foraging levels) or a comma-separated list of its cases "
            "(SixteenRooms,PerfectMazeXL); prints the per-case table"
        ),
    )
    chk.add_argument(
        "--episodes", type=int, default=100, help="evaluation episodes per seed and env (default 100)"
    )
    chk.add_argument(
        "--out", default="checkpoint_results.csv", help="results CSV (default: checkpoint_results.csv)"
    )
    chk.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0)")
    chk.add_argument(
        "--run-log",
        metavar="DIR",
        help="also write DIR/metrics.json and metrics.csv (run-log format, absolute_metrics per seed)",
    )
    chk.add_argument(
        "--summary",
        metavar="PREFIX",
        help=(
            "also write PREFIX.csv and PREFIX.json: means over seeds with bootstrap CIs "
            "(default with --suite: the --out path without .csv, plus _summary)"
        ),
    )
    chk.add_argument("--reps", type=int, default=2000, help="bootstrap replicates of the CIs (default 2000)")
    chk.add_argument("--confidence", type=float, default=0.95, help="coverage of the CIs (default 0.95)")
    chk.set_defaults(func=_checkpoints_command)
