"""Hand-computed values for GAE and the PPO losses, each run with and without jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import losses

GAMMA, LAMBDA = 0.9, 0.5


@pytest.fixture(params=[False, True], ids=["nojit", "jit"])
def maybe_jit(request):
    return jax.jit if request.param else (lambda f, **_: f)


def gae_by_hand(r, v, v_next, terminated, done, gamma=GAMMA, lam=LAMBDA):
    """A plain-Python loop, written independently of the scan."""
    T = len(r)
    adv = [0.0] * T
    following = 0.0
    for t in reversed(range(T)):
        bootstrap = 0.0 if terminated[t] else v_next[t]
        delta = r[t] + gamma * bootstrap - v[t]
        following = delta + (0.0 if done[t] else gamma * lam * following)
        adv[t] = following
    return np.array(adv, np.float32)


def test_gae_truncation_bootstraps_final_value_and_termination_zero(maybe_jit):
    # Episode A: steps 0-1, truncated at step 1 (V(final obs) = 10).
    # Episode B: steps 2-3, terminated at step 3 (final obs value 7 must be ignored).
    # Episode C: step 4, still running: bootstrap from V(next obs) = 3.
    r = jnp.array([1.0, 2.0, 0.5, 1.0, 4.0])
    v = jnp.array([0.5, 1.0, 2.0, 1.5, 1.0])
    v_next = jnp.array([1.0, 10.0, 1.5, 7.0, 3.0])
    terminated = jnp.array([False, False, False, True, False])
    done = jnp.array([False, True, False, True, False])
    adv, ret = maybe_jit(losses.gae_advantages)(r, v, v_next, terminated, done, GAMMA, LAMBDA)
    # Written out: delta_1 = 2 + 0.9 * 10 - 1 = 10;  A_1 = 10 (episode ends, nothing carried back).
    # delta_0 = 1 + 0.9 * 1 - 0.5 = 1.4;  A_0 = 1.4 + 0.45 * 10 = 5.9.
    # delta_3 = 1 + 0 - 1.5 = -0.5 (terminated: no bootstrap);  A_3 = -0.5.
    # delta_2 = 0.5 + 0.9 * 1.5 - 2 = -0.15;  A_2 = -0.15 + 0.45 * -0.5 = -0.375.
    # delta_4 = 4 + 0.9 * 3 - 1 = 5.7;  A_4 = 5.7.
    expected = np.array([5.9, 10.0, -0.375, -0.5, 5.7], np.float32)
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    np.testing.assert_allclose(adv, gae_by_hand(r, v, v_next, terminated, done), rtol=1e-6)
    np.testing.assert_allclose(ret, expected + np.asarray(v), rtol=1e-6)


def test_gae_truncated_differs_from_terminated_only_by_bootstrap(maybe_jit):
    r = jnp.ones(3)
    v = jnp.zeros(3)
    v_next = jnp.array([0.0, 0.0, 5.0])
    done = jnp.array([False, False, True])
    gae = maybe_jit(losses.gae_advantages)
    truncated_adv, _ = gae(r, v, v_next, jnp.zeros(3, bool), done, GAMMA, LAMBDA)
    terminated_adv, _ = gae(r, v, v_next, done, done, GAMMA, LAMBDA)
    np.testing.assert_allclose(truncated_adv[-1] - terminated_adv[-1], GAMMA * 5.0, rtol=1e-6)


def test_gae_batched_with_vmap_matches_each_stream(maybe_jit):
    rng = np.random.default_rng(0)
    T, B = 7, 5
    r, v, v_next = (rng.normal(size=(T, B)).astype(np.float32) for _ in range(3))
    done = rng.random((T, B)) < 0.3
    terminated = done & (rng.random((T, B)) < 0.5)
    batched = jax.vmap(losses.gae_advantages, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
    adv, _ = maybe_jit(batched)(r, v, v_next, terminated, done, GAMMA, LAMBDA)
    for b in range(B):
        expected = gae_by_hand(r[:, b], v[:, b], v_next[:, b], terminated[:, b], done[:, b])
        np.testing.assert_allclose(adv[:, b], expected, rtol=1e-5, atol=1e-6)


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(AssertionError):
        losses.gae_advantages(
            jnp.ones(3), jnp.ones(4), jnp.ones(3), jnp.zeros(3, bool), jnp.zeros(3, bool), 0.9, 0.9
        )


def test_ppo_policy_loss_clips_ratio(maybe_jit):
    log_prob = jnp.log(jnp.array([1.5, 0.5, 1.1, 1.0]))
    old = jnp.zeros(4)
    adv = jnp.array([1.0, -2.0, 3.0, -1.0])
    loss, clip_fraction = maybe_jit(losses.ppo_policy_loss)(log_prob, old, adv, 0.2)
    # min(r A, clip(r) A): 1.2*1 (clipped), 0.8*-2=-1.6 (clipped, smaller), 1.1*3 = 3.3, -1.
    expected = -np.mean([1.2, -1.6, 3.3, -1.0])
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(clip_fraction, 0.5)


def test_clipped_value_loss_keeps_larger_error(maybe_jit):
    value = jnp.array([2.0, 0.0])
    old = jnp.array([1.0, 0.0])
    target = jnp.array([3.0, 1.0])
    # Entry 0: unclipped error (2-3)^2 = 1, clipped prediction 1.2 -> (1.2-3)^2 = 3.24 (kept).
    # Entry 1: both predictions 0 -> 1.
    loss = maybe_jit(losses.clipped_value_loss, static_argnames="clip")(value, old, target, 0.2)
    np.testing.assert_allclose(loss, 0.5 * np.mean([3.24, 1.0]), rtol=1e-6)
    plain = maybe_jit(losses.clipped_value_loss, static_argnames="clip")(value, old, target, 0.2, clip=False)
    np.testing.assert_allclose(plain, 0.5 * np.mean([1.0, 1.0]), rtol=1e-6)


def test_gae_takes_time_major_batches_with_any_trailing_axes(maybe_jit):
    """(T, envs, agents): each trailing entry is its own stream, equal to the hand-computed loop."""
    rng = np.random.default_rng(0)
    shape = (6, 3, 2)
    r, v, v_next = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    terminated = rng.random(shape) < 0.2
    done = terminated | (rng.random(shape) < 0.2)
    adv, ret = maybe_jit(losses.gae_advantages)(r, v, v_next, terminated, done, GAMMA, LAMBDA)
    assert adv.shape == shape
    for env in range(3):
        for agent in range(2):
            stream = (slice(None), env, agent)
            expected = gae_by_hand(r[stream], v[stream], v_next[stream], terminated[stream], done[stream])
            np.testing.assert_allclose(adv[stream], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, np.asarray(adv) + v, rtol=1e-6)
    with pytest.raises(ValueError, match="time axis"):
        losses.gae_advantages(*(jnp.zeros(()) for _ in range(5)), GAMMA, LAMBDA)
