"""lamella-ued with lamella-eval: a tiny DR run trained through the driver with screenshots on,
then ``lamella eval checkpoints --suite`` on its checkpoint (the suite found through lamella-ued's
``lamella.test_suites`` entry point), end to end through the ``lamella`` command."""

import csv
import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from lamella.envs.cli import main
from lamella.envs.maze import named_maze

SEEDS = 2
EPISODES = 4
SUITE = "SixteenRooms,PerfectMaze"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from lamella.agents.driver import run_experiment
    from lamella.ued.presets import PRESETS

    out = tmp_path_factory.mktemp("dr_run")
    config = dataclasses.replace(
        PRESETS["dr"]["ci"],
        num_envs=8,
        num_steps=16,
        num_minibatches=2,
        total_timesteps=8 * 16 * 2,  # 2 iterations
        eval_episodes=2,
        screenshot_every=1,  # to screenshot_dir's default, the run directory's screenshots/
    )
    run_experiment(config, seeds=SEEDS, out_dir=out / "run", progress=False, plot=False)
    return out


@pytest.fixture(scope="module")
def evaluated(run_dir, capsys_module):
    out = run_dir / "eval"
    status = main(
        [
            "eval",
            "checkpoints",
            str(run_dir / "run"),
            "--suite",
            SUITE,
            "--episodes",
            str(EPISODES),
            "--reps",
            "200",
            "--out",
            str(out / "results.csv"),
        ]
    )
    return status, out, capsys_module.readouterr().out


@pytest.fixture(scope="module")
def capsys_module():
    """Module-scoped stdout capture for the fixture above (pytest's capsys is function-scoped)."""
    import contextlib
    import io

    buffer = io.StringIO()

    class Reader:
        def readouterr(self):
            class Out:
                out = buffer.getvalue()

            return Out

    with contextlib.redirect_stdout(buffer):
        yield Reader()


def test_suite_table_per_maze(evaluated):
    status, out, printed = evaluated
    assert status == 0
    assert "| checkpoint | test env | seeds | success rate | return | episode length |" in printed
    for maze in SUITE.split(","):
        assert f"| dr | {maze} | {SEEDS} |" in printed
    with open(out / "results.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["test_env"], r["seed"]) for r in rows] == [
        (maze, seed) for maze in SUITE.split(",") for seed in ("0", "1", "mean")
    ]
    assert all(r["algorithm"] == "dr" and r["train_env"] == "AMaze-13x13-v0" for r in rows)
    assert all(int(r["episodes"]) == EPISODES for r in rows if r["seed"] != "mean")

    with open(out / "results_summary.json") as file:
        data = json.load(file)
    per_seed = {(r["test_env"], r["seed"]): r for r in data["per_seed"]}
    assert len(per_seed) == 2 * SEEDS
    for summary in data["summary"]:
        maze = summary["test_env"]
        horizon = named_maze(maze, jax.random.key(0))[1].max_episode_steps
        assert summary["seeds"] == SEEDS and summary["episodes"] == EPISODES
        seeds = [per_seed[(maze, s)] for s in range(SEEDS)]
        returns = np.array([s["episode_returns"] for s in seeds])
        lengths = np.array([s["episode_lengths"] for s in seeds])
        assert returns.shape == lengths.shape == (SEEDS, EPISODES)
        # The solve rate is the fraction of episodes with a positive return, per seed and overall.
        for s, seed in enumerate(seeds):
            assert seed["success_rate"] == pytest.approx(float((returns[s] > 0).mean()))
        assert summary["success_rate"] == pytest.approx(float((returns > 0).mean()))
        assert summary["mean_return"] == pytest.approx(float(returns.mean()))
        assert summary["mean_length"] == pytest.approx(float(lengths.mean()))
        # Returns are 0 or 1 - 0.9 t / horizon; lengths run to the goal or to the maze's horizon.
        assert ((returns == 0) | ((returns >= 0.1) & (returns < 1))).all()
        assert ((lengths >= 1) & (lengths <= horizon)).all()
        np.testing.assert_array_equal(lengths[returns == 0], horizon)
        for name, low, high in [
            ("success_rate", "success_low", "success_high"),
            ("mean_return", "return_low", "return_high"),
            ("mean_length", "length_low", "length_high"),
        ]:
            assert summary[low] <= summary[name] <= summary[high], (maze, name)
        assert 0 <= summary["success_low"] and summary["success_high"] <= 1
    with open(out / "results_summary.csv", newline="") as file:
        summary_rows = list(csv.DictReader(file))
    assert [r["test_env"] for r in summary_rows] == SUITE.split(",")


def test_screenshots_written_during_training(run_dir):
    shots = run_dir / "run" / "screenshots"
    assert sorted(os.listdir(shots)) == [f"seed_{s}" for s in range(SEEDS)]
    for seed in range(SEEDS):
        names = sorted(os.listdir(shots / f"seed_{seed}"))
        # DR generates new levels every iteration; one picture per interval of 1 iteration.
        assert names == ["update_000000_generated.png", "update_000001_generated.png"]
        assert all(os.path.getsize(shots / f"seed_{seed}" / n) > 200 for n in names)


def test_score_curves_of_the_run(run_dir):
    from lamella.ued.screenshots import plot_score_curves

    path = plot_score_curves(run_dir / "run" / "metrics.json", run_dir / "scores.png")
    assert os.path.getsize(path) > 1000


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--suite", "minimax"], "unknown suite or maze 'minimax'"),
        (["--suite", "SixteenRooms,Labirynth"], "Did you mean Labyrinth"),
        (["--suite", "minimax-test", "--envs", "CartPole-v1"], "not both"),
    ],
)
def test_bad_suites_exit_2(run_dir, capsys, arguments, message):
    status = main(["eval", "checkpoints", str(run_dir / "run"), *arguments, "--out", str(run_dir / "x.csv")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("lamella eval checkpoints: error: ") and message in err
    assert "Traceback" not in err


def test_run_dir_without_checkpoints_exits_2(run_dir, capsys):
    status = main(["eval", "checkpoints", str(run_dir / "run" / "screenshots"), "--suite", "minimax-test"])
    err = capsys.readouterr().err
    assert status == 2 and "holds no checkpoints" in err


def test_report_names_the_evaluation_levels(run_dir, tmp_path, capsys):
    """``lamella eval report``'s per-level breakdown of a UED run names each level as the run's
    ``config.json`` lists it (``eval_levels``, the order of ``<metric>_level_<i>``); it said
    "level 0" before."""
    import re

    with open(run_dir / "run" / "config.json") as file:
        levels = json.load(file)["config"]["eval_levels"]
    out = tmp_path / "report.html"
    status = main(["eval", "report", str(run_dir / "run"), "-o", str(out), "--reps", "20", "--no-gifs"])
    assert status == 0, capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    breakdown = re.search(r'<section id="breakdown">(.*?)</section>', text, re.S).group(1)
    assert "solved per level" in breakdown
    for level in levels:
        assert re.search(rf"<td>dr @ [^<]*</td><td>{re.escape(level)}</td>", breakdown), level
    assert "<td>level 0</td>" not in breakdown
