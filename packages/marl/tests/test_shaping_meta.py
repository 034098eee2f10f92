"""The meta-learning runner on the finite IPD: a meta-agent evolved across PPO co-players' learning.

Setup (``SMALL``): Pax's IPD (CC -1, CD -3, DC 0, DD -2), inner episodes of 20 rounds on 4 envs,
outer episodes of 48 inner episodes, two PPO co-players per member (tabular: a linear policy on
the one-hot state, Adam 0.2, one update per inner episode), each starting afresh at every outer
episode at P(C) = 0.5. The meta-agent is feed-forward (a memory-one strategy, Good Shepherd's
setup), searched by CMA-ES (population 16, sigma 1.0) for 48 generations; 3 seeds in one program,
run through the driver in 4 chunks of 12 generations (stopped after two, then resumed).

Baselines at these settings, mean reward per round over an outer episode, 4 seeds each
(measured when the test was written with ``make_outer_episode`` and ``make_shaping_runner``):

* a naive learner against the same learner (PPO vs PPO, ``co_player_config()``): player 0
  -1.50, -1.89, -1.88, -1.69 (mean -1.74; player 1's mean -1.99): both drift to defection;
* fixed memory-one meta-agents: ALL-D -1.68 (the co-player's P(C) falls from 0.5 to 0.02),
  tit-for-tat -1.14 (it rises to 0.99), ZD extortion -1.24 (0.71), random -2.32.

Measured 2026-12-02 on a 2-core AMD EPYC (Zen 5, AVX-512) with the CI step's XLA flags (seeds 0,
1, 2; chunk means of the population): the meta-agent -1.53, -1.57, -1.48 in generations 1-12 and
-1.18, -1.21, -1.22 in generations 37-48 (its co-players -1.61, -1.62, -1.66: the meta-agent
cooperates about half the time and extorts); the co-player's P(C) in its last inner episode
0.45, 0.47, 0.57 in generations 1-12 and 0.82, 0.77, 0.72 in generations 37-48 (0.50 in its
first). The search's centre at the end, 2 outer episodes each: -1.08, -1.06, -1.10; the
co-player's last P(C) 0.69, 1.00, 0.99.

Sigma 0.5 (the test's setting until then, chosen on an older EPYC) left some seeds in a worse
extortion there: of 8 seeds in one program, two ended generations 37-48 at P(C) 0.40 and 0.39
(one centre at -1.57, P(C) 0.39), and 3 seeds in one program gave seed 1 P(C) 0.33. With sigma
1.0 every seed of 14 (8 in one program; 3 with and 3 without the step's flags) passed every
assertion below: population P(C) 0.72-0.91 and mean -1.13 to -1.22 in generations 37-48, the
centre's P(C) 0.66-1.00 and return -1.04 to -1.28.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.algorithms import load_algorithm
from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.driver import _GIF_STREAM, run_experiment
from lamella.agents.ppo_update import PPOSettings
from lamella.agents.protocol import reset_memory_where
from lamella.envs import spaces
from lamella.marl.shaping.meta import MetaConfig, make_meta_agent, make_meta_runner

SEEDS = 3
GENERATIONS = 48
SMALL = MetaConfig(
    strategy="CMA_ES",
    population_size=16,
    num_envs=4,
    num_opponents=2,
    num_inner_steps=20,
    num_outer_steps=48,
    hidden_sizes=(),
    learning_rate=0.2,
    meta_hidden_sizes=(),
    sigma_init=1.0,
    es_learning_rate=0.1,
    eval_episodes=2,
)
SMALL = dataclasses.replace(SMALL, total_timesteps=GENERATIONS * SMALL.steps_per_iteration)
#: PPO vs PPO at SMALL's settings: player 0's mean reward per round over the outer episode (see above).
NAIVE_VS_NAIVE = -1.74
#: What the meta-agent must beat: the naive baseline by 0.2 per round (-1.54; also above ALL-D's -1.68).
THRESHOLD = NAIVE_VS_NAIVE + 0.2


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    out = tmp_path_factory.mktemp("meta") / "run"
    common = {"seeds": SEEDS, "chunk_iterations": GENERATIONS // 4, "progress": False, "plot": False}
    first = run_experiment(SMALL, out_dir=out, max_chunks=2, **common)
    second = run_experiment(SMALL, out_dir=out, resume=True, gif=True, **common)
    log = json.loads((out / "metrics.json").read_text())
    return first, second, log


def _train_series(log, name):
    """``(seeds, logged steps)`` of a train metric from the run log (each entry a chunk's mean)."""
    runs = log["multi_agent"]["IteratedPrisonersDilemma-v0"]["meta_es"]
    series = []
    for seed in sorted(runs):
        steps = sorted((s for s in runs[seed] if s.startswith("step_")), key=lambda s: int(s[5:]))
        # The entry of step 0 holds the evaluation before training only.
        series.append([runs[seed][s][f"train_{name}"][0] for s in steps if f"train_{name}" in runs[seed][s]])
    return np.asarray(series)


def test_meta_agent_shapes_a_learning_co_player(evolved):
    first, second, log = evolved
    assert not first.finished and second.finished
    meta = _train_series(log, "episode_return")  # (3 seeds, 4 chunks of 12 generations)
    assert meta.shape == (SEEDS, 4), meta.shape
    co_last = _train_series(log, "co_player_cooperation_last")
    co_first = _train_series(log, "co_player_cooperation_first")
    # Generations 37-48, population mean: the meta-agent earns more per round than a naive learner
    # against the same learner (-1.74) by more than 0.2, which is also more than ALL-D gets (-1.68).
    assert np.all(meta[:, -1] > THRESHOLD), meta
    # The search improved it: generations 37-48 beat generations 1-12 (which start near -2.3).
    assert np.all(meta[:, -1] > meta[:, 0]), meta
    # The co-player is shaped: it starts each outer episode at P(C) = 0.5 and ends it more
    # cooperative (against ALL-D it ends at 0.02).
    np.testing.assert_allclose(co_first[:, -1], 0.5, atol=0.02)
    assert np.all(co_last[:, -1] > 0.5), co_last


def test_evaluation_of_the_search_centre(evolved):
    _, _, log = evolved
    runs = log["multi_agent"]["IteratedPrisonersDilemma-v0"]["meta_es"]
    assert len(runs) == SEEDS
    for seed, run in sorted(runs.items()):
        last = run[max((s for s in run if s.startswith("step_")), key=lambda s: int(s[5:]))]
        assert last["step_count"] == GENERATIONS * SMALL.steps_per_iteration, last["step_count"]
        # The search's centre after 48 generations, 2 outer episodes against fresh co-players: the
        # same two claims as for the population (thresholds -1.54 and 0.5).
        assert len(last["mean_episode_return"]) == SMALL.eval_episodes
        assert np.mean(last["mean_episode_return"]) > THRESHOLD, (seed, last)
        assert np.mean(last["co_player_cooperation_last"]) > 0.5, (seed, last)
        np.testing.assert_allclose(last["co_player_cooperation_first"], 0.5, atol=0.02)


def test_the_gif_draws_the_last_inner_episode(evolved, framed_joint_actions):
    """``gif=True`` on the resumed run (``lamella train meta_es --resume RUN --gif``): the GIF is
    the runner's ``render_episode`` of the first seed's search centre with the driver's key, and
    that episode is the last inner episode of an outer episode (the co-players after 47 updates):
    over other keys its co-player cooperates in most rounds, as the evaluation's
    ``co_player_cooperation_last`` says, where the first inner episode's starts at P(C) = 0.5."""
    import imageio.v3 as iio

    _, second, _ = evolved
    frames = iio.imread(second.gif_path, index=None)
    assert frames.shape == (SMALL.num_inner_steps + 1, 140, 128, 3), frames.shape
    joint = framed_joint_actions(frames)
    assert not joint[0].any() and np.all(joint[1:].sum((-1, -2)) == 1)  # one joint action per round

    render = jax.jit(make_meta_runner(SMALL).render_episode)
    centre = jax.tree.map(lambda x: x[0], second.state)
    drawn, length = render(centre, jax.random.fold_in(jax.random.key(0), _GIF_STREAM))
    assert int(length) == len(frames)
    np.testing.assert_array_equal(framed_joint_actions(np.asarray(drawn)[: int(length)]), joint)

    # One episode is a single sample (20 rounds of one co-player): 16 more, other keys.
    others = np.stack(
        [framed_joint_actions(np.asarray(render(centre, jax.random.key(k))[0])) for k in range(16)]
    )
    co_player_cooperation = others[:, 1:, :, 0].sum(-1).mean()  # column 0: the co-player cooperates
    assert co_player_cooperation > 0.5, others[:, 1:].mean((0, 1))


def test_bad_input_is_rejected_with_the_fix():
    with pytest.raises(ConfigError, match=r"num_opponents \(3\) must divide num_envs \(4\).*num_envs=6"):
        make_meta_runner(MetaConfig(num_opponents=3, num_envs=4))
    with pytest.raises(ConfigError, match="less than one generation"):
        make_meta_runner(MetaConfig(total_timesteps=10))
    with pytest.raises(ConfigError, match=r"Open_ES rejects population_size=7.*even"):
        make_meta_runner(MetaConfig(strategy="Open_ES", population_size=7))
    foraging, foraging_params = lamella.envs.make("Foraging-5x5-2p-1f-coop-v3")
    with pytest.raises(
        ConfigError,
        match=r"two-player iterated matrix game .*CoinGame .*IPD-in-the-Matrix .*n-player 'IteratedTensorGame-v0'",
    ):
        make_meta_runner(MetaConfig(), foraging, foraging_params)
    with pytest.raises(ConfigError, match=r"num_outer_steps must be >= 1"):
        MetaConfig(num_outer_steps=0).validate()
    with pytest.raises(ConfigError, match=r"num_steps \(7\): a co-player updates once per inner episode"):
        MetaConfig(num_steps=7).validate()
    with pytest.raises(ConfigError, match=r"eval_max_steps \(5\).*leave it at 0"):
        MetaConfig(eval_max_steps=5).validate()
    # validate() missed these (a negative scale ran; a 0-wide layer failed in a slice at trace time).
    with pytest.raises(ConfigError, match=r"MetaConfig.sigma_init must be a finite number > 0.*got -0.5"):
        MetaConfig(sigma_init=-0.5).validate()
    with pytest.raises(ConfigError, match=r"MetaConfig.meta_hidden_sizes must hold sizes >= 1"):
        MetaConfig(meta_hidden_sizes=(0,)).validate()
    with pytest.raises(ConfigError, match=r"MetaConfig.gamma must be in \[0, 1\]"):
        MetaConfig(gamma=1.5).validate()


def test_co_players_take_the_ppo_settings_of_the_meta_config():
    # MetaConfig extends lamella-agents' PPOSettings: every PPO setting reaches the co-players
    # unchanged, and one co-player rollout is one inner episode.
    config = MetaConfig(num_inner_steps=7, learning_rate=0.3, clip_eps=0.1, anneal_lr=True, gae_lambda=0.9)
    assert isinstance(config, PPOSettings)
    co_player = config.co_player_config()
    for field in dataclasses.fields(PPOSettings):
        if field.name not in ("num_steps", "total_timesteps", "eval_episodes"):
            assert getattr(co_player, field.name) == getattr(config, field.name), field.name
    assert co_player.num_steps == co_player.num_inner_steps == 7
    assert co_player.num_iterations == config.num_outer_steps


def test_the_run_summary_calls_the_evaluation_sampled():
    # evaluate plays outer episodes as training does: the meta-agent samples its actions. The
    # summary of lamella train said "greedy return" (a config without eval_greedy reads greedy).
    from lamella.agents.cli import evaluation_return

    assert evaluation_return(MetaConfig()) == "return (sampled actions)"


def test_lamella_train_finds_the_presets():
    algorithm = load_algorithm("meta_es")
    assert algorithm.make_runner is make_meta_runner
    assert set(algorithm.presets) >= {"IteratedPrisonersDilemma-v0", "good_shepherd_v_ppo", "shaper_v_ppo"}
    assert algorithm.presets["shaper_v_ppo"].meta_recurrent
    for config in algorithm.presets.values():
        config.validate()


def test_recurrent_meta_agent_keeps_its_state_across_inner_episodes():
    # The shaping runner resets a fixed agent's memory where an episode ended with
    # reset_memory_where; the meta-agent's reset keeps it, so Shaper's GRU state runs through the
    # whole outer episode (fresh only from init, at each outer episode).
    config = MetaConfig(meta_recurrent=True, meta_hidden_sizes=(8,), meta_rnn_hidden_size=8)
    agent, _ = make_meta_agent(config, spaces.Discrete(2))
    obs = jnp.eye(5, dtype=jnp.float32)[jnp.array([4, 0, 3])]  # three envs: START, CC, DD

    @jax.jit
    def play(key):
        params, fresh = agent.init(key, obs)
        action, _, memory = agent.policy(key, params, obs, fresh)
        return fresh, action, memory, reset_memory_where(agent, jnp.ones((3,), bool), memory)

    fresh, action, memory, kept = play(jax.random.key(0))
    assert jax.tree.leaves(fresh)[0].shape == (3, 8)
    np.testing.assert_array_equal(jax.tree.leaves(fresh)[0], 0.0)
    assert action.shape == (3,) and action.dtype == jnp.int32
    assert np.all(np.abs(np.asarray(jax.tree.leaves(memory)[0])) > 0), memory
    for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(memory), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_recurrent_meta_agents_gif_traces_to_one_frame_per_round():
    """Shaper (a GRU meta-agent, whose memory is its training batch's and is kept between inner
    episodes) and a recurrent co-player: the GIF's episode traces (abstractly: nothing compiles)
    to one frame per round and the reset's. Drawing on an evaluation batch of other size failed."""
    config = dataclasses.replace(
        SMALL, meta_recurrent=True, meta_hidden_sizes=(8,), meta_rnn_hidden_size=8, co_player_recurrent=True
    )
    runner = make_meta_runner(config)
    key = jax.random.key(0)
    frames, length = jax.eval_shape(runner.render_episode, jax.eval_shape(runner.init, key), key)
    assert frames.shape[1:] == (140, 128, 3) and frames.shape[0] >= config.num_inner_steps + 1
    assert length.shape == () and length.dtype == jnp.int32


def test_an_es_learning_rate_of_a_strategy_without_an_optimiser_is_refused():
    # CMA_ES (the default) takes no optimiser; before, the rate was accepted and never read.
    with pytest.raises(
        ConfigError, match=r"MetaConfig.es_learning_rate=0.3 .*CMA_ES takes no optimiser.*Open_ES.*0.1"
    ):
        resolve_config("meta_es", None, None, ["es_learning_rate=0.3"])
    resolve_config("meta_es", None, None, ["strategy=Open_ES", "es_learning_rate=0.3"])
    # A preset's setting of the mode switched off is no error (it sets a 32-unit GRU).
    resolve_config("meta_es", None, "shaper_v_ppo_in_the_matrix", ["meta_recurrent=false"])
