"""Hand-computed values of every off-policy target and loss, with and without jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import squashed_gaussian_sample

JIT = [False, True]


def maybe_jit(fn, jit):
    return jax.jit(fn, static_argnums=()) if jit else fn


@pytest.mark.parametrize("jit", JIT)
def test_q_learning_target(jit):
    # r + discount * max q = 1 + 0.9 * 3 = 3.7; a terminal step (discount 0) gives r.
    fn = maybe_jit(targets.q_learning_target, jit)
    q = jnp.array([1.0, 3.0, -2.0])
    np.testing.assert_allclose(fn(jnp.float32(1.0), jnp.float32(0.9), q), 3.7, rtol=1e-6)
    np.testing.assert_allclose(fn(jnp.float32(1.0), jnp.float32(0.0), q), 1.0)


@pytest.mark.parametrize("jit", JIT)
def test_double_q_learning_target(jit):
    # The online net prefers action 2, whose target value is -1: 0.5 + 0.99 * (-1) = -0.49.
    fn = maybe_jit(targets.double_q_learning_target, jit)
    q_target = jnp.array([5.0, 2.0, -1.0])
    q_online = jnp.array([0.0, 1.0, 4.0])
    np.testing.assert_allclose(fn(jnp.float32(0.5), jnp.float32(0.99), q_target, q_online), -0.49, rtol=1e-6)


@pytest.mark.parametrize("jit", JIT)
def test_soft_q_target(jit):
    # min(2, 1.5) = 1.5; 1.5 - 0.2 * (-1) = 1.7; 1 + 0.9 * 1.7 = 2.53.
    fn = maybe_jit(targets.soft_q_target, jit)
    out = fn(jnp.float32(1.0), jnp.float32(0.9), jnp.array([2.0, 1.5]), jnp.float32(-1.0), 0.2)
    np.testing.assert_allclose(out, 2.53, rtol=1e-6)


@pytest.mark.parametrize("jit", JIT)
def test_clipped_double_q_target(jit):
    fn = maybe_jit(targets.clipped_double_q_target, jit)
    # 0 + 0.5 * min(4, -2) = -1; DDPG (one critic): 0 + 0.5 * 4 = 2.
    np.testing.assert_allclose(fn(jnp.float32(0.0), jnp.float32(0.5), jnp.array([4.0, -2.0])), -1.0)
    np.testing.assert_allclose(fn(jnp.float32(0.0), jnp.float32(0.5), jnp.array([4.0])), 2.0)


@pytest.mark.parametrize("jit", JIT)
def test_discrete_soft_q_target(jit):
    # pi = (0.25, 0.75); min over critics per action = (1, 2);
    # soft value = 0.25 (1 - 0.1 log 0.25) + 0.75 (2 - 0.1 log 0.75).
    fn = maybe_jit(targets.discrete_soft_q_target, jit)
    q = jnp.array([[1.0, 3.0], [2.0, 2.0]])
    log_pi = jnp.log(jnp.array([0.25, 0.75]))
    soft = 0.25 * (1 - 0.1 * np.log(0.25)) + 0.75 * (2 - 0.1 * np.log(0.75))
    np.testing.assert_allclose(
        fn(jnp.float32(-1.0), jnp.float32(0.9), q, log_pi, 0.1), -1 + 0.9 * soft, rtol=1e-6
    )


@pytest.mark.parametrize("jit", JIT)
def test_tqc_target(jit):
    # Pooled atoms sorted: [0, 1, 2, 3, 4, 5]; drop the 2 largest -> [0, 1, 2, 3];
    # each: 1 + 0.5 * (z - 0.1 * 2) = 0.9 + 0.5 z.
    fn = maybe_jit(lambda r, d, q, lp, a: targets.tqc_target(r, d, q, lp, a, 2), jit)
    quantiles = jnp.array([[5.0, 0.0, 2.0], [1.0, 4.0, 3.0]])
    out = fn(jnp.float32(1.0), jnp.float32(0.5), quantiles, jnp.float32(2.0), 0.1)
    np.testing.assert_allclose(out, [0.9, 1.4, 1.9, 2.4], rtol=1e-6)


def test_tqc_target_refuses_dropping_everything():
    with pytest.raises(ValueError, match="leaves none"):
        targets.tqc_target(jnp.float32(0.0), jnp.float32(1.0), jnp.zeros((2, 2)), jnp.float32(0.0), 0.1, 4)


@pytest.mark.parametrize("jit", JIT)
def test_huber_loss(jit):
    fn = maybe_jit(targets.huber_loss, jit)
    # |e| <= 1: 0.5 e^2; beyond: |e| - 0.5.
    np.testing.assert_allclose(fn(jnp.array([0.5, -2.0, 3.0])), [0.125, 1.5, 2.5])


@pytest.mark.parametrize("jit", JIT)
def test_quantile_huber_loss(jit):
    # Two quantiles (tau = 0.25, 0.75) at 0 and one atom at 2: u = 2 for both (u >= 0),
    # huber(2) = 1.5; weights |tau - 0| -> 0.25 * 1.5 + 0.75 * 1.5 = 1.5.
    fn = maybe_jit(targets.quantile_huber_loss, jit)
    np.testing.assert_allclose(fn(jnp.array([0.0, 0.0]), jnp.array([2.0])), 1.5, rtol=1e-6)
    # Atom at -0.5: u = -0.5 < 0, huber = 0.125, weights |tau - 1| = 0.75, 0.25 -> 0.125.
    np.testing.assert_allclose(fn(jnp.array([0.0, 0.0]), jnp.array([-0.5])), 0.125, rtol=1e-6)


def test_quantile_huber_loss_is_minimised_at_the_quantiles():
    # The gradient of the loss against many samples vanishes near the true quantiles.
    atoms = jnp.linspace(0.0, 1.0, 1001)
    grad = jax.grad(lambda q: targets.quantile_huber_loss(q, atoms, kappa=1e-3))(jnp.array([0.25, 0.75]))
    np.testing.assert_allclose(grad, 0.0, atol=5e-3)


def test_squashed_gaussian_log_prob_matches_change_of_variables():
    # One dimension: log N(u; m, s) - log(1 - tanh(u)^2), computed directly.
    mean, log_std = jnp.array([[0.3]]), jnp.array([[-0.5]])
    action, log_prob = squashed_gaussian_sample(jax.random.key(0), mean, log_std)
    u = np.arctanh(np.asarray(action, np.float64))
    std = np.exp(-0.5)
    expected = (
        -0.5 * ((u - 0.3) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi) - np.log(1 - np.tanh(u) ** 2)
    )
    np.testing.assert_allclose(log_prob, expected[:, 0], rtol=1e-4)


def test_return_bounds():
    # Sparse goal rewards -1 / 0 with gamma 0.98: returns in [-1 / 0.02, 0] = [-50, 0].
    np.testing.assert_allclose(targets.return_bounds(0.98, (-1.0, 0.0)), (-50.0, 0.0), rtol=1e-6)
    # Positive rewards in [0.5, 2], gamma 0.9: an episode may end at once (0), at most 2 / 0.1.
    np.testing.assert_allclose(targets.return_bounds(0.9, (0.5, 2.0)), (0.0, 20.0), rtol=1e-6)
    with pytest.raises(ValueError, match="lowest first"):
        targets.return_bounds(0.9, (1.0, -1.0))
    with pytest.raises(ValueError, match="gamma < 1"):
        targets.return_bounds(1.0, (-1.0, 0.0))
