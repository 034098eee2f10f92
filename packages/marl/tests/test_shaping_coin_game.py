"""CoinGame outcome: an evolved shaping agent raises its PPO co-player's own-coin pickup share above
what two naive PPO learners reach.

Pax's CoinGame (3x3 torus, payoff ``[[1, 1, -2], [1, 1, -2]]``: every coin pays its taker +1 and
its owner -2 when the other takes it), 16-step inner episodes, seen through
:class:`~lamella.marl.shaping.observations.TheftMemory` (each player's 36 values in one of two
halves: whether the other took its coin in the last 4 steps), by both players and in both runs.
PPO co-players: two per member on 8 envs each, tabular (linear in the observation), Adam 0.1,
4 epochs, no entropy bonus, one update per inner episode, fresh at every outer episode of
``OUTER`` inner episodes. The shaping agent (player 0) is tabular too (a linear policy on the
72 values: one policy after a theft, one otherwise), searched by CMA-ES (16 members, sigma 0.5)
for ``GENERATIONS`` generations on its mean reward per step (Good Shepherd's setup with a
one-bit memory). The baseline is two naive PPO learners with the co-player's settings over the
same ``OUTER`` inner episodes (player 0 a PPO learner instead of the shaping agent). 3 seeds each,
one program each.

The claim (per seed): the co-player's own-coin share in its last inner episode (the population's
mean over the last quarter of the generations) is above the naive pair's player-1 own-coin share
over the last quarter of its inner episodes by 0.1. A learner that takes every coin it can
reach has a share of about 0.5 (both colours pay it); the naive pairs stay there.

Measured when the test was written (with the same settings in a script), seeds 0, 1, 2: the
naive pair's player 1 0.45, 0.45, 0.58 (player 0 0.53, 0.47, 0.37); the shaped co-player 0.83,
0.83, 0.84 (0.59, 0.63, 0.65 over the first quarter of the generations); the shaping agent's reward
per step 0.34, 0.39, 0.38 over the last quarter (-0.26, -0.16, -0.15 over the first; the naive
pair's player 0 -0.05, 0.04, 0.23), its own own-coin share 0.56, 0.48, 0.60 (no higher than a naive
learner's: it shapes by taking the co-player's coins after a theft). The search's centre against
fresh co-players: the co-player's last own-coin share 0.87, 0.86, 0.87.

Marked ``research`` (not run by CI): it takes 214 s of process CPU time on 2 loaded cores. At
a CI budget (24 generations of 8 members, 24 inner episodes, 8 envs: about 110 CPU s) the
co-players reached 0.61, 0.56, 0.61 against the naive pair's 0.50, 0.49, 0.55: above it in every
seed, but not by the 0.1 this test asks for.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.config import ConfigError
from lamella.agents.runner import make_train
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.observations import TheftMemory
from lamella.marl.shaping.runner import LEARNER, make_shaping_runner

SEEDS = 3
GENERATIONS = 48
OUTER = 48
CONFIG = MetaConfig(
    env_id="CoinGame-v0",
    num_inner_steps=16,
    num_outer_steps=OUTER,
    num_envs=16,
    num_opponents=2,
    hidden_sizes=(),
    learning_rate=0.1,
    num_epochs=4,
    num_minibatches=2,
    ent_coef=0.0,
    strategy="CMA_ES",
    population_size=16,
    sigma_init=0.5,
    meta_hidden_sizes=(),
    eval_episodes=2,
)
CONFIG = dataclasses.replace(CONFIG, total_timesteps=GENERATIONS * CONFIG.steps_per_iteration)
MARGIN = 0.1


def _env():
    env, params = lamella.envs.make("CoinGame-v0", autoreset=False, num_inner_steps=16)
    return TheftMemory(env, steps=4), params


@pytest.fixture(scope="module")
def naive_shares():
    """Per seed: the naive pair's player-1 own-coin share over the last quarter of its inner
    episodes, and player 0's."""
    env, params = _env()
    pair = make_shaping_runner(CONFIG.co_player_config(), env, params, agents=[LEARNER, LEARNER])

    def run(key):
        _, metrics = jax.lax.scan(lambda s, _: pair.step(s), pair.init(key), None, length=OUTER)
        return metrics["own_coin_share"]  # (OUTER, 2)

    share = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), SEEDS)))
    quarter = OUTER // 4
    return share[:, -quarter:, 1].mean(1), share[:, -quarter:, 0].mean(1)


@pytest.fixture(scope="module")
def shaped():
    env, params = _env()
    runner = make_meta_runner(CONFIG, env, params)
    _, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(1), SEEDS))
    quarter = GENERATIONS // 4
    return {name: np.asarray(value)[:, -quarter:].mean(1) for name, value in metrics.items()}


@pytest.mark.research
def test_a_shaping_agent_raises_its_co_players_own_coin_share(naive_shares, shaped):
    naive_co_player, naive_player_0 = naive_shares
    co_player = shaped["co_player_cooperation_last"]
    print("naive pair, player 1 (last quarter of its inner episodes):", naive_co_player)
    print("naive pair, player 0:", naive_player_0)
    print("shaped co-player, last inner episode (last quarter of the generations):", co_player)
    print(
        "shaping agent's reward per step:",
        shaped["episode_return"],
        "own-coin share:",
        shaped["meta_cooperation"],
    )
    assert np.all(co_player > naive_co_player + MARGIN), (co_player, naive_co_player)
    assert np.all(np.isfinite(shaped["episode_return"]))


def test_theft_memory_by_hand():
    """Blue steps onto red's coin: red remembers the theft for 4 steps (its values in the second
    half of its row), blue remembers nothing; the memory then runs out."""
    env, params = _env()
    _, state = env.reset(jax.random.key(0), params)
    inner = state.env_state.replace(
        agent_positions=jnp.array([[2, 2], [0, 0]], jnp.int32),
        coin_positions=jnp.array([[0, 1], [2, 0]], jnp.int32),  # red's coin, blue's coin
    )
    state = state.replace(env_state=inner)
    step = jax.jit(env.step)
    stay, right = 4, 0
    obs, state, reward, _, _, info = step(jax.random.key(1), state, jnp.array([stay, right]), params)
    np.testing.assert_array_equal(info["other_coins"], [0, 1])
    np.testing.assert_allclose(reward, [-2.0, 1.0])
    np.testing.assert_array_equal(state.theft, [4, 0])
    plain = np.asarray(env.env.observation_of(state.env_state, params), np.float32)
    assert obs.shape == (2, 72)
    np.testing.assert_array_equal(obs[0], np.concatenate([np.zeros(36), plain[0]]))
    np.testing.assert_array_equal(obs[1], np.concatenate([plain[1], np.zeros(36)]))
    for left in (3, 2, 1, 0):
        # Far from the coins' new cells or not: staying never takes a coin a player is not on.
        obs, state, _, _, _, info = step(jax.random.key(2), state, jnp.array([stay, stay]), params)
        if int(np.asarray(info["other_coins"]).sum()) == 0:
            assert int(state.theft[0]) == left
    assert int(state.theft[0]) == 0 and np.all(obs[0, 36:] == 0)
    with pytest.raises(ConfigError, match=r"steps must be an integer >= 1"):
        TheftMemory(env.env, steps=0)
    matrix, matrix_params = lamella.envs.make("IPDInTheMatrix-v0", autoreset=False)
    with pytest.raises(ConfigError, match=r"CoinGame's flat observations \(2, 36\)"):
        TheftMemory(matrix).observation_space(matrix_params)
