"""The compiled loop's mechanics, the shared driver (logs, checkpoints, resume) and the CLI."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import algorithm_table, resolve_config
from lamella.agents.driver import run_experiment
from lamella.gcrl import DQNTrainConfig, SACTrainConfig, make_offpolicy_runner

# No updates (learning never starts): the loop's bookkeeping alone, cheap to compile.
NO_LEARNING = dict(hidden_sizes=(8,), learning_starts=10**9, batch_size=8, eval_episodes=2)


def test_truncated_steps_store_the_final_observation_and_reset_without_autoreset():
    # Pendulum truncates after 200 steps and never terminates.
    config = SACTrainConfig(
        env_id="Pendulum-v1", total_timesteps=250, rollout_steps=250, buffer_size=1000, **NO_LEARNING
    )
    runner = make_offpolicy_runner(config)
    state, _ = jax.jit(runner.step)(jax.jit(runner.init)(jax.random.key(0)))
    experience = state.buffer_state.trajectory.experience
    truncated = np.asarray(experience.truncated[0, :250])
    assert np.flatnonzero(truncated).tolist() == [199]
    assert not np.any(np.asarray(experience.terminated))
    obs, next_obs = np.asarray(experience.obs[0]), np.asarray(experience.next_obs[0])
    # Inside an episode the next step starts where this one ended ...
    np.testing.assert_array_equal(obs[1:199], next_obs[:198])
    # ... and at the time limit the stored next_obs is the true final observation, not the
    # first observation of the next episode.
    assert not np.allclose(next_obs[199], obs[200])
    assert int(state.env_steps) == 250


def test_random_actions_before_learning_starts_and_episode_metrics():
    config = DQNTrainConfig(
        env_id="CartPole-v1",
        total_timesteps=400,
        rollout_steps=100,
        num_envs=4,
        buffer_size=800,
        **NO_LEARNING,
    )
    runner = make_offpolicy_runner(config)
    state, metrics = jax.jit(runner.step)(jax.jit(runner.init)(jax.random.key(1)))
    actions = np.asarray(state.buffer_state.trajectory.experience.action[:, :100])
    assert 0.3 < actions.mean() < 0.7  # uniform random actions
    assert float(metrics["episodes"]) > 0 and 8 < float(metrics["episode_return"]) < 100
    assert float(metrics["loss"]) == 0.0  # no update yet


def test_goal_env_reports_success_and_her_needs_a_goal_env():
    config = SACTrainConfig(
        env_id="PointRobotGoal-v0",
        total_timesteps=100,
        rollout_steps=100,
        buffer_size=200,
        her=True,
        **NO_LEARNING,
    )
    runner = make_offpolicy_runner(config)
    state, metrics = jax.jit(runner.step)(jax.jit(runner.init)(jax.random.key(2)))
    assert "success_rate" in metrics
    evaluation = jax.jit(runner.evaluate)(state, jax.random.key(3))
    assert evaluation["success"].shape == (2,) and evaluation["episode_return"].shape == (2,)
    with pytest.raises(ValueError, match="goal-conditioned env"):
        make_offpolicy_runner(dataclasses.replace(config, env_id="Pendulum-v1"))
    with pytest.raises(ValueError, match="n_step"):
        make_offpolicy_runner(dataclasses.replace(config, n_step=3))


def test_the_cli_table_has_the_offpolicy_algorithms_and_presets():
    table = algorithm_table()
    for name in ("sac", "td3", "ddpg", "tqc", "dqn"):
        assert name in table
    config = resolve_config("sac", "GMazeGoalDubins-v0", overrides=["total_timesteps=1000"])
    assert isinstance(config, SACTrainConfig) and config.her and config.total_timesteps == 1000


def test_lamella_train_her_flag(tmp_path, capsys):
    from lamella.gcrl.train import main

    assert main(["td3", "--env", "PointRobotGoal-v0", "--her", "her_strategy=final", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["her"] is True and printed["config"]["her_strategy"] == "final"


def test_driver_logs_checkpoints_and_resumes_bit_identically(tmp_path):
    config = SACTrainConfig(
        env_id="Pendulum-v1",
        total_timesteps=300,
        rollout_steps=100,
        hidden_sizes=(8,),
        learning_starts=100,
        batch_size=8,
        buffer_size=400,
        eval_episodes=2,
        eval_max_steps=20,
    )
    whole = run_experiment(
        config, seeds=2, out_dir=str(tmp_path / "whole"), chunk_iterations=1, progress=False
    )
    assert whole.finished and os.path.exists(whole.metrics_path) and whole.plot_path
    part = run_experiment(
        config,
        seeds=2,
        out_dir=str(tmp_path / "part"),
        chunk_iterations=1,
        progress=False,
        max_chunks=2,
        plot=False,
    )
    assert not part.finished
    resumed = run_experiment(
        config, seeds=2, out_dir=str(tmp_path / "part"), resume=True, progress=False, plot=False
    )
    assert resumed.finished
    same = jax.tree.map(
        lambda a, b: bool(jnp.all(a == b)), whole.state.train_state, resumed.state.train_state
    )
    assert jax.tree.all(same)
    with open(whole.metrics_path) as f:
        log = json.load(f)
    runs = log["classic_control"]["Pendulum-v1"]["sac"]
    assert set(runs) == {"seed_0", "seed_1"}
    assert "train_critic_loss" in runs["seed_0"]["step_1"]
