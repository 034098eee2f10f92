"""The off-policy loop's mechanics, the shared driver (logs, checkpoints, resume), the algorithm
entry points and ``lamella train dqn`` with lamella-envs, lamella-buffers and lamella-agents only."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import cli, train
from lamella.agents.algorithms import algorithm_entries
from lamella.agents.config import ConfigError, algorithm_table, resolve_config
from lamella.agents.driver import run_experiment
from lamella.agents.offpolicy import (
    DQNTrainConfig,
    SACTrainConfig,
    make_offpolicy_runner,
    plugins,
)

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


def test_lamella_agents_declares_every_offpolicy_algorithm_by_entry_point():
    entries = {e.name: e for e in algorithm_entries()}
    for name in ("ppo", "es", "sac", "td3", "ddpg", "tqc", "dqn"):
        assert entries[name].package == "lamella-agents", entries.get(name)
    table = algorithm_table()
    assert table["dqn"][0] is DQNTrainConfig and table["sac"][0] is SACTrainConfig
    config = resolve_config("sac", "GMazeGoalDubins-v0", overrides=["total_timesteps=1000"])
    assert isinstance(config, SACTrainConfig) and config.her and config.total_timesteps == 1000


def test_lamella_train_list_shows_each_algorithm_with_its_package(capsys):
    assert train.main(["--list"]) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert {name: rows[name] for name in ("dqn", "ppo", "sac")} == dict.fromkeys(
        ("dqn", "ppo", "sac"), "lamella-agents"
    )


def test_tiny_dqn_through_lamella_train(tmp_path, capsys):
    """``lamella train dqn`` on CartPole-v1 with a tiny budget: 2 seeds, 3 chunks of 2 iterations,
    greedy evaluations in the run log, gradient steps ran (a TD loss was logged), the update
    metrics are means over the chunk's updates, and ``--gif`` drew one greedy episode."""
    out = tmp_path / "dqn"
    # 100 env steps an iteration; learning starts at the last step of the 4th iteration.
    argv = [
        "dqn", "--env", "CartPole-v1", "--seeds", "2", "--out-dir", str(out), "--no-progress", "--no-plot",
        "--eval-episodes", "2", "--chunk-iterations", "2", "--gif", "total_timesteps=600", "rollout_steps=25",
        "num_envs=4", "learning_starts=400", "batch_size=16", "buffer_size=400", "hidden_sizes=16",
        "epsilon_start=0.5", "epsilon_end=0.5", "updates_per_step=1",
    ]  # fmt: skip
    assert train.main(argv) == 0
    printed = capsys.readouterr().out
    assert "finished" in printed and str(out / "episode.gif") in printed
    import imageio.v3 as iio

    frames = iio.imread(out / "episode.gif", index=None)
    # One CartPole episode (at most 500 steps) and its reset's frame; the cart or pole moved.
    assert frames.ndim == 4 and 2 <= frames.shape[0] <= 501 and frames.std(axis=0).max() > 0
    with open(out / "metrics.json") as f:
        runs = json.load(f)["classic_control"]["CartPole-v1"]["dqn"]
    assert sorted(runs) == ["seed_0", "seed_1"]
    steps = [runs["seed_0"][f"step_{i}"]["step_count"] for i in range(4)]
    assert steps == [0, 200, 400, 600]
    # The first chunk only warmed up: its update metrics were not measured, and are not logged
    # (they were logged as 0.0). The second updated on 1 of its 50 steps: its train_epsilon is
    # that update's 0.5 (it was 0.25, the mean with an iteration that did not update).
    for run in runs.values():
        assert "train_loss" not in run["step_1"] and "train_epsilon" not in run["step_1"]
        assert run["step_1"]["train_updates"] == [0.0] and run["step_1"]["train_episodes"][0] > 0
        # Gradient steps per iteration: one in the chunk's two iterations, then 25 in each.
        assert run["step_2"]["train_updates"] == [0.5] and run["step_3"]["train_updates"] == [25.0]
        assert run["step_2"]["train_epsilon"] == [0.5] and run["step_3"]["train_epsilon"] == [0.5]
        assert min(run["step_2"]["train_loss"]) > 0
    assert all(1 <= r <= 500 for r in runs["seed_1"]["absolute_metrics"]["mean_episode_return"])


def test_her_without_lamella_gcrl_names_the_package_to_install(monkeypatch, capsys):
    # Whatever this env has installed, the lookup sees no 'her' batch sampler.
    real = plugins.importlib.metadata.entry_points
    monkeypatch.setattr(
        plugins.importlib.metadata,
        "entry_points",
        lambda **kw: [] if kw.get("group") == plugins.SAMPLER_GROUP else real(**kw),
    )
    config = resolve_config("sac", "PointRobotGoal-v0", overrides=["her=true"])
    with pytest.raises(ConfigError, match="pip install lamella-gcrl"):
        make_offpolicy_runner(config)
    with pytest.raises(SystemExit):
        train.main(
            ["sac", "--env", "GMazeGoalDubins-v0", "--her", "--no-progress", "--out-dir", "/nonexistent/x"]
        )
    assert "pip install lamella-gcrl" in capsys.readouterr().err


def test_a_goal_setter_name_without_its_package_names_the_package_to_install(monkeypatch, capsys, tmp_path):
    # Whatever this env has installed, the lookup sees no goal setter.
    monkeypatch.chdir(tmp_path)
    real = plugins.importlib.metadata.entry_points
    monkeypatch.setattr(
        plugins.importlib.metadata,
        "entry_points",
        lambda **kw: [] if kw.get("group") == plugins.SETTER_GROUP else real(**kw),
    )
    assert plugins.goal_setter_names() == ["none"]
    resolve_config("sac", "PointRobotGoal-v0", overrides=["goal_setter=none"]).validate()
    config = resolve_config("sac", "PointRobotGoal-v0", overrides=["goal_setter=frontier"])
    with pytest.raises(ConfigError, match="pip install lamella-gcrl"):
        make_offpolicy_runner(config)
    with pytest.raises(ConfigError, match=r"one of \['none'\]"):
        resolve_config("sac", "PointRobotGoal-v0", overrides=["goal_setter=nope"]).validate()
    with pytest.raises(SystemExit) as info:
        train.main(["sac", "--env", "GMazeGoalDubins-v0", "goal_setter=frontier", "--dry-run"])
    assert info.value.code == 2 and "pip install lamella-gcrl" in capsys.readouterr().err


def test_her_switch_is_a_boolean_config_field(capsys, monkeypatch):
    # --print-config builds the runner, which needs lamella-gcrl's HER sampler: the parsing alone here.
    monkeypatch.setattr(cli, "_check_config", lambda algorithm, config: None)
    assert (
        train.main(["td3", "--env", "PointRobotGoal-v0", "--her", "her_strategy=final", "--print-config"])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["her"] is True and printed["config"]["her_strategy"] == "final"
    with pytest.raises(SystemExit):
        train.main(["ppo", "--her", "--print-config"])
    err = capsys.readouterr().err
    assert "PPOConfig has no boolean field 'her'" in err and "anneal_lr" in err


def test_her_needs_a_goal_env_and_one_step_targets():
    config = SACTrainConfig(env_id="Pendulum-v1", her=True, **NO_LEARNING)
    with pytest.raises(ValueError, match="goal-conditioned env"):
        make_offpolicy_runner(config, batch_sampler=lambda *args: None)
    with pytest.raises(ValueError, match="n_step"):
        make_offpolicy_runner(dataclasses.replace(config, n_step=3))


def test_a_negative_evaluation_step_cap_is_refused():
    """It was silently the env's own limit, as 0 is."""
    with pytest.raises(
        ConfigError, match=r"^SACTrainConfig\.eval_max_steps must be >= 0 \(.*env's own limit.*got -1"
    ):
        resolve_config("sac", "Pendulum-v1", overrides=["eval_max_steps=-1"]).validate()
    resolve_config("sac", "Pendulum-v1", overrides=["eval_max_steps=0"]).validate()


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

    # The whole runner state (train state, replay buffer, env states, keys) and the run log files.
    def raw(x):
        return np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)

    whole_leaves, resumed_leaves = jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)
    assert jax.tree.structure(whole.state) == jax.tree.structure(resumed.state)
    for a, b in zip(whole_leaves, resumed_leaves, strict=True):
        np.testing.assert_array_equal(raw(a), raw(b))
    for name in ["metrics.json", "metrics.csv"]:
        with open(tmp_path / "whole" / name, "rb") as a, open(tmp_path / "part" / name, "rb") as b:
            assert a.read() == b.read(), name
    with open(whole.metrics_path) as f:
        log = json.load(f)
    runs = log["classic_control"]["Pendulum-v1"]["sac"]
    assert set(runs) == {"seed_0", "seed_1"}
    assert "train_critic_loss" in runs["seed_0"]["step_1"]
    # The first iteration learned on its last step only (learning_starts=100): its update metrics
    # are that step's, not a mean with 99 zeros (train_alpha was about 0.01 for a temperature of 1).
    assert runs["seed_0"]["step_1"]["train_alpha"][0] > 0.9


@pytest.mark.parametrize(
    ("algorithm", "env_id", "overrides", "words"),
    [
        # Each trained silently without the setting: DQN's soft update never reads the period,
        # a fixed temperature never reads its learning rate or target, no smoothing noise no clip.
        (
            "dqn",
            "CartPole-v1",
            ["tau=0.01", "target_update_period=100"],
            r"^DQNTrainConfig\.target_update_period=100 .*hard target copies.*tau=0\.01 .*soft.*"
            r"never read; set tau=1.*or leave target_update_period at 500",
        ),
        (
            "sac",
            "Pendulum-v1",
            ["autotune_alpha=false", "alpha_learning_rate=1e-3"],
            r"^SACTrainConfig\.alpha_learning_rate=0\.001 .*autotune_alpha=False.*init_alpha=1\.0.*"
            r"set autotune_alpha=True, or leave alpha_learning_rate at 0\.0003",
        ),
        (
            "tqc",
            "Pendulum-v1",
            ["autotune_alpha=false", "target_entropy_scale=0.5"],
            r"^TQCTrainConfig\.target_entropy_scale=0\.5 .*autotune_alpha=False.*leave target_entropy_scale at 1\.0",
        ),
        (
            "td3",
            "Pendulum-v1",
            ["policy_noise=0", "noise_clip=0.3"],
            r"^TD3TrainConfig\.noise_clip=0\.3 .*policy_noise=0\.0 .*no target policy smoothing.*"
            r"leave noise_clip at 0\.5",
        ),
        # The loop's own: HER's settings without HER, the frontier setter's without a goal setter
        # (and the algorithm's own still named, through the class order).
        (
            "sac",
            "Pendulum-v1",
            ["her_relabel_probability=0.5"],
            r"^SACTrainConfig\.her_relabel_probability=0\.5 .*her=False.*set her=True, or leave her_relabel_probability at 0\.8",
        ),
        (
            "dqn",
            "CartPole-v1",
            ["frontier_grid=5"],
            r"^DQNTrainConfig\.frontier_grid=5 .*goal_setter='none'.*set goal_setter=frontier",
        ),
    ],
)
def test_a_setting_that_the_chosen_mode_never_reads_is_refused(algorithm, env_id, overrides, words, capsys):
    with pytest.raises(ConfigError, match=words):
        resolve_config(algorithm, env_id, overrides=overrides)
    with pytest.raises(SystemExit):
        train.main([algorithm, "--env", env_id, *overrides, "--print-config"])
    assert "never read" in capsys.readouterr().err


def test_a_mode_switch_on_a_preset_that_tunes_the_other_mode_is_no_error():
    """Only a field the user sets is refused: the CartPole preset's target_update_period=128 and
    the Pendulum preset's alpha_learning_rate=1e-3 stay with the switched mode, unread."""
    assert resolve_config("dqn", overrides=["tau=0.01"]).target_update_period == 128
    assert (
        resolve_config("sac", "Pendulum-v1", overrides=["autotune_alpha=false"]).alpha_learning_rate == 1e-3
    )
    resolve_config("dqn", overrides=["target_update_period=100"]).validate()  # tau=1: hard copies
    resolve_config("sac", "Pendulum-v1", overrides=["alpha_learning_rate=1e-2"]).validate()
    resolve_config("td3", "Pendulum-v1", overrides=["noise_clip=0.3"]).validate()
    # validate() cannot tell a preset's value from the user's: it leaves these alone.
    DQNTrainConfig(tau=0.01, target_update_period=100).validate()
