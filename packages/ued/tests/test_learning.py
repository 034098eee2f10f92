"""Learning check: DR and Robust PLR students solve small random mazes far more often than a
uniformly random policy, for each of 3 seeds trained side by side (one vmapped program each).

Task: the ``ci`` presets (7x7 AMaze levels with 8 walls drawn with replacement, 64-step
episodes, a feed-forward student), trained for 50 iterations of 32 envs x 64 steps (102,400
env steps per seed), then evaluated (actions sampled from the policy) on 256 fresh random 7x7
levels per seed. Baseline, measured here on the same levels through the same evaluation: the
uniformly random policy (the student with its action logits zeroed), which solves about 9%.
Measured when this test was written: DR 0.59 - 0.75 per seed, Robust PLR 0.34 - 0.63 (only
replay iterations take gradient steps, about half of them).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import make_train
from lamella.ued.presets import PRESETS
from lamella.ued.runners import make_ued_runner

SEEDS = 3
ITERATIONS = 50
EVAL_LEVELS = 256


def uniform_policy(params):
    """The same network with its action logits zeroed: a uniformly random policy."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "ActionHead" in jax.tree_util.keystr(path) else x, params
    )


@pytest.fixture(scope="module", params=["dr", "plr"])
def trained(request):
    config = dataclasses.replace(
        PRESETS[request.param]["ci"],
        total_timesteps=32 * 64 * ITERATIONS,
        eval_episodes=EVAL_LEVELS,
    )
    runner = make_ued_runner(config)
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), SEEDS))
    evaluate = jax.jit(jax.vmap(runner.evaluate, in_axes=(0, None)))
    key = jax.random.key(2024)
    solved = evaluate(state, key)["solved"].mean(axis=(1, 2))
    random_solved = evaluate(state.replace(params=uniform_policy(state.params)), key)["solved"].mean(
        axis=(1, 2)
    )
    return request.param, np.asarray(solved), np.asarray(random_solved), metrics


def test_students_beat_a_random_policy(trained):
    name, solved, random_solved, _ = trained
    print(f"{name}: solve rate per seed {solved}, random policy {random_solved}")
    # The baseline is what it should be: a random walk rarely finds the goal in 64 steps.
    assert 0.02 < random_solved.mean() < 0.2
    assert solved.mean() >= 0.3, (name, solved)
    assert (solved > random_solved + 0.1).all(), (name, solved, random_solved)


def test_training_metrics(trained):
    name, _, _, metrics = trained
    assert metrics["solved"].shape == (SEEDS, ITERATIONS)
    # The training solve rate rises from the first iterations to the last.
    assert (metrics["solved"][:, -10:].mean(1) > metrics["solved"][:, :5].mean(1) + 0.2).all()
    if name == "plr":
        # Robust PLR: a gradient step exactly on the replay iterations, and some of each.
        np.testing.assert_array_equal(metrics["learned"], metrics["replay"])
        assert 0.2 < float(metrics["replay"].mean()) < 0.6
        assert (metrics["buffer_size"][:, -1] == 256).all()
