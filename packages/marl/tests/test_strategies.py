"""Fixed memory-one strategies: exact values on the infinite game, behaviour on the finite one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.envs import make
from lamella.envs.multi_agent.infinite_matrix_game import memory_one_values
from lamella.envs.multi_agent.matrix_game import PAYOFFS
from lamella.marl.shaping import STRATEGIES, make_memory_one_agent, strategy, zd_extortion

IPD = PAYOFFS["prisoners_dilemma"]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        # Exact values of the reference note (Pax IPD payoff, gamma 0.96; TFT vs ALL-D from a numpy port).
        ("all_c", "all_c", (-1.0, -1.0)),
        ("all_d", "all_d", (-2.0, -2.0)),
        ("all_d", "all_c", (0.0, -3.0)),
        ("tit_for_tat", "tit_for_tat", (-1.0, -1.0)),
        ("tit_for_tat", "all_d", (-2.04, -1.92)),
        ("grim_trigger", "all_c", (-1.0, -1.0)),
    ],
)
def test_named_strategies_have_the_exact_values_of_the_reference(first, second, expected):
    values = memory_one_values(strategy(first), strategy(second), IPD, 0.96)
    np.testing.assert_allclose(np.asarray(values), expected, atol=1e-4)


def test_zd_extortion_enforces_its_linear_relation_against_any_coplayer():
    chi = 3.0
    extort = zd_extortion(chi)
    coplayers = np.random.default_rng(0).uniform(size=(20, 5)).astype(np.float32)
    # Long-run payoffs: gamma close to 1 so the first round does not matter.
    values = np.asarray(jax.vmap(lambda q: memory_one_values(extort, q, IPD, 0.9999))(coplayers))
    punishment = -2.0
    np.testing.assert_allclose(values[:, 0] - punishment, chi * (values[:, 1] - punishment), atol=5e-3)
    assert np.all(values[:, 0] >= values[:, 1] - 1e-3)  # the extortioner never gets less


def test_memory_one_agent_plays_its_strategy_on_the_finite_game():
    env, params = make("IteratedMatrixGame-v0")
    obs, _ = env.reset(jax.random.key(0), params)
    agent = make_memory_one_agent("tit_for_tat", env.observation_space(params))
    # One-hot observations of each state for player 0: CC, CD, DC, DD, START.
    states = jnp.eye(5)
    action, _, _ = agent.policy(jax.random.key(1), (), states, ())
    np.testing.assert_array_equal(np.asarray(action), [0, 1, 0, 1, 0])
    # Stochastic strategies draw per env: random cooperates about half the time.
    random_agent = make_memory_one_agent("random")
    many = jnp.tile(states[4:], (4000, 1))
    action, _, _ = random_agent.policy(jax.random.key(2), (), many, ())
    assert 0.45 < float(jnp.mean(action)) < 0.55
    assert obs.shape == (2, 5)


def test_bad_strategies_are_rejected_with_the_fix():
    with pytest.raises(ValueError, match=r"Unknown strategy 'tft'.*tit_for_tat"):
        strategy("tft")
    with pytest.raises(ValueError, match="5 cooperation probabilities"):
        strategy([1.0, 0.0])
    # Neither a name nor numbers: was numpy's "float() argument must be ..." TypeError.
    with pytest.raises(ValueError, match=r"a name \(all_c.*tit_for_tat.*got None \(NoneType\)"):
        strategy(None)
    with pytest.raises(ValueError, match=r"5 cooperation probabilities.*got \{'start': 1.0\} \(dict\)"):
        strategy({"start": 1.0})
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        strategy([1.0, 2.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="chi must be > 1"):
        zd_extortion(chi=1.0)
    # A NaN or infinite chi was refused as "phi must be in (0, nan]" / "(0, 0]", naming phi.
    for chi in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"chi must be > 1 and finite \(chi = 1 is tit-for-tat\), got"):
            zd_extortion(chi=chi)
    with pytest.raises(ValueError, match="not a prisoner's dilemma"):
        zd_extortion(payoff=PAYOFFS["matching_pennies"])
    coin_game, coin_params = make("CoinGame-v0")
    with pytest.raises(ValueError, match=r"one-hot over 5 states.*learning agent"):
        make_memory_one_agent("tit_for_tat", coin_game.observation_space(coin_params))
    assert set(STRATEGIES) >= {
        "all_c",
        "all_d",
        "random",
        "tit_for_tat",
        "grim_trigger",
        "altruistic",
        "defect",
    }
