"""Level scores against hand-computed values (and minimax's / JaxUED's test vector)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.ued import scores

# One stream of 7 steps: two completed episodes (steps 0-2 and 3-5), then one cut off (step 6).
DONE = jnp.array([0, 0, 1, 0, 0, 1, 0], bool)
REWARD = jnp.array([0, 0, 0.8, 0, 0, 0.5, 0], jnp.float32)
VALUE = jnp.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], jnp.float32)
ADV = jnp.array([0.2, -0.1, 0.4, 0.0, 0.3, -0.2, 0.9], jnp.float32)


@pytest.mark.parametrize("jit", [False, True])
def test_reference_vector(jit):
    maybe = jax.jit if jit else (lambda f: f)
    score, best = maybe(scores.max_mc)(REWARD, VALUE, DONE, 0.9)
    # R_max = max(0.9, 0.8) = 0.9; episode 1: mean(0.8, 0.7, 0.6) = 0.7, episode 2: 0.4.
    np.testing.assert_allclose(score, 0.55, atol=1e-6)
    np.testing.assert_allclose(best, 0.9)
    # PVL: episode 1 mean(0.2, 0, 0.4) = 0.2, episode 2 mean(0, 0.3, 0) = 0.1; step 6 ignored.
    np.testing.assert_allclose(maybe(scores.positive_value_loss)(ADV, DONE), 0.15, atol=1e-6)
    # L1: episode 1 mean(0.2, 0.1, 0.4) = 0.7/3, episode 2 mean(0, 0.3, 0.2) = 0.5/3.
    np.testing.assert_allclose(maybe(scores.l1_value_loss)(ADV, DONE), 0.2, atol=1e-6)
    np.testing.assert_allclose(maybe(scores.episode_return)(REWARD, DONE), 0.65, atol=1e-6)
    np.testing.assert_allclose(maybe(scores.neg_return)(REWARD, DONE), -0.65, atol=1e-6)


def test_max_mc_running_best_comes_from_the_rollout_when_higher():
    score, best = scores.max_mc(REWARD, VALUE, DONE, 0.1)
    np.testing.assert_allclose(best, 0.8)
    # R_max = 0.8: episode 1 mean(0.7, 0.6, 0.5) = 0.6, episode 2 mean(0.4, 0.3, 0.2) = 0.3.
    np.testing.assert_allclose(score, 0.45, atol=1e-6)
    # A level never played: the rollout's best alone.
    np.testing.assert_allclose(scores.max_mc(REWARD, VALUE, DONE)[0], 0.45, atol=1e-6)


def test_streams_are_independent_and_incomplete_streams_have_no_score():
    # Stream 0 is the vector above; stream 1 never finishes an episode.
    done = jnp.stack([DONE, jnp.zeros(7, bool)], axis=1)
    adv = jnp.stack([ADV, ADV], axis=1)
    out = scores.positive_value_loss(adv, done)
    np.testing.assert_allclose(out[0], 0.15, atol=1e-6)
    assert out[1] == -jnp.inf
    assert scores.positive_value_loss(adv, done, incomplete_value=0.0)[1] == 0.0
    stats = scores.episode_stats(jnp.stack([REWARD, REWARD], 1), done)
    np.testing.assert_array_equal(stats.num_episodes, [2, 0])
    np.testing.assert_allclose(stats.max, [0.8, -np.inf])
    np.testing.assert_allclose(stats.mean, [0.65, 0.0], atol=1e-6)


def test_episode_stats_sum_and_time_average():
    metric = jnp.array([1.0, 2.0, 3.0, 4.0])
    done = jnp.array([0, 1, 0, 1], bool)
    total = scores.episode_stats(metric, done)
    np.testing.assert_allclose(total.mean, (3 + 7) / 2)
    np.testing.assert_allclose(total.max, 7)
    averaged = scores.episode_stats(metric, done, time_average=True)
    np.testing.assert_allclose(averaged.mean, (1.5 + 3.5) / 2)


def test_value_disagreement():
    # Two value heads that differ by 2 at every step: std 1 everywhere.
    v = jnp.stack([VALUE, VALUE + 2.0], axis=1)
    np.testing.assert_allclose(scores.value_disagreement(v, DONE), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="K axis"):
        scores.value_disagreement(VALUE, DONE)


def test_regrets():
    np.testing.assert_allclose(
        scores.relative_regret(jnp.array([0.9, 0.2]), jnp.array([0.5, 0.6])), [0.4, 0.0]
    )
    np.testing.assert_allclose(scores.mean_relative_regret(0.7, 0.5), 0.2, atol=1e-6)
    mean = jnp.array([[0.2, 0.5], [0.4, 0.1]])  # (students, levels)
    best = jnp.array([[0.9, 0.5], [0.6, 0.3]])
    # Level 0: 0.9 - 0.3; level 1: 0.5 - 0.3 (not clipped, may be negative in general).
    np.testing.assert_allclose(scores.population_regret(mean, best), [0.6, 0.2], atol=1e-6)


def test_level_score_by_name():
    for name in scores.SCORES:
        score, best = scores.level_score(name, REWARD, VALUE, ADV, DONE, 0.9)
        assert score.shape == () and best == pytest.approx(0.9)
    assert scores.level_score("max_mc", REWARD, VALUE, ADV, DONE, 0.9)[0] == pytest.approx(0.55, abs=1e-6)
    assert scores.level_score("positive_value_loss", REWARD, VALUE, ADV, DONE)[0] == pytest.approx(
        0.15, abs=1e-6
    )
    with pytest.raises(ValueError, match=r"Unknown level score 'pvl'.*max_mc"):
        scores.level_score("pvl", REWARD, VALUE, ADV, DONE)


def test_shape_errors():
    with pytest.raises(ValueError, match="leading time axis"):
        scores.episode_stats(jnp.zeros(()), jnp.zeros((), bool))
    with pytest.raises(AssertionError):
        scores.positive_value_loss(jnp.zeros((3, 2)), jnp.zeros((3,), bool))
