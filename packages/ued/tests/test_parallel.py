"""Parallel PLR and Parallel ACCEL (minimax's ``use_parallel_eval``): the buffer update of one
iteration, the levels one runner step consumes and produces (on AMaze and on Level-Based
Foraging), and exact resume through the driver, on tiny settings. The learning check is in ``test_learning.py``."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.algorithms import load_algorithm
from lamella.agents.driver import run_experiment
from lamella.ued.buffer import make_level_buffer
from lamella.ued.presets import FORAGING_ID, PRESETS
from lamella.ued.runners import (
    ACCELConfig,
    ParallelACCELConfig,
    ParallelPLRConfig,
    PLRConfig,
    make_ued_runner,
    parallel_buffer_update,
)

TINY = dict(
    height=5,
    width=5,
    n_walls=3,
    max_episode_steps=12,
    num_envs=4,
    num_steps=24,
    num_epochs=1,
    num_minibatches=1,
    recurrent=False,
    torso_size=16,
    eval_levels=("random",),
    eval_episodes=4,
)
# The run log names the maze settings the config changes from the id (DRConfig.run_log_task).
TINY_TASK = "AMaze-13x13-v0:height=5,width=5,n_walls=3,max_episode_steps=12"
NUM_EDITS = 2


def _levels(values):
    """Toy levels: one int32 leaf per level, ``(len(values), 2)``."""
    return {"cells": jnp.asarray([[v, v + 100] for v in values], jnp.int32)}


def _filled_buffer(capacity, scores):
    buffer = make_level_buffer(capacity, prioritization="rank", staleness_coef=0.0, replay_prob=1.0)
    state = buffer.init({"cells": jnp.zeros((2,), jnp.int32)})
    state, _ = buffer.insert(state, _levels(range(len(scores))), jnp.asarray(scores), jnp.asarray(scores))
    return buffer, state


def test_parallel_buffer_update_inserts_new_rescores_replayed_inserts_edits():
    buffer, state = _filled_buffer(6, [0.1, 0.5, 0.9, 0.3])
    # [new | replayed (slots 1, 2) | edited], 2 levels each.
    levels = _levels([10, 11, 1, 2, 20, 21])
    slots = jnp.asarray([-1, -1, 1, 2, -1, -1])
    scores = jnp.asarray([0.7, -jnp.inf, 0.2, 0.05, 0.8, 0.6])
    best = jnp.asarray([0.4, 0.0, 0.95, 0.1, 0.3, 0.2])
    edits = jnp.asarray([0, 0, 0, 0, 3, 5])
    out = parallel_buffer_update(buffer, state, jnp.asarray(True), levels, slots, scores, best, edits, 3)
    # New level 10 takes the empty slot 4 (11 has no score: not kept); replayed slots 1 and 2 are
    # re-scored (best returns maxed in); edit 20 takes the last empty slot; edit 21 (0.6) evicts
    # the level with the lowest replay probability, slot 2 (its new score 0.05).
    np.testing.assert_array_equal(out.levels["cells"][:, 0], [0, 1, 21, 3, 10, 20])
    np.testing.assert_allclose(out.scores, [0.1, 0.2, 0.6, 0.3, 0.7, 0.8])
    np.testing.assert_allclose(out.best_returns, [0.1, 0.95, 0.2, 0.3, 0.4, 0.3])
    np.testing.assert_array_equal(out.num_edits, [0, 0, 5, 0, 0, 3])
    assert int(out.size) == 6


def test_parallel_buffer_update_skips_a_replayed_slot_a_new_level_took():
    buffer, state = _filled_buffer(4, [0.1, 0.5, 0.9, 0.3])
    levels = _levels([10, 11, 0, 2])
    slots = jnp.asarray([-1, -1, 0, 2])
    scores = jnp.asarray([0.7, -jnp.inf, 0.05, 0.4])
    best = jnp.asarray([0.7, 0.0, 0.9, 0.95])
    out = parallel_buffer_update(buffer, state, jnp.asarray(True), levels, slots, scores, best, slots * 0, 2)
    # Level 10 evicts slot 0 (lowest score); the replayed level 0's result is dropped with it
    # (minimax's insert mask); slot 2 is re-scored.
    np.testing.assert_array_equal(out.levels["cells"][:, 0], [10, 1, 2, 3])
    np.testing.assert_allclose(out.scores, [0.7, 0.5, 0.4, 0.3])
    np.testing.assert_allclose(out.best_returns, [0.7, 0.5, 0.95, 0.3])


def test_parallel_buffer_update_cold_inserts_both_batches():
    buffer, state = _filled_buffer(6, [0.1])
    levels = _levels([10, 11, 12, 13])
    scores = jnp.asarray([0.7, 0.2, 0.3, 0.4])
    out = parallel_buffer_update(
        buffer, state, jnp.asarray(False), levels, jnp.full((4,), -1), scores, scores, jnp.zeros(4, int), 2
    )
    np.testing.assert_array_equal(out.levels["cells"][:5, 0], [0, 10, 11, 12, 13])
    np.testing.assert_allclose(out.scores[:5], [0.1, 0.7, 0.2, 0.3, 0.4])
    assert int(out.size) == 5


# Level-Based Foraging: the DR preset's 5x5 levels (2 agents, 1 food, 25-step episodes) on the
# same tiny budget; its levels' fields are agents' and foods' cells and levels.
TINY_FORAGING = dict(
    env_id=FORAGING_ID,
    max_episode_steps=25,
    num_envs=4,
    num_steps=25,
    num_epochs=1,
    num_minibatches=1,
    recurrent=False,
    torso_size=16,
    hidden_size=16,
    eval_levels=("random",),
    eval_episodes=4,
)


def _maze_edits(parents, child):
    """Per parent: the cells, goal and agent start that differ from ``child``."""
    return (
        (np.asarray(parents.wall_map) != np.asarray(child.wall_map)).sum(axis=(1, 2))
        + (np.asarray(parents.goal_pos) != np.asarray(child.goal_pos)).any(axis=1)
        + (np.asarray(parents.agent_pos) != np.asarray(child.agent_pos)).any(axis=1)
    )


def _foraging_edits(parents, child):
    """Per parent: the agents and foods whose cell or level differs from ``child``'s (an edit moves
    one of them or changes one level by 1)."""
    moved = lambda field: (np.asarray(getattr(parents, field)) != np.asarray(getattr(child, field))).any(-1)  # noqa: E731
    changed = lambda field: np.asarray(getattr(parents, field)) != np.asarray(getattr(child, field))  # noqa: E731
    return sum(
        part.sum(axis=1)
        for part in (
            moved("agent_positions"),
            changed("agent_levels"),
            moved("food_positions") & (np.asarray(child.food_levels) > 0),
            changed("food_levels"),
        )
    )


@pytest.fixture(scope="module", params=["maze", "foraging"])
def paccel(request):
    settings = TINY if request.param == "maze" else TINY_FORAGING
    config = ParallelACCELConfig(
        **settings,
        total_timesteps=3 * 4 * settings["num_steps"] * 8,
        buffer_size=64,
        min_fill_ratio=0.1,
        num_edits=NUM_EDITS,
        score="max_mc",
    )
    runner = make_ued_runner(config)
    edits = _maze_edits if request.param == "maze" else _foraging_edits
    return config, runner, jax.jit(runner.init), jax.jit(runner.step), edits


def test_one_parallel_accel_step_consumes_and_produces_the_right_levels(paccel):
    """On AMaze and on Level-Based Foraging (team streams: two agents, one score per level)."""
    config, runner, init, step, edits = paccel
    n = config.num_envs
    assert runner.steps_per_iteration == 3 * n * config.num_steps
    state = init(jax.random.key(0))
    # Cold buffer: three batches of new random levels, all inserted; no gradient step (Robust).
    state1, m1 = step(state)
    buf1 = state1.buffer
    assert float(m1["replay"]) == 0 and float(m1["learned"]) == 0 and float(m1["mutate"]) == 0
    assert int(buf1.clock) == 3 * n
    assert 2 * n < int(buf1.size) <= 3 * n  # every level finished an episode (distinct but rare duplicates)
    assert (np.asarray(buf1.num_edits) == 0).all()
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(state1.params)):
        np.testing.assert_array_equal(a, b)

    # Warm buffer: n replayed levels, n new ones, n edits of the replayed ones, one rollout.
    state2, m2 = step(state1)
    buf2 = state2.buffer
    assert float(m2["replay"]) == 1 and float(m2["learned"]) == 1 and float(m2["mutate"]) == 1
    c1 = int(buf1.clock)
    assert int(buf2.clock) == c1 + 3 * n  # n drawn, n new and n edited levels handed out
    seen = np.asarray(buf2.last_seen)
    size1, size2 = int(buf1.size), int(buf2.size)
    old = jax.tree.map(lambda x: np.asarray(x)[:size1], buf1.levels)
    # Replayed slots: drawn this step (clock c1+1 .. c1+n), the same levels, new scores.
    replayed = np.flatnonzero((seen > c1) & (seen <= c1 + n))
    assert 1 <= len(replayed) <= n
    assert (replayed < size1).all()
    for leaf_old, leaf_new in zip(jax.tree.leaves(buf1.levels), jax.tree.leaves(buf2.levels)):
        np.testing.assert_array_equal(np.asarray(leaf_old)[replayed], np.asarray(leaf_new)[replayed])
    assert (np.asarray(buf2.scores)[replayed] != np.asarray(buf1.scores)[replayed]).all()
    assert (np.asarray(buf2.best_returns)[replayed] >= np.asarray(buf1.best_returns)[replayed]).all()
    assert (np.asarray(buf2.num_edits)[replayed] == 0).all()
    # New random levels were inserted at c1+2n, edits at c1+3n, into the empty slots.
    new_slots = np.flatnonzero(seen == c1 + 2 * n)
    edit_slots = np.flatnonzero(seen == c1 + 3 * n)
    assert size2 == size1 + len(new_slots[new_slots >= size1]) + len(edit_slots[edit_slots >= size1])
    assert len(new_slots) >= 1 and len(edit_slots) >= 1
    assert (np.asarray(buf2.num_edits)[new_slots[new_slots >= size1]] == 0).all()
    # Each inserted edit is NUM_EDITS edits (AMaze: flip a wall, move the goal, move the agent;
    # LBF: move an agent or a food, or change a level by 1) of a replayed level.
    fresh_edits = edit_slots[edit_slots >= size1]
    assert len(fresh_edits) >= 1
    np.testing.assert_array_equal(np.asarray(buf2.num_edits)[fresh_edits], NUM_EDITS)
    parents = jax.tree.map(lambda x: x[replayed], old)
    for slot in fresh_edits:
        child = jax.tree.map(lambda x: np.asarray(x)[slot], buf2.levels)
        distances = edits(parents, child)
        assert 1 <= distances.min() <= NUM_EDITS, distances
    # The gradient step used the replayed batch only: a step was taken.
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(state1.params), jax.tree.leaves(state2.params))
    )


@pytest.fixture(scope="module")
def pplr_runs(tmp_path_factory):
    """One Parallel PLR config trained through the driver: straight through, and stopped after 4
    iterations then resumed."""
    config = ParallelPLRConfig(
        **TINY, total_timesteps=2 * 4 * 24 * 8, buffer_size=32, min_fill_ratio=0.25, score="max_mc"
    )
    root = tmp_path_factory.mktemp("pplr")
    kwargs = dict(seeds=2, chunk_iterations=1, progress=False, plot=False)
    full = run_experiment(config, out_dir=root / "full", **kwargs)
    stopped = run_experiment(config, out_dir=root / "resumed", max_chunks=4, **kwargs)
    resumed = run_experiment(config, out_dir=root / "resumed", resume=True, **kwargs)
    return config, full, stopped, resumed


def test_parallel_plr_driver_run_log_and_exact_resume(pplr_runs):
    _, full, stopped, resumed = pplr_runs
    assert not stopped.finished and resumed.finished and full.finished
    log = json.loads(open(full.metrics_path).read())
    steps = log["maze"][TINY_TASK]["parallel_plr"]["seed_0"]
    ordered = sorted((k for k in steps if k.startswith("step_")), key=lambda k: int(k.split("_")[1]))
    train = [k for k in ordered if "train_replay" in steps[k]]
    replay = np.array([steps[k]["train_replay"] for k in train], dtype=float).reshape(-1)
    learned = np.array([steps[k]["train_learned"] for k in train], dtype=float).reshape(-1)
    assert len(replay) == 8 and replay[0] == 0 and (replay[2:] == 1).all()
    np.testing.assert_array_equal(learned, replay)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    assert open(full.metrics_path).read() == open(resumed.metrics_path).read()


def test_parallel_entry_points_presets_and_bad_configs():
    for name, config_class in (("parallel_plr", ParallelPLRConfig), ("parallel_accel", ParallelACCELConfig)):
        algorithm = load_algorithm(name)
        assert algorithm.config_class is config_class
        assert set(algorithm.presets) == {"AMaze-13x13-v0", "ci"}
    # minimax's pplr.json / paccel.json.
    pplr, paccel = PRESETS["parallel_plr"]["AMaze-13x13-v0"], PRESETS["parallel_accel"]["AMaze-13x13-v0"]
    assert (pplr.learning_rate, pplr.gae_lambda, pplr.ent_coef, pplr.staleness_coef, pplr.n_walls) == (
        3e-4,
        0.95,
        0.0,
        0.5,
        60,
    )
    assert (paccel.learning_rate, paccel.gae_lambda, paccel.ent_coef, paccel.n_walls, paccel.num_edits) == (
        1e-4,
        0.98,
        1e-3,
        0,
        20,
    )
    assert pplr.replay_prob == paccel.replay_prob == 1.0 and pplr.robust and paccel.robust
    # minimax's 30,000 updates: one per iteration of 2 or 3 batches (before, 15,000 and 10,000).
    assert pplr.num_iterations == paccel.num_iterations == 30_000
    assert (pplr.num_slices, paccel.num_slices, PLRConfig().num_slices, ACCELConfig().num_slices) == (
        2,
        3,
        1,
        1,
    )
    assert paccel.steps_per_iteration == 3 * 32 * 256
    with pytest.raises(ValueError, match=r"parallel=True .* replay_prob is 0.5; set replay_prob=1.0"):
        make_ued_runner(dataclasses.replace(PLRConfig(**TINY, total_timesteps=10_000), parallel=True))
    with pytest.raises(ValueError, match=r"buffer_size \(2\) is smaller than the batch"):
        make_ued_runner(ParallelPLRConfig(**TINY, total_timesteps=10_000, buffer_size=2))
