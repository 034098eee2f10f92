"""Self-play and n-role setups of the meta runner (``MetaConfig.meta_roles``, Pax's EvoRunnerNRoles).

The meta-agent plays the first ``meta_roles`` seats with one set of parameters; the other seats
are PPO co-players. Self-play (every seat the meta-agent) on the IPD must learn to cooperate with
itself (its fitness is both seats' mean); on the 3-player tensor game the seats' rewards and
cooperation are checked by hand against the payoff table.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.runner import make_train
from lamella.envs.cli import main as lamella_main
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner, make_outer_episode
from lamella.marl.shaping.presets import PRESETS

SEEDS = 3
EVAL_EPISODES = 16


def test_self_play_learns_to_cooperate_with_itself():
    """IPD, the meta-agent (tabular) in both seats, CMA-ES with 8 members for 8 generations, 3 seeds
    in one program. From about P(C) 0.5 (-1.5 per round) to mutual cooperation (-1): measured
    -1.00 to -1.04 and cooperation 0.96 to 1.00 over the last 2 generations. If seat 1 did not play
    the meta-agent's parameters, the best response to it would defect, not cooperate.

    The seats are compared on the learned strategy (the search's centre, ``evaluate``) over
    ``EVAL_EPISODES`` outer episodes per seed, not on a generation's population mean: there a few
    random members that defect now and then put the seats' means per round up to 0.14 apart
    (seed 1, generation 6: seats -1.102 and -0.966 with XLA's default CPU flags, on jax 0.10.2
    and 0.12 alike; 0.04 apart with the CI step's flags), and where that happens moves with the
    float rounding of the compile flags."""
    config = MetaConfig(
        meta_roles=2, num_outer_steps=1, population_size=8, num_envs=4, eval_episodes=EVAL_EPISODES
    )
    config = dataclasses.replace(config, total_timesteps=8 * config.steps_per_iteration)
    runner = make_meta_runner(config)
    train = make_train(runner)

    def train_and_evaluate(key):
        state, metrics = train(key)
        return metrics, runner.evaluate(state, jax.random.fold_in(key, 1))

    metrics, evaluation = jax.jit(jax.vmap(train_and_evaluate))(jax.random.split(jax.random.key(0), SEEDS))
    fitness = np.asarray(metrics["episode_return"])  # (seeds, generations)
    cooperation = np.asarray(metrics["meta_cooperation"])
    print("self-play fitness, first and last 2 generations:", fitness[:, 0], fitness[:, -2:].mean(1))
    print("self-play cooperation, last 2 generations:", cooperation[:, -2:].mean(1))
    assert (fitness[:, 0] < -1.3).all(), fitness
    assert (fitness[:, -2:].mean(1) > -1.1).all(), fitness
    assert (cooperation[:, -2:].mean(1) > 0.9).all(), cooperation
    # Both seats are the meta-agent: the "co-player" figures are seat 1's, the fitness both seats'
    # mean, so they differ by half the seats' difference, 0 in expectation. Measured per seed
    # 0.000 to 0.005 (standard error up to 0.0035) on jax 0.10.2 and 0.12, XLA's default and the
    # CI step's flags; 0.70 to 0.76 if seat 1 plays P(C) 0.5 instead of the meta-agent.
    both = np.asarray(evaluation["episode_return"])  # (seeds, EVAL_EPISODES)
    seat_1 = np.asarray(evaluation["co_player_return"])
    seat_0 = 2 * both - seat_1
    error = (seat_1 - both).std(1, ddof=1) / np.sqrt(EVAL_EPISODES)
    print("centre, seat 0 and seat 1 per round:", seat_0.mean(1), seat_1.mean(1), "standard error", error)
    np.testing.assert_allclose(seat_1.mean(1), both.mean(1), atol=0.05)


def _always_defect(init_params):
    params = jax.tree.map(jnp.zeros_like, init_params(jax.random.key(0)))
    head = params["params"]["head"]["Dense_0"]
    head["bias"] = jnp.array([-20.0, 20.0])  # action 1 (defect) with probability 1
    return params


@pytest.mark.parametrize("meta_roles", [1, 2])
def test_seats_of_the_three_player_game_by_hand(meta_roles):
    """3-player IPD (payoff[k, a] for k defectors: C 4, 2, 0; D 5, 3, 1): an always-defecting
    meta-agent in ``meta_roles`` seats against PPO co-players in the rest. Every meta seat
    defects (cooperation 0), and the rewards follow the table from the co-players' cooperation."""
    config = MetaConfig(env_id="IteratedTensorGame-v0", meta_roles=meta_roles, num_outer_steps=2, num_envs=4)
    outer_episode, init_params = make_outer_episode(config)
    out = jax.jit(outer_episode)(_always_defect(init_params), jax.random.key(1))
    c = float(out["co_player_cooperation"])
    assert float(out["meta_cooperation"]) == 0.0
    assert 0.05 < c < 0.95, c  # fresh PPO learners: about 0.5
    np.testing.assert_array_less(np.abs(out["co_player_first_minibatch_kl"]), 1e-5)
    if meta_roles == 2:  # one co-player: C pays 0 (2 defectors), D pays 1 (3)
        np.testing.assert_allclose(out["co_player_return"], 1 - c, atol=1e-5)
        np.testing.assert_allclose(out["meta_return"], 3 * c + (1 - c), atol=1e-5)
    else:  # two co-players; a meta seat gets 5, 3 or 1 for 0, 1 or 2 co-players defecting
        assert 1.0 < float(out["meta_return"]) < 5.0
        assert float(out["co_player_return"]) <= 3.0


def test_presets_and_bad_roles(capsys, tmp_path):
    """The role presets exist with their roles; a seat count the game does not have is refused
    before anything compiles, on the command line in one error line with exit status 2."""
    presets = PRESETS["meta_es"]
    assert presets["good_shepherd_self_play"].meta_roles == 2
    three = presets["shaper_2_roles_v_ppo_3p"]
    assert (three.env_id, three.num_players, three.meta_roles) == ("IteratedTensorGame-v0", 3, 2)
    with pytest.raises(ConfigError, match=r"meta_roles \(3\).*set meta_roles to 1\.\.2"):
        make_meta_runner(MetaConfig(meta_roles=3))
    with pytest.raises(ConfigError, match=r"meta_roles must be >= 1"):
        MetaConfig(meta_roles=0).validate()
    with pytest.raises(ConfigError, match="only an n-player game such as 'IteratedTensorGame-v0'"):
        make_meta_runner(MetaConfig(num_players=3))
    argv = ["train", "meta_es", "--preset", "shaper_2_roles_v_ppo_3p", "meta_roles=4"]
    with pytest.raises(SystemExit) as exit_info:
        lamella_main([*argv, "--out-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "set meta_roles to 1..3" in errors[0], errors
    assert not (tmp_path / "run").exists()
