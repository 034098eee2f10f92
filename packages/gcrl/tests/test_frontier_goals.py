"""Frontier goals: training goals drawn in rarely visited cells, from code and from a config
(``goal_setter=frontier``, the entry point of ``lamella.goal_setters``)."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import train
from lamella.agents.config import ConfigError
from lamella.agents.offpolicy import plugins
from lamella.gcrl import SACTrainConfig, frontier_goals, make_frontier_goal_setter, make_offpolicy_runner

GRID = 4  # 16 cells over [-1, 1]^2, each 0.5 wide
DRAWS = 20_000


def _reward(achieved, desired):
    return -(jnp.linalg.norm(achieved - desired) > 0.1).astype(jnp.float32)


def _success(achieved, desired):
    return jnp.linalg.norm(achieved - desired) <= 0.1


def _setter(probability):
    return frontier_goals(_reward, _success, np.array([-1.0, -1.0]), np.array([1.0, 1.0]), probability, GRID)


def _cell(goal):
    digits = np.clip(((np.asarray(goal) + 1.0) / 0.5).astype(int), 0, GRID - 1)
    return digits[:, 0] * GRID + digits[:, 1]


def _obs(n, goal=0.0):
    zeros = jnp.zeros((n, 2), jnp.float32)
    return {"observation": zeros, "achieved_goal": zeros, "desired_goal": zeros + goal}


@pytest.mark.parametrize("probability", [0.0, 0.5, 1.0])
def test_frontier_goals_draw_rarely_visited_cells_with_the_stated_probability(probability):
    """Cell 0 visited once, cell 5 99 times, the other 14 never: with probability p a goal
    is in a visited cell with weight 1 / visits, else uniform over the 16 cells."""
    setter = _setter(probability)
    visits = jnp.zeros((GRID * GRID,), jnp.float32).at[0].set(1.0).at[5].set(99.0)
    state = {"goal": jnp.zeros((DRAWS, 2), jnp.float32), "visits": visits}
    obs, state = jax.jit(setter.reset)(jax.random.key(0), state, _obs(DRAWS), jnp.ones((DRAWS,), bool))
    goals = np.asarray(state["goal"])
    np.testing.assert_array_equal(np.asarray(obs["desired_goal"]), goals)  # the agent sees them
    assert np.all((goals >= -1.0) & (goals <= 1.0))
    share = np.bincount(_cell(goals), minlength=GRID * GRID) / DRAWS
    uniform = (1.0 - probability) / (GRID * GRID)
    rare, common = 1.0 / (1.0 + 1.0 / 99.0), (1.0 / 99.0) / (1.0 + 1.0 / 99.0)
    print(f"p={probability}: cell 0 {share[0]:.4f}, cell 5 {share[5]:.4f}, unvisited {share[1]:.4f} (cell 1)")
    # 20 000 draws: a share's standard deviation is at most 0.0036.
    assert share[0] == pytest.approx(probability * rare + uniform, abs=0.015)
    assert share[5] == pytest.approx(probability * common + uniform, abs=0.015)
    unvisited = np.delete(share, [0, 5]).sum()
    assert unvisited == pytest.approx(14 * uniform, abs=0.02)
    # Only envs that start an episode get a new goal.
    held = jnp.full((DRAWS, 2), 0.3, jnp.float32)
    started = jnp.arange(DRAWS) % 2 == 0
    _, kept = jax.jit(setter.reset)(jax.random.key(1), {"goal": held, "visits": visits}, _obs(DRAWS), started)
    np.testing.assert_array_equal(np.asarray(kept["goal"])[1::2], np.float32(0.3))


def test_frontier_goals_count_visits_and_score_steps_against_their_goal():
    setter = _setter(0.8)
    state = setter.init(jax.random.key(0), _obs(3))
    assert float(state["visits"].sum()) == 0.0
    goal = jnp.array([[0.9, 0.9], [0.0, 0.0], [-0.9, 0.6]], jnp.float32)
    state = {**state, "goal": goal}
    achieved = jnp.array([[0.95, 0.9], [0.6, 0.1], [-0.9, -0.9]], jnp.float32)
    obs = {**_obs(3, goal=-1.0), "achieved_goal": achieved}
    flags = jnp.zeros((3,), bool)
    obs, reward, terminated, truncated, info, state = setter.step(
        jax.random.key(1), state, obs, jnp.full((3,), -7.0), flags, flags, {}
    )
    np.testing.assert_array_equal(np.asarray(obs["desired_goal"]), np.asarray(goal))
    np.testing.assert_array_equal(np.asarray(reward), [0.0, -1.0, -1.0])
    np.testing.assert_array_equal(np.asarray(info["is_success"]), [True, False, False])
    np.testing.assert_array_equal(np.asarray(terminated), [True, False, False])
    expected = np.zeros(GRID * GRID)
    for cell in _cell(achieved):  # cells 15, 10 and 0
        expected[cell] += 1
    np.testing.assert_array_equal(np.asarray(state["visits"]), expected)


def test_bad_frontier_settings_are_config_errors_naming_the_fix(capsys, monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=r"probability must be in \[0, 1\].*frontier_probability=0.8"):
        _setter(1.5)
    config = SACTrainConfig(env_id="GMazeGoalDubinsWalls-v0", her=True)
    with pytest.raises(ConfigError, match=r"frontier_probability must be in \[0, 1\]"):
        dataclasses.replace(config, goal_setter="frontier", frontier_probability=-0.1).validate()
    with pytest.raises(ConfigError, match=r"goal_setter='nope' is not an installed goal setter.*'frontier'"):
        dataclasses.replace(config, goal_setter="nope").validate()
    with pytest.raises(ConfigError, match="given twice"):
        make_offpolicy_runner(dataclasses.replace(config, goal_setter="frontier"), _setter(0.5))
    # The factory where the setter goes, and a name where the sampler factory goes.
    with pytest.raises(ConfigError, match=r"must be a GoalSetter .*got function frontier_goals: call it"):
        make_offpolicy_runner(config, frontier_goals)
    with pytest.raises(ConfigError, match=r"batch_sampler=\.\.\.\) must be a factory.*set her=True"):
        make_offpolicy_runner(config, batch_sampler="her")
    monkeypatch.chdir(tmp_path)
    for bad, message in [
        (["goal_setter=nope"], "'frontier'"),
        (["goal_setter=frontier", "frontier_probability=2"], "[0, 1]"),
        (
            ["frontier_probability=0.5"],
            "goal_setter='none' trains on the env's own goals, so it is never read",
        ),
    ]:
        with pytest.raises(SystemExit) as info:
            train.main(["sac", "--env", "GMazeGoalDubinsWalls-v0", "--her", *bad, "--dry-run"])
        assert info.value.code == 2
        assert message in capsys.readouterr().err


def test_goal_setter_override_reaches_the_runner(capsys):
    assert plugins.load_goal_setter("frontier") is make_frontier_goal_setter
    argv = ["sac", "--env", "PointRobotGoal-v0", "--her", "goal_setter=frontier", "frontier_probability=1.0"]
    assert train.main([*argv, "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)["config"]
    assert (printed["goal_setter"], printed["frontier_probability"], printed["frontier_grid"]) == (
        "frontier",
        1.0,
        20,
    )
    config = SACTrainConfig(
        env_id="PointRobotGoal-v0",
        her=True,
        goal_setter="frontier",
        frontier_probability=1.0,
        total_timesteps=200,
        num_envs=2,
        rollout_steps=100,
        buffer_size=400,
        hidden_sizes=(8,),
        learning_starts=10**9,  # the loop's bookkeeping only: cheap to compile
        batch_size=8,
        eval_episodes=2,
    )
    runner = make_offpolicy_runner(config)
    state, _ = jax.jit(runner.step)(jax.jit(runner.init)(jax.random.key(0)))
    setter_state = state.setter_state
    assert float(setter_state["visits"].sum()) == 200.0  # every env step counted
    np.testing.assert_array_equal(np.asarray(state.obs["desired_goal"]), np.asarray(setter_state["goal"]))


def test_frontier_goals_refuse_swapped_goal_functions_and_goals_of_another_size():
    """Swapped goal functions at construction; bounds of another goal size than the env's at
    trace time (it used to be a broadcasting error inside the visit count, after reset had
    handed the agent goals of the wrong size)."""
    with pytest.raises(
        ConfigError, match=r"compute_reward returns bool and is_success returns float32: they look swapped"
    ):
        frontier_goals(_success, _reward, np.array([-1.0, -1.0]), np.array([1.0, 1.0]))
    setter = frontier_goals(_reward, _success, -np.ones(3), np.ones(3), 0.8, GRID)
    state = {"goal": jnp.zeros((2, 3), jnp.float32), "visits": jnp.zeros((GRID**3,), jnp.float32)}
    too_few = r"achieved_goal has shape \(2, 2\), expected \(num_envs, 3\).*one bound per goal dimension of the env \(2 values each\)"
    with pytest.raises(ConfigError, match=too_few):
        setter.init(jax.random.key(0), _obs(2))
    with pytest.raises(ConfigError, match=too_few):
        jax.jit(setter.reset)(jax.random.key(0), state, _obs(2), jnp.ones((2,), bool))
    flags = jnp.zeros((2,), bool)
    with pytest.raises(ConfigError, match=too_few):
        setter.step(jax.random.key(0), state, _obs(2), -jnp.ones((2,)), flags, flags, {})


def test_a_sweep_over_frontier_probability_is_one_program_each_member_drawing_with_its_own():
    """The setter takes ``frontier_probability`` traced: a sweep over it is one program (before,
    the setter read it as a Python number, so each value compiled its own program), and each
    member draws with its own probability (only cell 5 visited: p = 1 puts every goal there)."""
    from lamella.agents.sweep import plan_sweep

    config = SACTrainConfig(
        env_id="PointRobotGoal-v0", her=True, goal_setter="frontier", total_timesteps=200, num_envs=2,
        rollout_steps=100, buffer_size=400, hidden_sizes=(8,), learning_starts=10**9, batch_size=8,
        eval_episodes=2,
    )  # fmt: skip
    plan = plan_sweep("sac", config, {"frontier_probability": [0.2, 0.9]})
    assert plan.traced == ["frontier_probability"] and len(plan.programs) == 1, plan.static

    visits = jnp.zeros((GRID * GRID,), jnp.float32).at[5].set(3.0)
    state = {"goal": jnp.zeros((256, 2), jnp.float32), "visits": visits}

    def goals(probability):
        _, new_state = _setter(probability).reset(jax.random.key(0), state, _obs(256), jnp.ones((256,), bool))
        return new_state["goal"]

    in_cell_5 = [np.mean(_cell(g) == 5) for g in jax.jit(jax.vmap(goals))(jnp.array([0.0, 1.0]))]
    assert in_cell_5[1] == 1.0 and in_cell_5[0] < 0.2, in_cell_5  # uniform: 1/16 expected
    with pytest.raises(ConfigError, match=r"probability must be in \[0, 1\]"):  # plain numbers: checked
        _setter(-0.5)
