"""M-FOS (RL): a PPO meta-agent against exact-gradient naive learners on the infinite IPD.

Setup (``SMALL``): Pax's IPD (CC -1, CD -3, DC 0, DD -2), discount 0.96; outer episodes of 50
naive-learner updates (learning rate 1, ``theta ~ N(0, 1)``); the meta-agent is PPO (32 envs, one
outer episode per rollout, 4 epochs of 2 minibatches, Adam 1e-2, MLP (32, 32)) trained for 100
updates; 3 seeds in one program through the driver (``lamella train mfos_rl``'s path).

Pax's documented outcome for ``ipd/mfos_nl`` is ZD-extortion: the meta-agent earns more than
mutual cooperation (> -1 per step) while the naive learner earns less (< -1). Fixed meta-agents
against the same learners over 50 outer steps (``make_exact_play``, 64 games): ZD extortion
-0.81 (the learner -1.54), ALL-D -1.98 (-2.01), tit-for-tat -1.02 (-1.01).

Measured when the test was written (seeds 0, 1, 2): the meta-agent's mean reward per step in its
sampled training episodes -2.45 at the first update and -0.68, -0.65, -0.71 over the last ten;
the greedy policy against 32 fresh learners -0.58, -0.57, -0.62, the learners -2.09, -2.08,
-2.03 (the meta-agent extorts more than ZD extortion does, ending the learner below mutual
defection).
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.algorithms import load_algorithm
from lamella.agents.config import ConfigError
from lamella.agents.driver import run_experiment
from lamella.envs.multi_agent.infinite_matrix_game import InfiniteMatrixGame, InfiniteMatrixGameState
from lamella.marl.shaping.exact import ExactGame, exact_values, make_naive_learner
from lamella.marl.shaping.mfos import LearningOpponentGame, MFOSConfig, make_mfos_runner

SEEDS = 3
UPDATES = 100
SMALL = MFOSConfig(eval_episodes=32)
SMALL = dataclasses.replace(SMALL, total_timesteps=UPDATES * SMALL.steps_per_iteration)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("mfos") / "run"
    result = run_experiment(
        SMALL, out_dir=out, seeds=SEEDS, chunk_iterations=UPDATES, progress=False, plot=False, gif=True
    )
    log = json.loads((out / "metrics.json").read_text())
    return result, log["multi_agent"]["InfiniteMatrixGame-v0"]["mfos_rl"]


def test_mfos_extorts_a_naive_learner(trained):
    result, runs = trained
    assert result.finished and len(runs) == SEEDS
    for seed, run in sorted(runs.items()):
        steps = sorted((s for s in run if s.startswith("step_")), key=lambda s: int(s[5:]))
        before, last = run[steps[0]], run[steps[-1]]
        assert last["step_count"] == UPDATES * SMALL.steps_per_iteration, last["step_count"]
        meta, naive = np.mean(last["mean_episode_return"]), np.mean(last["opponent_return"])
        assert len(last["opponent_return"]) == SMALL.eval_episodes
        # The greedy meta-agent against 32 fresh naive learners, mean reward per outer step: more
        # than mutual cooperation (-1) for itself, less for the learner (Pax's ZD-extortion outcome).
        assert meta > -1.0 and naive < -1.0, (seed, meta, naive)
        # PPO learned it: before training the policy earns about -2.4.
        assert meta > np.mean(before["mean_episode_return"]) + 1.0, (seed, before, meta)


def test_the_gif_draws_an_outer_episode_of_the_greedy_meta_agent(trained, drawn_policies, drawn_values):
    """``gif=True`` (``lamella train mfos_rl --gif``, which failed before LearningOpponentGame had
    a renderer): one outer episode of seed 0's greedy meta-agent against a fresh naive learner,
    each frame the pair of policies just played. Scored from the drawn policies alone, it is the
    outcome above: the meta-agent above mutual cooperation's -1 per step, the learner below it
    (measured: -0.59 and -2.04 per step; the learner ends cooperating, 0.64 to 1 in every state,
    the meta-agent mostly not)."""
    import imageio.v3 as iio

    result, _ = trained
    frames = iio.imread(result.gif_path, index=None)
    assert frames.shape == (SMALL.num_outer_steps + 1, 140, 130, 3)  # the reset pair and 50 outer steps
    assert np.all((drawn_policies(frames) >= 0) & (drawn_policies(frames) <= 1))
    progress = np.all(frames[:, 135, :, :] == (40, 160, 60), axis=-1).sum(-1)  # the green bar
    assert progress[0] == 0 and progress[-1] == 130 and np.all(np.diff(progress) >= 0)
    meta, learner = drawn_values(frames[1:]).mean(0)
    assert meta > -1.0 and learner < -1.0, (meta, learner)


def test_learning_opponent_game_steps_the_learner(drawn_policies):
    learner = make_naive_learner()
    env = LearningOpponentGame(learner, num_steps=3)
    params = env.default_params
    game = ExactGame.prisoners_dilemma()
    policy = jnp.asarray([0.9, 0.8, 0.3, 0.6, 0.1])

    @jax.jit
    def play(key):
        obs, state = env.reset(key, params)
        stepped = env.step(key, state, policy, params)
        # What the step should do: the exact values of the pair, then one naive step of the learner.
        logits = jnp.log(policy) - jnp.log1p(-policy)
        expected = (
            exact_values(logits, state.theta, game),
            learner.update(state.theta, logits, game.swapped()),
        )
        return obs, state, stepped, expected

    obs, state, (obs2, state2, reward, terminated, truncated, info), (values, theta) = play(jax.random.key(3))
    assert obs.shape == (10,) and np.all((obs >= 0) & (obs <= 1))
    np.testing.assert_allclose(reward, values[0], rtol=1e-5)
    np.testing.assert_allclose(info["opponent_reward"], values[1], rtol=1e-5)
    np.testing.assert_allclose(state2.theta, theta, rtol=1e-4, atol=1e-5)
    assert not np.allclose(state2.theta, state.theta)  # the learner moved
    np.testing.assert_allclose(obs2, jnp.concatenate([policy, jax.nn.sigmoid(state.theta)]), rtol=1e-6)
    assert int(state2.time) == 1 and not bool(terminated) and not bool(truncated)
    # render: the pair just played (the observation), as the infinite game draws a pair.
    pair = InfiniteMatrixGameState(obs2.reshape(2, 5), jnp.zeros(2), jnp.ones((), jnp.int32))
    np.testing.assert_array_equal(
        env.render(state2, params), InfiniteMatrixGame(num_steps=3).render(pair, params)
    )
    np.testing.assert_allclose(
        drawn_policies(np.asarray(env.render(state2, params))), obs2.reshape(2, 5), atol=1.01 / 58
    )


def test_bad_input_is_rejected_with_the_fix():
    with pytest.raises(ConfigError, match="opponent must be one of"):
        make_mfos_runner(MFOSConfig(opponent="ppo"))
    with pytest.raises(ConfigError, match="must name an InfiniteMatrixGame"):
        make_mfos_runner(MFOSConfig(env_id="IteratedPrisonersDilemma-v0"))
    with pytest.raises(ConfigError, match=r"MFOSConfig\.payoff.*shape \(2, 2, 2\)"):
        MFOSConfig(payoff=(1.0, 2.0, 3.0)).validate()
    with pytest.raises(ConfigError, match=r"game_gamma must be in \[0, 1\)"):
        MFOSConfig(game_gamma=1.0).validate()
    with pytest.raises(ConfigError, match=r"num_steps \(30\) and num_outer_steps \(50\).*num_steps=50"):
        make_mfos_runner(MFOSConfig(num_steps=30, total_timesteps=10**6))
    with pytest.raises(ConfigError, match="less than one iteration"):
        make_mfos_runner(MFOSConfig(total_timesteps=10))


def test_lamella_train_finds_the_presets():
    algorithm = load_algorithm("mfos_rl")
    assert algorithm.make_runner is make_mfos_runner
    assert set(algorithm.presets) >= {"InfiniteMatrixGame-v0", "mfos_v_nl", "mfos_v_lola"}
    assert algorithm.presets["mfos_v_lola"].opponent == "lola"
    for config in algorithm.presets.values():
        config.validate()
    assert "mfos_v_nl" in load_algorithm("mfos_es").presets
