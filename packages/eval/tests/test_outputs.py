"""Plots, tables and the ``lamella eval aggregate`` command end to end."""

import argparse
import json
from importlib.metadata import entry_points

import matplotlib.image
import numpy as np
import pytest

import lamella.eval as le
from lamella.eval import cli
from lamella.eval._src import plots, tables


@pytest.fixture(scope="module")
def estimates():
    rng = np.random.default_rng(1)
    # The shapes of the CLI test below (3 runs, 2 tasks, 3 evaluations, 100 replicates), so
    # a worker running both compiles once.
    scores = {"ppo": rng.uniform(size=(3, 2)), "dqn_v2": rng.uniform(size=(3, 2)) * 0.8}
    aggregates = le.interval_estimates(scores, reps=100)
    improvement = le.probability_of_improvement_estimates(scores, reps=100)
    profiles = le.performance_profiles(scores, np.linspace(0, 1, 101), reps=100)
    curves = {a: np.stack([v * 0.5, v * 0.7, v], -1) for a, v in scores.items()}
    curves = le.sample_efficiency(curves, None, ("iqm", "mean"), reps=100)
    return aggregates, improvement, profiles, curves


def _png_size(path):
    image = matplotlib.image.imread(path)
    return image.shape[1], image.shape[0]


def test_plots_are_pngs_of_the_requested_size(tmp_path, estimates, monkeypatch):
    import matplotlib.mathtext

    def no_math_text(*args, **kwargs):
        raise AssertionError("a default label went through math text (its parser costs ~0.05-0.09 s cold)")

    # The default labels are plain text (tau is the Unicode letter): no math-text parser.
    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", no_math_text)
    aggregates, improvement, profiles, curves = estimates
    written = [
        plots.plot_interval_estimates(aggregates, tmp_path / "a.png", figsize=(8, 3), dpi=50),
        plots.plot_probability_of_improvement(improvement, tmp_path / "p.png", figsize=(5, 2), dpi=50),
        plots.plot_performance_profiles(profiles, tmp_path / "sub" / "f.png", figsize=(6, 4), dpi=50),
        plots.plot_sample_efficiency(curves, tmp_path / "s.png", statistic="iqm", figsize=(6, 4), dpi=50),
    ]
    sizes = [(400, 150), (250, 100), (300, 200), (300, 200)]
    for path, size in zip(written, sizes):
        with open(path, "rb") as file:
            assert file.read(8) == b"\x89PNG\r\n\x1a\n"
        assert _png_size(path) == size
        # Something is drawn: not a blank canvas.
        assert np.ptp(matplotlib.image.imread(path)) > 0


def test_plots_draw_what_savefig_with_the_layout_engine_draws(tmp_path, estimates, monkeypatch):
    """The plots run the constrained layout once themselves and save without the engine; the
    pixels must equal those of matplotlib's own path (savefig with the engine still set)."""
    from matplotlib.figure import Figure

    aggregates, improvement, profiles, curves = estimates
    calls = [
        (plots.plot_interval_estimates, aggregates, {"dpi": 50}),
        (plots.plot_interval_estimates, aggregates, {}),
        (plots.plot_probability_of_improvement, improvement, {}),
        (plots.plot_performance_profiles, profiles, {"dpi": 70}),
        (plots.plot_sample_efficiency, curves, {"statistic": "iqm"}),
    ]
    fast = [fn(arg, tmp_path / f"fast{i}.png", **kw) for i, (fn, arg, kw) in enumerate(calls)]

    def plain_save(figure: Figure, path, dpi):
        figure.savefig(path, dpi=dpi)
        return str(path)

    monkeypatch.setattr(plots, "_save", plain_save)
    plain = [fn(arg, tmp_path / f"plain{i}.png", **kw) for i, (fn, arg, kw) in enumerate(calls)]
    for a, b in zip(fast, plain):
        x, y = matplotlib.image.imread(a), matplotlib.image.imread(b)
        assert x.shape == y.shape and np.array_equal(x, y), (a, b)


def test_tables(estimates):
    aggregates, improvement, _, _ = estimates
    table = tables.estimates_table(aggregates, digits=2)
    header, rows = table
    assert header == ["algorithm", "iqm", "mean", "median", "optimality_gap"]
    p, lo, hi = aggregates.point["ppo"][0], aggregates.lower["ppo"][0], aggregates.upper["ppo"][0]
    assert rows[0][:2] == ["ppo", f"{p:.2f} [{lo:.2f}, {hi:.2f}]"]

    markdown = tables.to_markdown(table).splitlines()
    assert markdown[0] == "| algorithm | iqm | mean | median | optimality_gap |"
    assert markdown[1] == "| --- | --- | --- | --- | --- |"
    assert markdown[2].startswith(f"| ppo | {p:.2f} [")

    csv_lines = tables.to_csv(table).splitlines()
    assert csv_lines[0] == "algorithm,iqm,mean,median,optimality_gap"
    assert csv_lines[1].startswith(f'ppo,"{p:.2f} [{lo:.2f}, {hi:.2f}]"')

    latex = tables.to_latex(table, caption="IQM & friends")
    assert r"algorithm & iqm & mean & median & optimality\_gap \\" in latex
    assert r"dqn\_v2 & " in latex and r"\caption{IQM \& friends}" in latex
    assert latex.count(r"\\") == 3 and r"\begin{tabular}{lcccc}" in latex

    header, rows = tables.improvement_table(improvement)
    assert header == ["x", "y", "P(x > y)"] and rows[0][:2] == ["ppo", "dqn_v2"]


def test_plots_and_tables_refuse_estimates_of_another_kind(tmp_path, estimates):
    aggregates, improvement, profiles, curves = estimates
    calls = [
        # Profiles were drawn as one panel per threshold, titled with the thresholds.
        (plots.plot_interval_estimates, profiles, "performance_profiles", "plot_performance_profiles"),
        (plots.plot_performance_profiles, aggregates, "interval_estimates", "plot_interval_estimates"),
        (plots.plot_sample_efficiency, profiles, "performance_profiles", "plot_performance_profiles"),
        (plots.plot_probability_of_improvement, aggregates, "interval_estimates", "plot_interval_estimates"),
    ]
    for plot, given, kind, use in calls:
        with pytest.raises(
            le.EvalError, match=rf"^{plot.__name__}: got the results of {kind} .*Give these to {use}"
        ):
            plot(given, tmp_path / "never.png")
    tabulate = [
        (tables.estimates_table, improvement, "probability_of_improvement_estimates", "improvement_table"),
        (tables.estimates_table, curves, "sample_efficiency", "plot_sample_efficiency"),
        (tables.ranking_table, profiles, "performance_profiles", "estimates_table"),
        (tables.improvement_table, aggregates, "interval_estimates", "estimates_table"),
    ]
    for table, given, kind, use in tabulate:
        with pytest.raises(le.EvalError, match=rf"^{table.__name__}: got the results of {kind} .*{use}"):
            table(given)
    # Estimates of two calls merged into one: the values no longer fit the labels.
    merged = le.Estimates(
        aggregates.labels,
        {**aggregates.point, "x": profiles.point["ppo"]},
        {**aggregates.lower, "x": profiles.lower["ppo"]},
        {**aggregates.upper, "x": profiles.upper["ppo"]},
        0.95,
        100,
    )
    message = r"the estimates of 'x' have shape \(101,\), 101 along the label axis, but the labels name 4"
    with pytest.raises(le.EvalError, match=message):
        tables.estimates_table(merged)
    with pytest.raises(le.EvalError, match=message):
        plots.plot_interval_estimates(merged, tmp_path / "never.png")
    with pytest.raises(
        le.EvalError, match=r"statistic 'median' is not estimated; give one of \['iqm', 'mean'\]"
    ):
        plots.plot_sample_efficiency(curves, tmp_path / "never.png", statistic="median")
    assert not list(tmp_path.iterdir())


def _write_run_dir(root, algorithm, offset):
    data = {"classic_control": {}}
    for t, task in enumerate(["CartPole-v1", "Acrobot-v1"]):
        runs = {}
        for seed in range(3):
            final = 100.0 * t + offset + seed
            runs[f"seed_{seed}"] = {
                "step_0": {"step_count": 0, "mean_episode_return": [final / 4, final / 5]},
                "step_1": {"step_count": 1000, "mean_episode_return": [final / 2]},
                "step_2": {"step_count": 2000, "mean_episode_return": [final - 1, final + 1]},
                "absolute_metrics": {"mean_episode_return": [final] * 4},
            }
        data["classic_control"][task] = {algorithm: runs}
    run_dir = root / algorithm
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text(json.dumps(data))
    return run_dir


def test_entry_point_is_registered():
    (entry,) = [e for e in entry_points(group="lamella.commands") if e.name == "eval"]
    assert entry.value == "lamella.eval.cli:register"
    assert entry.load() is cli.register


def test_cli_aggregate_end_to_end(tmp_path, capsys):
    # The parser the `lamella` command builds: a sub-parser per entry point.
    parser = argparse.ArgumentParser(prog="lamella")
    cli.register(parser.add_subparsers(dest="command", required=True))
    dirs = [_write_run_dir(tmp_path, "ppo", 10.0), _write_run_dir(tmp_path, "dqn", 0.0)]
    out = tmp_path / "out"
    args = parser.parse_args(
        [
            "eval",
            "aggregate",
            *map(str, dirs),
            "--metric",
            "mean_episode_return",
            "--out-dir",
            str(out),
            "--reps",
            "100",
        ]
    )
    assert args.func(args) == 0
    expected = {
        "aggregates.png",
        "aggregates.md",
        "aggregates.csv",
        "aggregates.tex",
        "performance_profiles.png",
        "probability_of_improvement.png",
        "probability_of_improvement.md",
        "probability_of_improvement.csv",
        "probability_of_improvement.tex",
        "sample_efficiency.png",
        "sample_efficiency.csv",
        "ranking.md",
        "ranking.csv",
        "ranking.tex",
        "ranking.png",
    }
    assert {p.name for p in out.iterdir()} == expected
    for name in expected:
        assert (out / name).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "12 runs, 2 algorithms, 2 tasks; scores from absolute_metrics" in printed
    # ppo beats dqn by 10 on every run of every task: P(ppo > dqn) = 1 after normalisation.
    rows = (out / "probability_of_improvement.csv").read_text().splitlines()
    assert rows[1] == 'ppo,dqn,"1.000 [1.000, 1.000]"'
    curve_rows = (out / "sample_efficiency.csv").read_text().splitlines()
    assert curve_rows[0] == "algorithm,evaluation,step_count,statistic,point,lower,upper"
    assert len(curve_rows) == 1 + 2 * 2 * 3
    # Numbers a spreadsheet reads: the point and interval were "np.float64(0.5)" (numpy 2's repr).
    for row in curve_rows[1:]:
        point, lower, upper = (float(v) for v in row.split(",")[4:])
        assert lower <= point <= upper, row


def test_cli_reports_bad_file(tmp_path):
    (tmp_path / "metrics.json").write_text(
        json.dumps({"env": {"task": {"ppo": {"seed_0": {"step_0": {"x": [1]}}}}}})
    )
    with pytest.raises(
        le.RunLogError, match=r"run env/task/ppo/seed_0, step_0: field 'step_count' is missing"
    ):
        cli.aggregate([str(tmp_path)], "x", str(tmp_path / "out"))


def test_cli_aggregate_out_dir_that_cannot_be_made(tmp_path):
    """``--out-dir`` below a file: one line naming the option (was a NotADirectoryError traceback)."""
    (tmp_path / "metrics.json").write_text(
        json.dumps({"env": {"task": {"ppo": {"seed_0": {"step_0": {"step_count": 0, "x": [1]}}}}}})
    )
    with pytest.raises(le.EvalError, match=r"--out-dir .*metrics.json/eval.*cannot be made"):
        cli.aggregate(
            [str(tmp_path)], "x", str(tmp_path / "metrics.json" / "eval"), normalize="none", plots=False
        )
