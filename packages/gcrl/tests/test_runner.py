"""lamella-gcrl plugs into lamella-agents' off-policy loop: HER through the entry point, goal
success in the loop's metrics, and ``lamella train ... --her``."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from lamella.agents import train
from lamella.agents.offpolicy import plugins
from lamella.agents.offpolicy.loop import resolve_batch_sampler
from lamella.gcrl import PRESETS, SACTrainConfig, make_her_batch_sampler, make_offpolicy_runner

# No updates (learning never starts): the loop's bookkeeping alone, cheap to compile.
NO_LEARNING = dict(hidden_sizes=(8,), learning_starts=10**9, batch_size=8, eval_episodes=2)


def test_importing_lamella_gcrl_registers_nothing():
    from lamella.agents.algorithms import algorithm_entries
    from lamella.agents.config import registered_algorithms

    assert registered_algorithms() == []
    assert {e.package for e in algorithm_entries()} == {"lamella-agents"}  # gcrl adds no algorithm


def test_her_is_this_packages_sampler_found_by_entry_point():
    config = SACTrainConfig(env_id="PointRobotGoal-v0", her=True)
    assert plugins.sampler_available("her")
    assert plugins.load_batch_sampler("her") is make_her_batch_sampler
    assert resolve_batch_sampler(config, None) is make_her_batch_sampler
    assert resolve_batch_sampler(dataclasses.replace(config, her=False), None) is not make_her_batch_sampler


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
    assert float(evaluation["success_rate"]) == float(evaluation["success"].mean())
    with pytest.raises(ValueError, match="goal-conditioned env"):
        make_offpolicy_runner(dataclasses.replace(config, env_id="Pendulum-v1"))


def test_lamella_train_her_flag_builds_the_her_runner(tmp_path, capsys):
    argv = ["td3", "--env", "PointRobotGoal-v0", "--her", "her_strategy=final"]
    assert train.main([*argv, "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["her"] is True and printed["config"]["her_strategy"] == "final"
    out = tmp_path / "run"
    tiny = [
        "total_timesteps=200",
        "num_envs=2",
        "rollout_steps=50",
        "buffer_size=200",
        "batch_size=8",
        "hidden_sizes=8",
    ]
    tiny += ["learning_starts=50", "eval_episodes=2", "--no-progress", "--no-plot", "--out-dir", str(out)]
    assert train.main([*argv, *tiny]) == 0
    with open(out / "metrics.json") as f:
        run = json.load(f)["goal"]["PointRobotGoal-v0"]["td3"]["seed_0"]
    assert "success" in run["absolute_metrics"] and "train_critic_loss" in run["step_2"]
    # The run names the version of this package, whose batch sampler relabelled its batches.
    from importlib.metadata import version

    with open(out / "config.json") as f:
        assert json.load(f)["versions"]["lamella-gcrl"] == version("lamella-gcrl")


# The settings the package README's "SAC + HER in the Dubins maze" figures were measured with.
MAZE_PRESET = {
    "env_id": "GMazeGoalDubinsWalls-v0",
    "her": True,
    "her_strategy": "future",
    "her_relabel_probability": 0.8,
    "total_timesteps": 200_000,
    "num_envs": 8,
    "updates_per_step": 4,
    "reward_bounds": [-1.0, 0.0],
    "hidden_sizes": [128, 128],
    "gamma": 0.98,
    "tau": 0.05,
    "actor_learning_rate": 1e-3,
    "critic_learning_rate": 1e-3,
    "batch_size": 256,
}


def test_recorded_goal_experience_is_what_the_setter_stored(tmp_path):
    # A goal setter rewrites the goals the agent acts on; HER relabels only what it samples. The
    # vault (--record-vault) holds the stored transitions: the setter's goals, step for step.
    from lamella.agents.driver import run_experiment
    from lamella.agents.recording import read_recording

    config = SACTrainConfig(
        env_id="GMazeGoalDubins-v0", her=True, goal_setter="frontier", total_timesteps=128, num_envs=2,
        rollout_steps=16, learning_starts=32, batch_size=8, buffer_size=140, hidden_sizes=(8,), eval_episodes=1,
    )  # fmt: skip
    run = run_experiment(
        config, seeds=1, out_dir=tmp_path / "run", record_vault=True, progress=False, plot=False
    )
    data = read_recording(tmp_path / "run" / "vault")
    stored = run.state.buffer_state.trajectory.experience  # (1 member, envs, capacity, ...)
    assert sorted(data["observations"]) == ["achieved_goal", "desired_goal", "observation"]
    for key, value in data["observations"].items():
        assert value.shape[:2] == (2, 64)
        np.testing.assert_array_equal(value, np.asarray(stored.obs[key])[0, :, :64], err_msg=key)
    np.testing.assert_array_equal(data["actions"], np.asarray(stored.action)[0, :, :64])
    np.testing.assert_array_equal(data["rewards"], np.asarray(stored.reward)[0, :, :64])


def test_maze_preset_is_the_one_the_readme_measured(capsys):
    """``lamella train sac --env GMazeGoalDubinsWalls-v0 --her`` resolves to the settings of the
    README's measured command (a preset change must come with new measurements)."""
    assert train.main(["sac", "--env", "GMazeGoalDubinsWalls-v0", "--her", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)["config"]
    assert {k: printed[k] for k in MAZE_PRESET} == MAZE_PRESET


def test_frontier_maze_preset_is_the_seventh_rounds_command(capsys):
    """``lamella train sac --preset GMazeGoalDubinsWalls-v0-frontier`` is, field for field, the
    config of the command whose three seeds reached success >= 0.9 (README, "Seventh round"),
    and passes the config's checks here (this package provides its frontier goal setter)."""
    measured = ["--env", "GMazeGoalDubinsWalls-v0", "--her", "--eval-episodes", "100", "goal_setter=frontier"]
    measured += ["frontier_probability=0.8", "total_timesteps=600000", "buffer_size=100000"]
    assert train.main(["sac", *measured, "--print-config"]) == 0
    command = json.loads(capsys.readouterr().out)["config"]
    assert train.main(["sac", "--preset", "GMazeGoalDubinsWalls-v0-frontier", "--print-config"]) == 0
    preset = json.loads(capsys.readouterr().out)["config"]
    assert preset == command
    assert {k: preset[k] for k in MAZE_PRESET if k not in ("total_timesteps",)} == {
        k: v for k, v in MAZE_PRESET.items() if k != "total_timesteps"
    }
    assert (preset["goal_setter"], preset["total_timesteps"], preset["buffer_size"]) == (
        "frontier",
        600_000,
        100_000,
    )
    PRESETS["sac"]["GMazeGoalDubinsWalls-v0-frontier"].validate()


def test_every_her_preset_builds():
    """HER refuses a buffer shorter than one episode per env; no preset has one (every goal
    preset keeps thousands of steps per env against episodes of 50 or 70 steps)."""
    import lamella.envs
    from lamella.agents.offpolicy.loop import goal_functions
    from lamella.buffers import make_episode_buffer

    goals = {}
    built = 0
    for presets in PRESETS.values():
        for preset in presets.values():
            if getattr(preset, "her", False):
                if preset.env_id not in goals:  # the loop's own buffer and goal functions
                    goals[preset.env_id] = goal_functions(*lamella.envs.make(preset.env_id, autoreset=False))
                n = preset.num_envs
                make_her_batch_sampler(
                    preset, make_episode_buffer(n, preset.buffer_size // n, 8), goals[preset.env_id]
                )
                built += 1
    assert built >= 10


def test_a_sweep_over_the_relabel_probability_is_one_program():
    """HER takes ``her_relabel_probability`` traced: a sweep over it is one program (before, the
    config's range check read it as a Python number, so each value compiled its own program)."""
    from lamella.agents.sweep import plan_sweep

    config = SACTrainConfig(
        env_id="GMazeGoalDubins-v0", her=True, total_timesteps=512, num_envs=2, rollout_steps=16,
        buffer_size=400, **NO_LEARNING,
    )  # fmt: skip
    plan = plan_sweep("sac", config, {"her_relabel_probability": [0.2, 0.9]})
    assert plan.traced == ["her_relabel_probability"] and len(plan.programs) == 1, plan.static
