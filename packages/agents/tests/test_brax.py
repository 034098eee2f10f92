"""PPO and SAC on a Brax body (lamella-envs[brax]) through ``lamella train``: the same driver,
run log and checkpoints as every other env, several seeds in one compiled program.

The body is Brax's inverted pendulum on the spring backend (the cheapest to compile on CPU):
reward 1 per step while the pole stays within 0.2 rad, 1000-step episodes. A uniformly random
policy returns 23 on average (100 episodes, the best 71), so the thresholds below are
learning, not luck.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pytest

from lamella.agents import cli
from lamella.agents.testing import assert_threshold

ENV_ID = "brax:inverted_pendulum@spring"


def lamella(argv):
    """What ``lamella`` does with its entry points, for this package's command only."""
    parser = argparse.ArgumentParser(prog="lamella")
    subparsers = parser.add_subparsers(dest="command", required=True)
    cli.register(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


def final_returns(run_dir: str, algorithm: str) -> tuple[dict, np.ndarray]:
    runs = json.load(open(os.path.join(run_dir, "metrics.json")))["brax"][ENV_ID][algorithm]
    returns = [np.mean(runs[seed]["absolute_metrics"]["mean_episode_return"]) for seed in sorted(runs)]
    return runs, np.asarray(returns)


def test_ppo_learns_the_brax_pendulum_for_three_seeds(tmp_path, capsys):
    """``lamella train ppo --env brax:inverted_pendulum@spring`` (its preset) for 1e5 steps, 3
    seeds in one program. Threshold: the final greedy return (4 episodes) >= 150 for every
    seed, twice the best of 100 random episodes (measured: 2e5 steps gave 511 and 912)."""
    out = str(tmp_path / "ppo")
    argv = ["train", "ppo", "--env", ENV_ID, "--seeds", "3", "--no-progress", "--no-plot", "--out-dir", out]
    assert lamella([*argv, "total_timesteps=102400"]) == 0
    assert "finished" in capsys.readouterr().out
    runs, returns = final_returns(out, "ppo")
    assert sorted(runs) == ["seed_0", "seed_1", "seed_2"]
    assert_threshold(returns, 150, "PPO brax inverted_pendulum final greedy return")
    assert os.listdir(os.path.join(out, "checkpoints")), "no checkpoint written"
    assert f'"{ENV_ID}"' in open(os.path.join(out, "config.json")).read()


def test_unknown_brax_env_or_backend_exits_2_naming_the_fix(tmp_path, capsys):
    for env_id, message in [
        ("brax:inverted_pendulm@spring", "did you mean 'inverted_pendulum'"),
        ("brax:ant@warp", "the backends are spring, positional, generalized, mjx"),
    ]:
        with pytest.raises(SystemExit) as info:
            lamella(["train", "ppo", "--env", env_id, "--out-dir", str(tmp_path / "r")])
        assert info.value.code == 2
        assert message in capsys.readouterr().err
        assert not os.path.exists(tmp_path / "r")
