"""The run log: marl-eval JSON layout, the CSV view, reload/truncate, env families, the plot."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from lamella.agents.plotting import learning_curves, plot_learning_curve
from lamella.agents.runlog import CSV_HEADER, RunLog, env_family, read_metrics


def make_log(tmp_path, **kwargs):
    log = RunLog(tmp_path, "classic_control", "CartPole-v1", "ppo", ["seed_0", "seed_1"], **kwargs)
    log.add(
        0, {"seed_0": {"mean_episode_return": [10.0, 12.0]}, "seed_1": {"mean_episode_return": [9.0, 9.5]}}
    )
    log.add(
        100,
        {
            "seed_0": {
                "mean_episode_return": np.array([50.0, 70.0], np.float32),
                "train_loss": np.float32(0.5),
            },
            "seed_1": {"mean_episode_return": [40.0, 41.0], "train_loss": 0.25},
        },
    )
    return log


def test_json_has_the_marl_eval_layout(tmp_path):
    log = make_log(tmp_path)
    log.set_absolute(
        {"seed_0": {"mean_episode_return": [70.0] * 3}, "seed_1": {"mean_episode_return": [41.0] * 3}}
    )
    log.write()
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert list(data) == ["classic_control"]
    assert list(data["classic_control"]) == ["CartPole-v1"]
    assert list(data["classic_control"]["CartPole-v1"]) == ["ppo"]
    runs = data["classic_control"]["CartPole-v1"]["ppo"]
    assert sorted(runs) == ["seed_0", "seed_1"]
    assert list(runs["seed_0"]) == ["step_0", "step_1", "absolute_metrics"]
    assert runs["seed_0"]["step_0"] == {"step_count": 0, "mean_episode_return": [10.0, 12.0]}
    assert runs["seed_0"]["step_1"] == {
        "step_count": 100,
        "mean_episode_return": [50.0, 70.0],
        "train_loss": [0.5],
    }
    assert isinstance(runs["seed_0"]["step_1"]["step_count"], int)
    assert runs["seed_1"]["absolute_metrics"] == {"mean_episode_return": [41.0, 41.0, 41.0]}
    assert read_metrics(tmp_path / "metrics.json") == data


def test_csv_matches_the_json(tmp_path):
    log = make_log(tmp_path)
    log.set_absolute({"seed_0": {"mean_episode_return": [70.0]}, "seed_1": {"mean_episode_return": [41.0]}})
    log.write()
    with open(tmp_path / "metrics.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == CSV_HEADER
    assert rows[0] == "environment,task,algorithm,run,step,step_count,metric,value_index,value".split(",")
    body = rows[1:]
    # 2 runs x (2 + 3 values over the two steps) + 1 absolute value each.
    assert len(body) == 2 * (2 + 3 + 1)
    assert [
        "classic_control",
        "CartPole-v1",
        "ppo",
        "seed_0",
        "1",
        "100",
        "mean_episode_return",
        "1",
        "70.0",
    ] in body
    assert ["classic_control", "CartPole-v1", "ppo", "seed_1", "1", "100", "train_loss", "0", "0.25"] in body
    assert [
        "classic_control",
        "CartPole-v1",
        "ppo",
        "seed_1",
        "absolute_metrics",
        "",
        "mean_episode_return",
        "0",
        "41.0",
    ] in body
    data = read_metrics(tmp_path / "metrics.json")["classic_control"]["CartPole-v1"]["ppo"]
    for environment, task, algorithm, run, step, step_count, metric, index, value in body:
        assert (environment, task, algorithm) == ("classic_control", "CartPole-v1", "ppo")
        entry = data[run][step if step == "absolute_metrics" else f"step_{step}"]
        assert entry[metric][int(index)] == float(value)
        if step != "absolute_metrics":
            assert entry["step_count"] == int(step_count)


def test_non_finite_values_are_left_out_with_a_warning(tmp_path):
    log = RunLog(tmp_path, "e", "t", "a", ["seed_0"])
    with pytest.warns(UserWarning, match="train_loss"):
        log.add(0, {"seed_0": {"mean_episode_return": [1.0], "train_loss": float("nan")}})
    log.add(1, {"seed_0": {"mean_episode_return": [1.0], "train_loss": [1.0, math.inf]}})  # warned once
    log.write()
    runs = read_metrics(tmp_path / "metrics.json")["e"]["t"]["a"]["seed_0"]
    assert "train_loss" not in runs["step_0"] and "train_loss" not in runs["step_1"]
    assert "NaN" not in (tmp_path / "metrics.json").read_text()


def test_bad_additions_are_refused(tmp_path):
    log = make_log(tmp_path)
    with pytest.raises(KeyError, match="seed_9"):
        log.add(200, {"seed_9": {"mean_episode_return": [1.0]}})
    with pytest.raises(ValueError, match="before the last"):
        log.add(50, {"seed_0": {"mean_episode_return": [1.0]}})
    with pytest.raises(ValueError, match="reserved"):
        log.add(300, {"seed_0": {"step_count": [1.0]}})


def test_load_and_truncate(tmp_path):
    log = make_log(tmp_path)
    log.set_absolute({"seed_0": {"mean_episode_return": [1.0]}, "seed_1": {"mean_episode_return": [2.0]}})
    log.write()
    again = RunLog(tmp_path, "classic_control", "CartPole-v1", "ppo", ["seed_0", "seed_1"])
    again.load()
    assert again.steps == log.steps and again.absolute == log.absolute
    again.truncate(1)
    assert len(again.steps) == 1 and again.absolute is None
    with pytest.raises(ValueError, match="cannot keep 5"):
        again.truncate(5)
    other = RunLog(tmp_path, "classic_control", "CartPole-v1", "dqn", ["seed_0"])
    with pytest.raises(ValueError, match="no entry"):
        other.load()


def test_load_continues_under_the_task_name_the_log_holds(tmp_path):
    """A run logged before its config named its task with settings resumes into the same entry."""
    make_log(tmp_path).write()
    renamed = RunLog(tmp_path, "classic_control", "CartPole-v1:max_steps=100", "ppo", ["seed_0", "seed_1"])
    renamed.load()
    assert renamed.task == "CartPole-v1" and len(renamed.steps) == 2
    renamed.write()
    assert list(read_metrics(renamed.json_path)["classic_control"]) == ["CartPole-v1"]


def test_tensorboard(tmp_path):
    pytest.importorskip("tensorboardX")
    log = make_log(tmp_path, tensorboard=True)
    log.write()
    log.close()
    event_files = list((tmp_path / "tensorboard" / "seed_1").glob("events.out.tfevents.*"))
    assert event_files and event_files[0].stat().st_size > 0


@pytest.mark.parametrize(
    ("env_id", "family"),
    [
        ("CartPole-v1", "classic_control"),
        ("Pendulum-v1", "classic_control"),
        ("Breakout-MinAtar", "minatar"),
        ("MemoryChain-bsuite", "bsuite"),
        ("Bandit-v0", "custom"),
        # A task with settings (lamella-ued's run_log_task) is in the family of its id.
        ("AMaze-13x13-v0:height=7,width=7,n_walls=8", "maze"),
        ("Foraging-5x5-2p-1f-v3:max_episode_steps=25", "multi_agent"),
        ("Bandit-v0:arms=3", "custom"),
    ],
)
def test_env_family(env_id, family):
    assert env_family(env_id) == family


def test_learning_curve_plot(tmp_path):
    log = make_log(tmp_path)
    log.write()
    curves = learning_curves(read_metrics(tmp_path / "metrics.json"))
    x, y = curves[("classic_control", "CartPole-v1", "ppo")]["seed_0"]
    np.testing.assert_array_equal(x, [0, 100])
    np.testing.assert_array_equal(y, [11.0, 60.0])
    path = plot_learning_curve(tmp_path / "metrics.json")
    assert path == str(tmp_path / "learning_curve.png")
    data = (tmp_path / "learning_curve.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
