"""The run-log format between layers: lamella-agents' driver writes it, lamella-eval reads it.

The format is written down once (docs/run-log-format.md); neither package imports the other. This
test trains a tiny runner with a per-agent step metric and a per-level evaluation metric through
the driver, then reads ``metrics.json`` and ``metrics.csv`` with lamella-eval and checks that both
views hold the same runs and the numbers the driver returned.
"""

from __future__ import annotations

import csv

import jax.numpy as jnp
import numpy as np

from lamella.agents.driver import RunSpec, run
from lamella.agents.testing import BanditConfig, make_bandit_runner
from lamella.eval import read_run_log

CONFIG = BanditConfig(total_timesteps=32 * 4, eval_episodes=3)  # 4 iterations of 32 steps


def _runner():
    runner = make_bandit_runner(CONFIG)

    def step(state):
        state, metrics = runner.step(state)
        return state, {**metrics, "reward": state.params["mean"][:2] * 1.0}  # (agent,)

    def evaluate(state, key):
        metrics = runner.evaluate(state, key)
        return {
            **metrics,
            "solved": metrics["episode_return"][:, None] + jnp.arange(2.0),
        }  # (episodes, level)

    return runner._replace(
        step=step, evaluate=evaluate, metric_axes={"reward": ("agent",), "solved": ("level",)}
    )


def test_the_driver_writes_what_lamella_eval_reads(tmp_path):
    result = run(
        _runner(),
        RunSpec("bandit", task="Bandit-v0"),
        seeds=2,
        out_dir=str(tmp_path / "run"),
        chunk_iterations=1,  # a step metric is logged as its chunk's mean: one iteration per chunk
        progress=False,
        plot=False,
    )
    from_json = read_run_log(result.metrics_path)
    from_csv = read_run_log(result.csv_path)
    assert (
        [r.name for r in from_json]
        == [r.name for r in from_csv]
        == [
            "custom/Bandit-v0/bandit/seed_0",
            "custom/Bandit-v0/bandit/seed_1",
        ]
    )
    for a, b in zip(from_json, from_csv, strict=True):
        assert [e.step_count for e in a.evaluations] == [e.step_count for e in b.evaluations]
        for ea, eb in zip(a.evaluations, b.evaluations, strict=True):
            assert set(ea.metrics) == set(eb.metrics)
            for name in ea.metrics:
                np.testing.assert_allclose(ea.metrics[name], eb.metrics[name], rtol=1e-6, err_msg=name)
        assert a.absolute_metrics is not None and b.absolute_metrics is not None
        assert set(a.absolute_metrics) == set(b.absolute_metrics)
    last = from_json[1].evaluations[-1].metrics
    # Per-agent and per-level keys, one per index; the final parameters are what the driver returned.
    assert {"train_reward_agent_0", "train_reward_agent_1", "solved_level_0", "solved_level_1"} <= set(last)
    np.testing.assert_allclose(last["train_reward_agent_1"], [np.asarray(result.state.params["mean"])[1, 1]])
    np.testing.assert_allclose(last["solved_level_1"], last["mean_episode_return"] + 1.0, rtol=1e-6)
    for member, logged in enumerate(from_json):  # the driver's final score is the logged final mean
        np.testing.assert_allclose(
            logged.absolute_metrics["mean_episode_return"].mean(), result.final_return[member], rtol=1e-6
        )


def test_the_csv_reader_finds_columns_by_name(tmp_path):
    result = run(
        _runner(),
        RunSpec("bandit", task="Bandit-v0"),
        out_dir=str(tmp_path / "run"),
        chunk_iterations=2,
        progress=False,
        plot=False,
    )
    with open(result.csv_path, newline="") as file:
        rows = list(csv.reader(file))
    reordered = tmp_path / "reordered.csv"
    with open(reordered, "w", newline="") as file:
        csv.writer(file).writerows([list(reversed(row)) for row in rows])  # same columns, other order
    (original,) = read_run_log(result.csv_path)
    (again,) = read_run_log(reordered)
    assert original.name == again.name and len(original.evaluations) == len(again.evaluations)
    for ea, eb in zip(original.evaluations, again.evaluations, strict=True):
        assert ea.step_count == eb.step_count and set(ea.metrics) == set(eb.metrics)
