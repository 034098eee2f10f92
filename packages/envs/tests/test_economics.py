"""Cournot and the open-access fishery: hand-computed profits, Pax's equilibria, quirks, conformance.

Pax (which pins jax 0.4.31) cannot be a test dependency and JaxMARL has neither game, so the checks
are Pax's formulas worked by hand and the equilibrium Pax's own fishery test asserts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import CournotGame, Fishery


def test_cournot_profits_price_and_nash():
    env, params = le.make("Cournot-v0", autoreset=False, num_players=3, num_inner_steps=2)
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(np.asarray(obs), [[0, 0, 0, 100]] * 3)  # nothing produced: price a
    step = jax.jit(env.step)
    # p = 100 - (10 + 20 + 30) = 40; profit (40 - 10) q; a negative quantity counts as 0.
    obs, state, reward, terminated, truncated, _ = step(
        jax.random.key(1), state, jnp.array([[10.0], [20.0], [30.0]]), params
    )
    np.testing.assert_allclose(np.asarray(reward), [300.0, 600.0, 900.0])
    np.testing.assert_allclose(np.asarray(obs), [[10, 20, 30, 40]] * 3)
    assert not bool(truncated.any()) and not bool(terminated.any())
    obs, state, reward, _, truncated, _ = step(
        jax.random.key(2), state, jnp.array([[-5.0], [50.0], [70.0]]), params
    )
    np.testing.assert_allclose(np.asarray(reward), [0.0, -1500.0, -2100.0])  # p = -20: no floor, as in Pax
    assert bool(truncated.all())
    # The symmetric Nash quantity is a best response to itself (n = 2: 30 each, profit 900).
    two = CournotGame().default_params
    q = float(CournotGame.nash_quantity(two))
    assert q == 30.0 and float(CournotGame.nash_reward(two)) == 900.0
    grid = np.linspace(0.0, 60.0, 601)
    profit = (two.a - two.b * (grid + q) - two.marginal_cost) * grid
    assert abs(grid[np.argmax(profit)] - q) < 0.1


def test_cournot_pax_quirks():
    for quirks, rounds in ((False, 1), (True, 2)):
        env = CournotGame(pax_quirks=quirks)
        params = env.default_params
        obs, state = env.reset(jax.random.key(3), params)
        assert bool(np.all(np.asarray(obs) < 1)) == quirks  # Pax's first observation is noise in [0, 1)
        for t in range(rounds):
            _, state, _, _, truncated, _ = env.step(jax.random.key(t), state, jnp.full((2, 1), 30.0), params)
            assert bool(truncated.all()) == (t == rounds - 1)


def test_fishery_dynamics_by_hand():
    env, params = le.make("Fishery-v0", autoreset=False, num_players=2, s_0=0.8)
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_allclose(np.asarray(obs), [[0, 0, 0.8, 0], [0, 0, 0.8, 1]])
    _, state, reward, _, truncated, info = env.step(
        jax.random.key(1), state, jnp.array([[2.0], [6.0]]), params
    )
    growth = 0.15 * 0.8 * 0.2
    harvest = 8.0 * 0.8 * 0.009
    np.testing.assert_allclose(float(state.stock), 0.8 + growth - harvest, rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(reward), [200 * 0.25 * harvest - 0.9 * 2, 200 * 0.75 * harvest - 0.9 * 6], rtol=1e-5
    )
    np.testing.assert_allclose(np.asarray(info["harvest"]), harvest, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(info["total_effort"]), 8.0)
    # No effort: no reward; an effort beyond the stock harvests it all (the stock never goes negative).
    _, idle, reward, *_ = env.step(jax.random.key(2), state, jnp.zeros((2, 1)), params)
    assert np.all(np.asarray(reward) == 0)
    _, empty, *_ = env.step(jax.random.key(3), state, jnp.full((2, 1), 100.0), params)
    assert float(empty.stock) == 0.0 and not bool(truncated.any())
    _, clipped, *_ = env.step(jax.random.key(3), state, jnp.array([[1e4], [-3.0]]), params)
    np.testing.assert_array_equal(
        np.asarray(clipped.last_efforts), [100.0, 0.0]
    )  # clipped into [0, max_action]


def test_fishery_reaches_the_open_access_equilibrium():
    """Pax's own convergence test: effort adapts to profit, E += 0.4 * reward; starting from a
    full stock it settles at s* = w / (P e s_max) = 0.5, H* = 0.0375, E* = 8.33 within 300 steps."""
    env = Fishery()
    params = env.default_params.replace(s_0=1.0)
    _, state = env.reset(jax.random.key(0), params)

    def body(carry, _):
        state, effort, last = carry
        _, state, reward, _, _, info = env.step(
            jax.random.key(0), state, jnp.full((2, 1), effort / 2), params
        )
        return (state, effort + 0.4 * jnp.sum(reward), info["harvest"][0]), None

    (state, effort, harvest), _ = jax.jit(lambda c: jax.lax.scan(body, c, None, length=299))(
        (state, jnp.float32(1.0), 0.0)
    )
    assert abs(float(state.stock) - float(Fishery.steady_stock(params))) < 0.01
    assert abs(float(harvest) - 0.0375) < 0.01 and abs(float(effort) - 0.15 / 0.009 * 0.5) < 0.01


@pytest.mark.parametrize("env_id", ["Cournot-v0", "Fishery-v0"])
def test_global_state_and_bad_input(env_id):
    """check_env runs on both ids in test_matrix_games.py (every multi_agent id, auto-reset on)."""
    env, params = le.make(env_id, autoreset=False, num_players=3, num_inner_steps=5, pax_quirks=True)
    gs = env.global_state(env.reset(jax.random.key(0), params)[1], params)
    assert gs.shape == env.global_state_space(params).shape == (5,)
    with pytest.raises(ValueError, match="num_players must be an integer >= 2"):
        le.make(env_id, num_players=1)
    with pytest.raises(ValueError, match="pax_quirks must be True or False, got 'false'"):
        le.make(env_id, pax_quirks="false")  # was truthy: Pax's quirks on, silently
