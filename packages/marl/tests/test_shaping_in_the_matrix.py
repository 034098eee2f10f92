"""Opponent shaping on IPD-in-the-Matrix (STORM): the flat per-agent observation, the watchers,
the meta runner (Shaper and Good Shepherd against PPO co-players) through ``lamella train``, and
bad input.

IPD-in-the-Matrix's observation is a dict (a 5x5x10 egocentric view and a 6-value inventory per
player); the shaping runners flatten it into one float32 row of 256 per player. The cooperation
watcher is Pax's ``ipditm_stats`` ratio: of the coins a player held at its paying interactions, the
red (cooperate) share.

The meta-runner test is a smoke test of the whole program at a CI budget (it checks that it runs,
that every metric is finite, in range and logged, and that interactions happen; it makes no
learning claim). Random players interact about 0.39 times per 152-step episode (measured over 64
episodes when the test was written), so over the run's 2 x 4 x 2 x 2 episodes per seed some do.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.algorithms import load_algorithm
from lamella.agents.config import ConfigError
from lamella.envs import spaces
from lamella.envs.cli import main as lamella_main
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.observations import FlatAgentObservation, flatten_agent_observations
from lamella.marl.shaping.presets import PRESETS
from lamella.marl.shaping.runner import ShapingConfig, make_shaping_runner
from lamella.marl.shaping.watchers import cooperate_coin_share, in_the_matrix_metrics

ITM = "IPDInTheMatrix-v0"
LEFT, RIGHT, FORWARD, INTERACT, STAY = range(5)
EMPTY, RED_AGENT, BLUE_AGENT, RED_COIN = range(4)


def test_flat_observation_and_the_coins_held_at_an_interaction():
    env, params = lamella.envs.make(ITM, autoreset=False)
    flat = flatten_agent_observations(env, params)
    assert isinstance(flat, FlatAgentObservation)
    space = flat.observation_space(params)
    assert space.shape == (2, 6 + 5 * 5 * 10) and space.dtype == jnp.float32
    obs, state = flat.reset(jax.random.key(0), params)
    inner_obs = env.observation_of(state, params)
    # Sorted keys: the inventory (6), then the view (250), per player.
    np.testing.assert_array_equal(obs[:, :6], inner_obs["inventory"])
    np.testing.assert_array_equal(obs[:, 6:], np.asarray(inner_obs["observation"]).reshape(2, -1))

    # Red at (3, 3) facing (3, 4) (heading 0 steps y + 1) zaps; blue at (3, 4), also heading 0,
    # steps forward onto a red coin at (3, 5), still inside the beam (2 ahead of red). Red holds
    # 2 red + 1 blue coins, blue 0 + 3 before the step and 1 + 3 at the interaction.
    grid = np.zeros((8, 8), np.int8)
    grid[3, 3], grid[3, 4], grid[3, 5] = RED_AGENT, BLUE_AGENT, RED_COIN
    state = state.replace(
        agent_positions=jnp.array([[3, 3], [3, 4]], jnp.int32),
        agent_directions=jnp.array([0, 0], jnp.int32),
        grid=jnp.asarray(grid),
        inventories=jnp.array([[2, 1], [0, 3]], jnp.int32),
        freeze=jnp.asarray(-1, jnp.int32),
    )
    step = jax.jit(flat.step)
    obs, after, reward, _, _, info = step(jax.random.key(1), state, jnp.array([INTERACT, FORWARD]), params)
    assert bool(info["interaction"][0])
    np.testing.assert_array_equal(info["coins"], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(info["held_coins"], [[2, 1], [1, 3]])
    # r_k = p_red^T payoff[k] p_blue with p_red = (2/3, 1/3), p_blue = (1/4, 3/4) and payoff
    # [[[3, 0], [5, 1]], [[3, 5], [0, 1]]]: red (11/3, 1/3) . p_blue = 7/6; blue (2, 11/3) . p_blue = 13/4.
    np.testing.assert_allclose(reward, [7 / 6, 13 / 4], rtol=1e-6)
    assert obs.shape == (2, 256)
    # The next step (frozen): no interaction, so nothing is held.
    _, _, _, _, _, info = step(jax.random.key(2), after, jnp.array([INTERACT, INTERACT]), params)
    assert not bool(info["interaction"][0])
    np.testing.assert_array_equal(info["held_coins"], 0)


def test_watchers_by_hand():
    # Two steps of one env. Step 0: a paying interaction, red held (2 red, 1 blue), blue (1, 3);
    # red picked up a red coin, blue a blue one. Step 1: nothing held; blue picked up a red coin.
    held = np.array([[[[2, 1], [1, 3]]], [[[0, 0], [0, 0]]]])  # (T=2, E=1, n=2, 2)
    coins = np.array([[[[1, 0], [0, 1]]], [[[0, 0], [1, 0]]]])
    interaction = np.array([[[True, True]], [[False, False]]])
    np.testing.assert_allclose(cooperate_coin_share(held), [2 / 3, 1 / 4])
    metrics = in_the_matrix_metrics({"held_coins": held, "coins": coins, "interaction": interaction})
    np.testing.assert_allclose(metrics["cooperate_coin_share"], [2 / 3, 1 / 4])
    np.testing.assert_allclose(metrics["cooperate_pickup_share"], [1.0, 0.5])
    np.testing.assert_allclose(metrics["coins_per_step"], [0.5, 1.0])
    np.testing.assert_allclose(metrics["interactions_per_step"], [0.5, 0.5])
    # No interaction at all: 0, as Pax's nan_to_num.
    np.testing.assert_array_equal(cooperate_coin_share(np.zeros((3, 2, 2, 2))), [0.0, 0.0])


def test_the_shaping_runner_takes_the_matrix_with_its_watchers():
    config = ShapingConfig(
        env_id=ITM, agents=("ppo", "ppo"), num_inner_steps=8, num_envs=2, num_steps=8, total_timesteps=16
    )
    runner = make_shaping_runner(config)
    state = jax.eval_shape(runner.init, jax.random.key(0))
    assert state.obs.shape == (2, 2, 256) and state.obs.dtype == jnp.float32
    _, metrics = jax.eval_shape(runner.step, state)
    for name in ("cooperate_coin_share", "cooperate_pickup_share", "coins_per_step", "interactions_per_step"):
        assert metrics[name].shape == (2,), name
        assert runner.metric_axes[name] == ("agent",)
    assert "cooperation_CC" not in metrics and "own_coin_share" not in metrics


SHAPER_ARGS = [
    "--seeds",
    "2",
    "population_size=4",
    "num_envs=2",
    "num_outer_steps=2",
    "num_minibatches=2",
    "meta_hidden_sizes=16",
    "meta_rnn_hidden_size=16",
    "hidden_sizes=16",
    "eval_episodes=2",
]


@pytest.fixture(scope="module")
def shaper_run(tmp_path_factory):
    """``lamella train meta_es --preset shaper_v_ppo_in_the_matrix``, 2 generations of 4 members,
    2 seeds; the preset's 152-step inner episodes, 2 per outer episode. No learning-curve PNG
    (``--no-plot``, as the other command-line runs here): nothing here reads it, and
    lamella-agents' tests check the plot."""
    preset = PRESETS["meta_es"]["shaper_v_ppo_in_the_matrix"]
    generations = 2
    total = generations * 4 * 2 * preset.num_inner_steps * 2
    out = tmp_path_factory.mktemp("itm") / "run"
    argv = ["train", "meta_es", "--preset", "shaper_v_ppo_in_the_matrix", "--out-dir", str(out)]
    lamella_main([*argv, *SHAPER_ARGS, f"total_timesteps={total}", "--no-progress", "--no-plot"])
    log = json.loads((out / "metrics.json").read_text())
    return log["multi_agent"][ITM]["meta_es"], total


def test_shaper_runs_in_the_matrix_and_logs_finite_metrics(shaper_run):
    runs, total = shaper_run
    assert sorted(runs) == ["seed_0", "seed_1"]
    cooperation = []
    for seed, run in runs.items():
        steps = sorted((s for s in run if s.startswith("step_")), key=lambda s: int(s[5:]))
        last = run[steps[-1]]
        assert last["step_count"] == total, (seed, last)
        for name in (
            "train_episode_return",
            "train_max_return",
            "train_co_player_return",
            "train_meta_cooperation",
            "train_co_player_cooperation",
            "train_co_player_cooperation_last",
        ):
            value = np.asarray(last[name], np.float64)
            assert np.all(np.isfinite(value)), (seed, name, value)
        for name in ("train_meta_cooperation", "train_co_player_cooperation"):
            value = np.asarray(last[name], np.float64)
            assert np.all((value >= 0) & (value <= 1)), (seed, name, value)
            cooperation.append(value)
        # The evaluation of the search's centre: eval_episodes outer episodes against fresh co-players.
        assert len(last["mean_episode_return"]) == 2
        assert np.all(np.isfinite(last["mean_episode_return"])), last
        # A payoff of the Matrix is between 0 and 5 per interaction, so per step in [0, 5].
        assert 0.0 <= np.asarray(last["train_episode_return"]).item() <= 5.0, last
    # Interactions happened (a cooperate-coin share is only non-zero after one).
    assert np.max(cooperation) > 0.0, cooperation


def test_the_presets():
    algorithm = load_algorithm("meta_es")
    for name, recurrent in (
        ("shaper_v_ppo_in_the_matrix", True),
        ("good_shepherd_v_ppo_in_the_matrix", False),
        ("shaper_v_ppo_coin_game", True),
        ("good_shepherd_v_ppo_coin_game", False),
    ):
        config = algorithm.presets[name]
        config.validate()
        assert config.meta_recurrent is recurrent, name
    assert algorithm.presets[ITM] is algorithm.presets["shaper_v_ppo_in_the_matrix"]
    assert algorithm.presets[ITM].strategy == "Open_ES"
    assert algorithm.presets["CoinGame-v0"].env_id == "CoinGame-v0"
    shaping = load_algorithm("shaping").presets
    assert shaping[ITM] is shaping["ppo_v_ppo_in_the_matrix"]
    assert shaping[ITM].agents == ("ppo", "ppo")


def test_bad_input_is_refused_naming_the_fix():
    # A memory-one strategy plays the one-hot iterated games, not the grid.
    with pytest.raises(ConfigError, match=r"tit_for_tat.*one-hot.*Use a learning agent.*IPDInTheMatrix-v0"):
        make_shaping_runner(ShapingConfig(env_id=ITM, agents=("ppo", "tit_for_tat"), num_inner_steps=8))
    # Each co-player updates on its num_envs // num_opponents * 152 steps, which minibatches divide.
    with pytest.raises(ConfigError, match=r"num_minibatches \(7\) must divide"):
        make_meta_runner(
            MetaConfig(env_id=ITM, strategy="Open_ES", num_envs=2, num_opponents=1, num_minibatches=7)
        )
    # A dict observation without the agent axis first cannot be flattened per agent.
    with pytest.raises(ConfigError, match=r"agent axis first \(2 rows each\)"):
        flatten_agent_observations(_EnvWithoutAgentAxis(), None)


class _EnvWithoutAgentAxis:
    """A two-player env whose dict observation has no agent axis (only what the wrapper reads)."""

    num_agents = 2
    stochastic_step = False
    cheap_done = False

    def observation_space(self, params=None):
        return spaces.Dict({"x": spaces.Box(0, 1, (3,))})
