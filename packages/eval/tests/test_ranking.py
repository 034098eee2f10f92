"""The ranking of configs by IQM: label parsing, the table, and ``lamella eval aggregate`` on a
sweep folder (one run directory per compiled program, as ``lamella sweep`` writes it)."""

from __future__ import annotations

import argparse
import csv
import json

import numpy as np

from lamella.eval import Estimates, cli
from lamella.eval._src import tables


def test_parse_config_label():
    assert tables.parse_config_label("ppo[learning_rate=0.001,num_envs=8]") == (
        "ppo",
        {"learning_rate": "0.001", "num_envs": "8"},
    )
    assert tables.parse_config_label("sac[hidden_sizes=(64,64),tau=0.01]") == (
        "sac",
        {"hidden_sizes": "(64,64)", "tau": "0.01"},
    )
    for name in ("ppo", "ppo[]", "ppo[lr]", "[a=1]", "ppo[a=1,a=2]"):
        assert tables.parse_config_label(name) is None


def _estimates(points, lows, highs):
    labels = ("iqm", "mean")
    arr = lambda v: np.array([v, v + 1.0])  # noqa: E731
    return Estimates(
        labels,
        {a: arr(v) for a, v in points.items()},
        {a: arr(v) for a, v in lows.items()},
        {a: arr(v) for a, v in highs.items()},
        0.95,
        100,
    )


def test_ranking_table_orders_by_iqm_and_flags_overlap():
    names = ["ppo[lr=0.1,n=2]", "ppo[lr=0.3,n=2]", "ppo[lr=0.1,n=4]"]
    estimates = _estimates(
        dict(zip(names, [0.5, 0.9, 0.7])),
        dict(zip(names, [0.4, 0.8, 0.75])),
        dict(zip(names, [0.6, 1.0, 0.85])),
    )
    header, rows = tables.ranking_table(estimates)
    assert header == ["rank", "algorithm", "lr", "n", "iqm [95% CI]", "overlaps best"]
    assert rows == [
        ["1", "ppo[lr=0.3,n=2]", "0.3", "2", "0.900 [0.800, 1.000]", "best"],
        ["2", "ppo[lr=0.1,n=4]", "0.1", "4", "0.700 [0.750, 0.850]", "yes"],  # 0.85 >= 0.8
        ["3", "ppo[lr=0.1,n=2]", "0.1", "2", "0.500 [0.400, 0.600]", "no"],
    ]
    # Names that are not sweep labels: no setting columns.
    header, _ = tables.ranking_table(_estimates({"a": 1.0, "b": 2.0}, {"a": 0, "b": 1}, {"a": 2, "b": 3}))
    assert header == ["rank", "algorithm", "iqm [95% CI]", "overlaps best"]


def _program(root, name, lrs, num_envs):
    runs = {}
    for lr in lrs:
        runs[f"ppo[learning_rate={lr},num_envs={num_envs}]"] = {
            f"seed_{s}": {
                "step_0": {"step_count": 0, "mean_episode_return": [0.0]},
                "step_1": {"step_count": 1_234_567, "mean_episode_return": [1.0 + s]},
                "absolute_metrics": {"mean_episode_return": [100 * lr + num_envs + s]},
            }
            for s in range(4)
        }
    (root / name).mkdir(parents=True)
    (root / name / "metrics.json").write_text(json.dumps({"classic_control": {"CartPole-v1": runs}}))


def test_aggregate_ranks_a_sweep_folder(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _program(sweep, "p0-num_envs=2", [0.1, 0.3], 2)
    _program(sweep, "p1-num_envs=4", [0.1, 0.3], 4)
    parser = argparse.ArgumentParser(prog="lamella")
    cli.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "eval"
    args = parser.parse_args(
        ["eval", "aggregate", str(sweep), "--out-dir", str(out), "--reps", "200", "--normalize", "none"]
    )
    assert args.func(args) == 0
    with open(out / "ranking.csv", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["rank", "algorithm", "learning_rate", "num_envs", "iqm [95% CI]", "overlaps best"]
    # Scores 100 * lr + num_envs + seed (seeds 0..3): IQM = 100 * lr + num_envs + 1.5.
    assert [(r[2], r[3], r[4].split()[0]) for r in rows[1:]] == [
        ("0.3", "4", "35.500"),
        ("0.3", "2", "33.500"),
        ("0.1", "4", "15.500"),
        ("0.1", "2", "13.500"),
    ]
    assert (out / "ranking.png").stat().st_size > 0
    assert "ranking by IQM (best first):" in capsys.readouterr().out
    # The sweep's names hold commas: sample_efficiency.csv quotes them (its rows had 8 fields).
    with open(out / "sample_efficiency.csv", encoding="utf-8") as handle:
        curves = list(csv.DictReader(handle))
    assert {r["algorithm"] for r in curves} == {
        f"ppo[learning_rate={lr},num_envs={n}]" for lr in (0.1, 0.3) for n in (2, 4)
    }
    assert all(None not in r and float(r["lower"]) <= float(r["point"]) <= float(r["upper"]) for r in curves)
    assert {r["step_count"] for r in curves} == {"0", "1234567"}  # was 1.23457e+06
