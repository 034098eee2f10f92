"""Iterated n-player tensor games: every payoff entry and observation by hand, episodes, conformance.

Pax's env (``pax/envs/iterated_tensor_game_n_player.py``) cannot be imported here (Pax pins jax
0.4.31 and its package does not build), and JaxMARL has no port of it, so the expected values are
written out from Pax's rules: reward ``payoff[number of defectors, own action]``; observation the
joint action read from each player's seat round the circle as a binary number, start = ``2**n``.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import IteratedTensorGame

# Pax's 3-player IPD table (multiplayer_ipd/3pl_2shap_ipd.yaml).
PAX_3P = {(0, 0): 4, (1, 0): 2, (1, 1): 5, (2, 0): 0, (2, 1): 3, (3, 1): 1}


@pytest.fixture(scope="module")
def three():
    env, params = le.make("IteratedTensorGame-v0", autoreset=False, num_inner_steps=3, num_outer_steps=2)
    first = jax.jit(
        jax.vmap(lambda a: env.step(jax.random.key(0), env.reset(jax.random.key(0), params)[1], a, params))
    )
    return env, params, first


def test_every_joint_action_pays_and_shows_as_pax_computes(three):
    env, params, first = three
    joint = np.array(list(itertools.product((0, 1), repeat=3)), np.int32)
    obs, state, reward, *_ = first(jnp.asarray(joint))
    used = set()
    for row, actions in enumerate(joint):
        defectors = int(actions.sum())
        for i in range(3):
            assert float(reward[row, i]) == PAX_3P[(defectors, int(actions[i]))], (actions, i)
            used.add((defectors, int(actions[i])))
            seat = [actions[(i + k) % 3] for k in range(3)]  # own action first, then round the circle
            expected = int("".join(map(str, seat)), 2)
            assert int(np.argmax(obs[row, i])) == expected and obs[row, i].sum() == 1
    assert used == set(PAX_3P)  # every payable entry


def test_start_state_inner_and_outer_episodes(three):
    env, params, _ = three
    obs, state = env.reset(jax.random.key(0), params)
    assert np.all(np.argmax(np.asarray(obs), -1) == 8) and obs.shape == (3, 9)
    step = jax.jit(env.step)
    seen = []
    for _ in range(6):
        obs, state, reward, terminated, truncated, info = step(
            jax.random.key(0), state, jnp.array([1, 0, 0]), params
        )
        seen.append((int(np.argmax(obs[0])), bool(info["inner_episode_done"][0]), bool(truncated[0])))
        assert not bool(terminated.any()) and np.all(np.asarray(reward) == [5, 2, 2])
    # Player 0 sees DCC = 0b100 = 4; the env restarts the inner episode itself (start = 8) after
    # 3 rounds; the last inner episode is truncated and left to the reset wrapper.
    assert seen == [
        (4, False, False),
        (4, False, False),
        (8, True, False),
        (4, False, False),
        (4, False, False),
        (4, True, True),
    ]


def test_two_player_table_matches_the_iterated_prisoners_dilemma():
    env, params = le.make("IteratedTensorGame-v0", autoreset=False, num_players=2)
    matrix, matrix_params = le.make("IteratedPrisonersDilemma-v0", autoreset=False)
    joint = jnp.asarray(list(itertools.product((0, 1), repeat=2)), jnp.int32)

    def first_rewards(game, game_params):
        state = game.reset(jax.random.key(0), game_params)[1]
        return jax.jit(jax.vmap(lambda a: game.step(jax.random.key(0), state, a, game_params)[2]))(joint)

    np.testing.assert_array_equal(
        np.asarray(first_rewards(env, params)), np.asarray(first_rewards(matrix, matrix_params))
    )


def test_bad_input_and_global_state():
    """check_env runs on the registered id in test_matrix_games.py (every multi_agent id)."""
    with pytest.raises(ValueError, match=r"shape \(4, 2\) for 3 players.*got shape \(3, 2\)"):
        le.make("IteratedTensorGame-v0", payoff=np.ones((3, 2)))
    with pytest.raises(ValueError, match="no preset payoff for 4 players"):
        IteratedTensorGame(4)
    with pytest.raises(ValueError, match=r"num_players must be an integer in 2\.\.16"):
        IteratedTensorGame(1)
    env, params = le.make(
        "IteratedTensorGame-v0", autoreset=False, num_players=4, payoff=np.arange(10.0).reshape(5, 2)
    )
    gs = env.global_state(env.reset(jax.random.key(0), params)[1], params)
    assert gs.shape == env.global_state_space(params).shape == (19,)
