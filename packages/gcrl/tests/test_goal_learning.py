"""Goal-task learning tests (HER against no HER): every seed of a vmapped run must reach the
stated threshold. The plain off-policy learning tests are lamella-agents'.

Each test trains two seeds in one compiled program (``jax.vmap`` over
``jax.random.split(jax.random.key(0), 2)``) and evaluates the greedy policy after every
iteration inside the same program (keys ``fold_in(seed_key, iteration)``), so the whole
learning curve costs one compile. Thresholds, budgets and evaluation protocols are in each
docstring. Measured on a 2-core CPU (jax 0.10.2), see the package README.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lamella.agents.testing import assert_threshold, learning_curves
from lamella.gcrl import SACTrainConfig, make_offpolicy_runner


def train_with_evaluations(config, metric="episode_return"):
    """The greedy evaluation after every iteration, (seeds, iterations), 2 seeds in one compile.

    ``her=True`` reaches this package's HER sampler through its entry point, as ``lamella train``
    does (test_runner.py checks that it is the one found)."""
    return np.asarray(learning_curves(make_offpolicy_runner(config), 2, metric))


# SAC settings shared by the goal-task tests (HER "future" with probability 0.8 is the default).
GOAL_SAC = dict(
    hidden_sizes=(64, 64),
    num_envs=4,
    updates_per_step=2,
    batch_size=256,
    learning_starts=1000,
    actor_learning_rate=1e-3,
    critic_learning_rate=1e-3,
    alpha_learning_rate=1e-3,
)


def test_her_makes_sac_reach_goals():
    """HER + SAC on PointRobotGoal-v0 (sparse -1/0 reward, 50 steps, goals and starts uniform in
    [-1, 1]^2), 8000 env steps (4 envs, 2 updates per vector step, (64, 64) nets, gamma 0.95,
    "future" relabelling with probability 0.8), against the same agent without HER.

    Threshold: greedy success rate over 50 episodes after the last iteration >= 0.9 with HER
    for both seeds (measured: 1.0, 0.98), <= 0.5 without (measured: 0.08, 0.14).
    The Dubins goal env follows below.
    """
    config = dict(
        GOAL_SAC,
        env_id="PointRobotGoal-v0",
        total_timesteps=8000,
        gamma=0.95,
        rollout_steps=125,
        buffer_size=8000,
        eval_episodes=50,
    )
    with_her = train_with_evaluations(SACTrainConfig(**config, her=True), "success")
    without = train_with_evaluations(SACTrainConfig(**config, her=False), "success")
    assert_threshold(with_her[:, -1], 0.9, "PointRobotGoal success with HER")
    assert_threshold(without[:, -1], 0.5, "PointRobotGoal success without HER", at_least=False)


DUBINS = dict(
    GOAL_SAC,
    env_id="GMazeGoalDubins-v0",
    total_timesteps=6000,
    gamma=0.98,
    tau=0.05,
    rollout_steps=250,
    buffer_size=10_000,
    eval_episodes=100,
)


def test_her_makes_sac_reach_dubins_goals():
    """HER + SAC on the Dubins goal env (GMazeGoalDubins-v0 as gym-gmazes registers it: a car
    that moves 0.1 per step and steers, goals uniform in [-1, 1]^2, success within 0.1, sparse
    -1/0 reward, 70 steps), 6000 env steps (4 envs, 2 updates per vector step, (64, 64) nets,
    gamma 0.98, tau 0.05, Adam 1e-3, "future" relabelling with probability 0.8), against the
    same agent without HER; greedy evaluation of 100 episodes after each of the 6 iterations.

    Threshold: success after the last iteration >= 0.9 with HER for both seeds, <= 0.65
    without HER and at least 0.3 below HER (measured: HER 0.99, 0.98; without 0.48, 0.15;
    36 s for both runs on one core of a 2-core CPU). Over 8 other seeds: HER 0.96-1.00 after
    6000 steps, without HER 0.07-0.61. Without HER the agent gets there later (in the open
    square random exploration reaches goals too; see the package README).
    """
    with_her = train_with_evaluations(SACTrainConfig(**DUBINS, her=True), "success")
    without = train_with_evaluations(SACTrainConfig(**DUBINS, her=False), "success")
    assert with_her.shape == (2, 6)
    assert_threshold(with_her[:, -1], 0.9, "Dubins success with HER")
    assert_threshold(without[:, -1], 0.65, "Dubins success without HER", at_least=False)
    assert_threshold(with_her[:, -1] - without[:, -1], 0.3, "Dubins success, HER minus no HER")


DUBINS_MAZE = dict(
    DUBINS,
    env_id="GMazeGoalDubinsWalls-v0",
    total_timesteps=20_000,
    hidden_sizes=(128, 128),
    batch_size=128,
    rollout_steps=500,
    buffer_size=20_000,
)


@pytest.mark.slow
def test_her_beats_no_her_in_the_dubins_maze():
    """HER + SAC in the Dubins maze (GMazeGoalDubinsWalls-v0: the env above with gym-gmazes'
    ``set_walls()`` walls; a car that touches a wall stays there for the rest of the episode),
    20 000 env steps (4 envs, 2 updates per vector step, (128, 128) nets, batches of 128,
    otherwise as above), against the same agent without HER; greedy evaluation of 100 episodes
    after each of the 10 iterations.

    Statistic: mean success of the last 3 evaluations. Threshold: with HER >= 0.2 for both
    seeds and at least 0.1 above the same seed without HER; without HER <= 0.3 (measured
    2026-12-06, jax 0.10.2, the gcrl step's XLA flags: with HER 0.30, 0.32; without 0.11, 0.06;
    88 CPU-s for both runs on an idle 2-core Xeon. Batches of 256, as the other goal tests,
    gave 0.37, 0.35 and 0.09, 0.15 for 137 CPU-s: the halved batch keeps HER's lead at about
    two thirds of the update cost).
    The maze is much harder than the open env: the plain preset's 200 000 steps reach about 0.6;
    with frontier goals, 600 000 steps and a 100 000-step buffer every seed reaches 0.9 (see
    ``test_her_dubins_maze`` and the package README).
    """
    with_her = train_with_evaluations(SACTrainConfig(**DUBINS_MAZE, her=True), "success")
    without = train_with_evaluations(SACTrainConfig(**DUBINS_MAZE, her=False), "success")
    assert with_her.shape == (2, 10)
    her_late, plain_late = with_her[:, -3:].mean(axis=1), without[:, -3:].mean(axis=1)
    assert_threshold(her_late, 0.2, "Dubins maze late success with HER")
    assert_threshold(her_late - plain_late, 0.1, "Dubins maze late success, HER minus no HER")
    assert_threshold(plain_late, 0.3, "Dubins maze late success without HER", at_least=False)


@pytest.mark.research
def test_her_dubins_maze(tmp_path):
    """HER + SAC in the Dubins maze with frontier goals: ``lamella train sac --preset
    GMazeGoalDubinsWalls-v0-frontier --seeds 3`` (the walled maze's preset: 8 envs, 4 updates per
    vector step, critic targets clipped to [-50, 0], (128, 128) nets, gamma 0.98, tau 0.05, Adam
    1e-3, batch 256; plus this package's frontier goal setter with probability 0.8, 600 000 steps,
    a 100 000-step buffer), through the driver as the command runs it.

    Threshold: every seed's greedy success over 100 episodes after the last iteration >= 0.9
    (HER's usual figure). Measured 0.93, 0.94, 1.00 (about 37 min for the three seeds on one CPU
    core; package README, "Seventh round"). The walled maze's plain HER preset (200 000 steps, no
    goal setter) measured 0.62, 0.57, 0.58; without HER it must stay far below (<= 0.5 for both
    seeds of ``train_with_evaluations``, as this test has asserted since the plain preset's first
    version). HER against no HER at a CI budget is ``test_her_beats_no_her_in_the_dubins_maze``.
    """
    from lamella.agents import driver
    from lamella.agents.testing import flat_run_log
    from lamella.gcrl import PRESETS

    config = PRESETS["sac"]["GMazeGoalDubinsWalls-v0-frontier"]
    run = driver.run_experiment(config, seeds=3, out_dir=str(tmp_path / "run"), progress=False, plot=False)
    log = flat_run_log(run.metrics_path)
    final = np.array([np.mean(log[f"seed_{seed}/absolute_metrics/success"]) for seed in range(3)])
    assert all(len(log[f"seed_{seed}/absolute_metrics/success"]) == 100 for seed in range(3))
    assert_threshold(final, 0.9, "Dubins maze frontier preset success with HER")
    plain = PRESETS["sac"]["GMazeGoalDubinsWalls-v0"]
    without = train_with_evaluations(dataclasses.replace(plain, her=False), "success")
    assert_threshold(without[:, -1], 0.5, "Dubins maze preset success without HER", at_least=False)
