"""The UED runners on a second level-based env, multi-agent: Level-Based Foraging.

Levels are LBF start layouts (``lamella.envs.multi_agent.lbf.ForagingLevel``); the student is
lamella-agents' ``FeedForwardActorCriticNet`` shared by the agents (parameter sharing over the
agent axis); a level is scored on the team's streams (rewards, values and advantages summed over
agents).

- ``test_accel_runs_every_branch_on_foraging``: ACCEL (whose step holds PLR's new and replay
  branches beside its mutation branch) on 5x5 levels with 2 agents and 1 food, 8 iterations,
  one seed: new levels, replays and edits all happen, the buffer fills with distinct levels,
  scores are finite, and the parameters do not depend on the agent count.
- ``test_dr_and_plr_students_beat_a_random_policy_on_foraging``: DR and Robust PLR, 3 seeds each
  in one vmapped program, on ``Foraging-5x5-2p-1f-v3`` (25-step episodes). Evaluated on 256
  fresh random levels per seed (actions sampled), against the uniformly random policy (the same
  network with its action head zeroed) on the same levels. Solved: the team eats the food.
- ``test_lamella_train_resolves_the_8x8_foraging_presets``: ``lamella train <algo> --env
  Foraging-8x8-2p-2f-v3 --print-config`` resolves each algorithm's preset of the harder layout
  (2 agents, 2 foods, 50-step episodes), which validates and builds its runner (family, named
  evaluation levels, teacher) without compiling.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib import image as mpimg

from lamella.agents import make_train, train
from lamella.agents.config import ConfigError, config_to_dict
from lamella.agents.driver import compile_options
from lamella.agents.testing import uniform_policy
from lamella.envs import spaces
from lamella.envs.multi_agent.lbf import render as lbf_render
from lamella.ued.levels import foraging_family, level_family
from lamella.ued.paired import make_paired_runner
from lamella.ued.presets import FORAGING_8X8_ID, FORAGING_ID, PRESETS
from lamella.ued.runners import (
    ACCELConfig,
    DRConfig,
    default_family,
    make_actor_critic,
    make_team,
    make_ued_runner,
)

# The driver's fast-compile CPU options where the installed XLA has them (None: its defaults;
# jax 0.12 dropped `xla_cpu_use_fusion_emitters`).
FAST_COMPILE = compile_options("chunk", mode="fast")
SEEDS = 3
EVAL_LEVELS = 256
# The Foraging presets: 32 envs x 50 steps of 25-step episodes; a 64-wide MLP shared by the agents.
SMALL = {
    **{f.name: getattr(PRESETS["dr"][FORAGING_ID], f.name) for f in dataclasses.fields(DRConfig)},
    "eval_episodes": EVAL_LEVELS,
}


def test_the_family_of_foraging():
    config = DRConfig(**SMALL)
    family = default_family(config)
    assert family.network == "mlp" and family.env.num_agents == 2
    assert int(family.env_params.max_episode_steps) == 25
    assert level_family(family.env, family.env_params).solved_above == family.solved_above
    level = family.sample_level(jax.random.key(0), family.env_params)
    stats = family.level_stats(level)
    assert set(stats) == {"food", "food_level", "coop_food", "solvable", "agent_level"}
    assert float(stats["food"]) == 1.0 and float(stats["solvable"]) == 1.0
    with pytest.raises(TypeError, match="bare LevelBasedForaging"):
        foraging_family(default_family(DRConfig(env_id="AMaze-13x13-v0")).env, None)
    with pytest.raises(
        TypeError, match=r"^level_family: env must be an env object, got the id '.*'\. Pass the object"
    ):
        level_family(FORAGING_ID, family.env_params)


def test_team_streams_sum_the_agents():
    team = make_team(2)
    reward = jnp.asarray([[[0.25, 0.5]], [[0.0, 0.25]]])  # (T=2, B=1, n=2)
    done = jnp.asarray([[[False, False]], [[True, True]]])
    info = {"returned_episode": done.all(-1), "returned_episode_returns": reward.cumsum(0)}
    r, v, a, d, i = team(reward, 2 * reward, 3 * reward, done, info)
    np.testing.assert_allclose(r[:, 0], [0.75, 0.25])
    np.testing.assert_allclose(v[:, 0], [1.5, 0.5])
    np.testing.assert_allclose(a[:, 0], [2.25, 0.75])
    np.testing.assert_array_equal(d[:, 0], [False, True])
    np.testing.assert_allclose(i["returned_episode_returns"][:, 0], [0.75, 1.0])
    single = make_team(1)
    assert single(reward, 1, 2, done, info)[0] is reward


def test_recurrent_student_keeps_a_memory_per_agent():
    """Each agent of each env steps its own memory with the shared parameters, exactly as the
    single-agent network would on that agent alone (the reset flag of its env), and replaying a
    sequence (PPO's ``evaluate_actions``) gives the log-probabilities of stepping it."""
    config = DRConfig(**{**SMALL, "recurrent": True, "cell": "gru", "rnn_hidden_size": 8})
    team = make_actor_critic(config, spaces.MultiDiscrete(np.full(2, 6)), "mlp")
    single = make_actor_critic(config, spaces.Discrete(6), "mlp")
    assert team.recurrent and single.recurrent
    keys = jax.random.split(jax.random.key(1), 3)
    memory = jax.random.normal(keys[0], (3, 2, 8))
    assert team.initial_memory(3).shape == (3, 2, 8)
    obs = jax.random.normal(keys[1], (2, 3, 2, 9))
    reset = jnp.asarray([[0, 1, 0], [1, 0, 0]], bool)  # (T=2, envs=3): the given memory, then resets
    actions = jax.random.randint(keys[2], (2, 3, 2), 0, 6)

    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def play(memory, obs, reset, actions):
        """Per step: the team's memory and values, the same from the single-agent network on
        each agent alone (the same parameters), and the log-probabilities of ``actions``; then
        the replayed ones. One compiled program (flax's init run op by op costs seconds)."""
        params = team.init(jax.random.key(0), jnp.zeros((1, 2, 9)))
        alone = jax.vmap(jax.vmap(lambda m, o, r: single.step(params, m[None], o[None], r[None])))
        carry, out = memory, []
        for t in range(obs.shape[0]):
            after, dist, value = team.step(params, carry, obs[t], reset[t])
            ref_after, _, ref_value = alone(carry, obs[t], jnp.broadcast_to(reset[t][:, None], (3, 2)))
            out.append((after, value, ref_after[:, :, 0], ref_value[:, :, 0], dist.log_prob(actions[t])))
            carry = after
        stepped = jax.tree.map(lambda *xs: jnp.stack(xs), *out)
        return stepped, team.evaluate_actions(params, memory, obs, reset, actions)

    (after, value, ref_after, ref_value, log_probs), (replayed, values, entropy) = play(
        memory, obs, reset, actions
    )
    assert after.shape == (2, 3, 2, 8) and value.shape == (2, 3, 2)
    np.testing.assert_allclose(after, ref_after, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6)
    assert replayed.shape == values.shape == entropy.shape == (2, 3, 2)
    np.testing.assert_allclose(replayed, log_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, value, rtol=1e-5, atol=1e-6)


def test_bad_settings_for_foraging_are_refused_before_compiling():
    no_drawer = default_family(DRConfig(**SMALL))._replace(level_image=None)
    with pytest.raises(ConfigError, match="give the LevelFamily a level_image"):
        make_ued_runner(DRConfig(**{**SMALL, "screenshot_every": 2}), family=no_drawer)
    with pytest.raises(
        ValueError, match=r"unknown level 'SixteenRooms'; use 'random' or one of Adjacent, FarCorner"
    ):
        make_ued_runner(DRConfig(**{**SMALL, "eval_levels": ("SixteenRooms",)}))
    # `lamella train dr --env Foraging-...` without a preset of that id: the default eval_levels
    # are AMaze's mazes, which the message says, with the fix.
    with pytest.raises(
        ValueError,
        match=r"unknown level 'SixteenRooms'; use 'random' or one of Adjacent.*The default eval_levels "
        r"\(SixteenRooms, Labyrinth, StandardMaze\) are AMaze's mazes.*eval_levels=random",
    ):
        make_ued_runner(DRConfig(env_id=FORAGING_ID, recurrent=False))
    # height and width size AMaze's levels; an LBF id fixes its grid, so they were ignored.
    with pytest.raises(
        ConfigError,
        match=r"DRConfig\.height=7 sizes AMaze levels, but Foraging-5x5-2p-1f-v3 fixes its grid in its id.*"
        r"pick the id of the size you want.*leave height and width at 0",
    ):
        make_ued_runner(DRConfig(**{**SMALL, "height": 7}))
    with pytest.raises(ConfigError, match=r"PAIREDConfig\.width=6 sizes AMaze levels"):
        make_paired_runner(dataclasses.replace(PRESETS["paired"][FORAGING_ID], width=6))


def test_accel_runs_every_branch_on_foraging(tmp_path):
    config = ACCELConfig(
        **{
            **SMALL,
            "num_envs": 8,
            "num_steps": 25,
            "eval_episodes": 8,
            "eval_levels": ("random", "Adjacent", "OppositeCorners"),
            "total_timesteps": 8 * 25 * 8,
            "screenshot_every": 4,
            "screenshot_dir": str(tmp_path),
            # A recurrent student (each agent its own GRU memory, shared parameters): the
            # feed-forward one is what the learning tests below train.
            "recurrent": True,
            "cell": "gru",
            "rnn_hidden_size": 16,
        },
        buffer_size=32,
        min_fill_ratio=0.25,
        replay_prob=0.5,
        num_edits=2,
    )
    runner = make_ued_runner(config)
    state, metrics = jax.jit(make_train(runner), compiler_options=FAST_COMPILE)(jax.random.key(0))
    replay, mutate = np.asarray(metrics["replay"]), np.asarray(metrics["mutate"])
    assert replay[0] == mutate[0] == 0, "a cold buffer plays new levels"
    assert replay.any() and mutate.any(), (replay, mutate)
    # Every mutation iteration follows a replay iteration (ACCEL's schedule).
    assert (replay[np.nonzero(mutate)[0] - 1] == 1).all()
    np.testing.assert_array_equal(np.asarray(metrics["learned"]), replay)
    # PPO's first minibatch replays the rollout's sequences through the recurrent student with
    # the agent axis folded the same way as when acting: its ratio is 1 (KL 0).
    kl = np.asarray(metrics["first_minibatch_kl"])[replay == 1]
    assert np.abs(kl).max() < 1e-5, kl
    assert np.isfinite(np.asarray(metrics["score_max_mc"])).all()
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    assert np.asarray(metrics["level_food"]).min() >= 1
    buffer = state.buffer
    assert int(buffer.size) > 8 and float(np.asarray(buffer.num_edits).max()) >= 2
    # Stored levels are distinct (the comparator de-duplicates).
    stored = np.nonzero(np.asarray(buffer.filled))[0]
    levels = jax.tree.map(lambda x: np.asarray(x)[stored], buffer.levels)
    keys = {
        tuple(np.concatenate([np.asarray(x)[i].ravel() for x in jax.tree.leaves(levels)]))
        for i in range(len(stored))
    }
    assert len(keys) == len(stored)
    # One set of parameters for every agent: the first kernel sees one agent's observation (9).
    kernels = [x for x in jax.tree.leaves(state.params) if np.ndim(x) == 2]
    assert min(np.shape(k)[0] for k in kernels) == 9
    evaluation = jax.jit(runner.evaluate)(state, jax.random.key(1))
    # Named levels evaluate beside fresh random ones, at the env's 25-step horizon.
    assert evaluation["solved"].shape == (8, 3) and 0 <= float(evaluation["solve_rate"].mean()) <= 1
    assert (np.asarray(evaluation["episode_length"]) <= 25).all()
    check_screenshots(tmp_path / "seed_0", replay, mutate)


def check_screenshots(folder, replay, mutate):
    """The first batch of each kind per 4-iteration interval, as on AMaze, drawn with LBF's
    colours at 8 pixels per cell: 8 levels of 5x5 cells (40 pixels) on a 3x3 grid."""
    kinds = np.where(mutate == 1, "mutated", np.where(replay == 1, "replayed", "generated"))
    expected = {f"update_{i // 4 * 4:06d}_{kind}.png" for i, kind in enumerate(kinds)}
    written = set(os.listdir(folder))
    assert expected <= written and "update_000004_buffer.png" in written, (expected, written)
    assert written - expected <= {"update_000000_buffer.png", "update_000004_buffer.png"}, written
    cell = 5 * 8
    for name in expected:
        picture = (mpimg.imread(folder / name)[..., :3] * 255).round().astype(np.uint8)
        assert picture.shape == (3 * (cell + 2) + 2, 3 * (cell + 2) + 2, 3), (name, picture.shape)
        blocks = [
            picture[
                2 + r * (cell + 2) : 2 + r * (cell + 2) + cell, 2 + c * (cell + 2) : 2 + c * (cell + 2) + cell
            ]
            for r, c in (divmod(i, 3) for i in range(8))
        ]
        for block in blocks:  # both agents (red, blue) and the food (green) are drawn on every level
            colours = {tuple(p) for p in block.reshape(-1, 3)}
            assert {tuple(lbf_render.AGENT_COLORS[0]), tuple(lbf_render.AGENT_COLORS[1])} <= colours, name
            assert any(int(g) > int(r) + 20 and int(g) > int(b) + 20 for r, g, b in colours), name
        # Distinct levels make distinct pictures (the drawer shows where agents and food are).
        assert len({block.tobytes() for block in blocks}) > 1, name


# A recurrent student: each agent its own GRU memory of 16, the parameters shared.
RECURRENT = {"recurrent": True, "cell": "gru", "rnn_hidden_size": 16}


@pytest.mark.parametrize(
    ("name", "iterations", "student"),
    [("dr", 20, {}), ("plr", 30, {}), ("dr", 30, RECURRENT)],
    ids=["dr", "plr", "dr-recurrent"],
)
def test_dr_and_plr_students_beat_a_random_policy_on_foraging(name, iterations, student):
    config = dataclasses.replace(
        PRESETS[name][FORAGING_ID], total_timesteps=32 * 50 * iterations, eval_episodes=EVAL_LEVELS, **student
    )
    assert config.recurrent == bool(student)
    runner = make_ued_runner(config)
    train = jax.jit(jax.vmap(make_train(runner)), compiler_options=FAST_COMPILE)
    state, metrics = train(jax.random.split(jax.random.key(0), SEEDS))
    evaluate = jax.jit(jax.vmap(runner.evaluate, in_axes=(0, None)), compiler_options=FAST_COMPILE)
    key = jax.random.key(2024)
    solved = np.asarray(evaluate(state, key)["solved"].mean(axis=(1, 2)))
    uniform = state.replace(params=uniform_policy(state.params))
    random_solved = np.asarray(evaluate(uniform, key)["solved"].mean(axis=(1, 2)))
    assert (random_solved < 0.6).all(), random_solved  # the baseline really is the random policy
    assert solved.mean() >= THRESHOLD[name], (solved, random_solved)
    assert (solved >= random_solved + MARGIN).all(), (solved, random_solved)


THRESHOLD = {"dr": 0.8, "plr": 0.6}
MARGIN = 0.25


@pytest.mark.parametrize("name", ["dr", "plr", "accel", "paired", "minimax", "population_paired"])
def test_lamella_train_resolves_the_8x8_foraging_presets(name, capsys):
    assert train.main([name, "--env", FORAGING_8X8_ID, "--seeds", "3", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    preset = PRESETS[name][FORAGING_8X8_ID]
    assert printed["algorithm"] == name and printed["seeds"] == [0, 1, 2]
    assert printed["config"] == json.loads(json.dumps(config_to_dict(preset)))
    assert printed["config"]["env_id"] == FORAGING_8X8_ID
    preset.validate()
    # The 5x5 presets' student and PPO settings, on the harder layout's horizon.
    small = PRESETS[name][FORAGING_ID]
    assert (preset.max_episode_steps, preset.num_steps, small.max_episode_steps) == (50, 100, 25)
    assert (preset.torso_size, preset.learning_rate, preset.recurrent) == (
        small.torso_size,
        small.learning_rate,
        False,
    )
    family = default_family(preset)
    assert (family.env.num_agents, family.env.max_num_food, family.env.rows, family.env.cols) == (2, 2, 8, 8)
    assert set(preset.eval_levels) - {"random"} <= set(family.named_levels)
    runner = (make_paired_runner if name in ("paired", "minimax", "population_paired") else make_ued_runner)(
        preset
    )
    assert runner.steps_per_iteration == 32 * 100 and runner.num_iterations == 100
