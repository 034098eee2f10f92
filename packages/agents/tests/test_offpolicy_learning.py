"""Off-policy learning tests (no goals): every seed of a vmapped run must reach the stated threshold.

Each test trains two seeds in one compiled program (``jax.vmap`` over
``jax.random.split(jax.random.key(0), 2)``) and evaluates the greedy policy after every
iteration inside the same program (keys ``fold_in(seed_key, iteration)``), so the whole
learning curve costs one compile. Thresholds, budgets and evaluation protocols are in each
docstring. Measured on a 2-core CPU (jax 0.10.2), see the package README.

Every test here is marked ``slow``: they train rather than compile, and CI runs lamella-agents'
``slow`` tests with XLA's default CPU emitters, the others with the older ones that compile
faster and run slower (scripts/test_all.py, ``SLOW_APART_XLA_FLAGS``). The SAC and DQN tests
cost 31.9 and 82.3 CPU-s with the older emitters, 29.2 and 65.9 with the default ones.
"""

from __future__ import annotations

import numpy as np
import pytest

from lamella.agents.offpolicy import (
    DDPGTrainConfig,
    DQNTrainConfig,
    SACTrainConfig,
    TD3TrainConfig,
    TQCTrainConfig,
    make_offpolicy_runner,
)
from lamella.agents.offpolicy.presets import PRESETS
from lamella.agents.testing import assert_threshold, learning_curves


def train_with_evaluations(config, metric="episode_return", num_seeds=2):
    """The greedy evaluation after every iteration, (seeds, iterations), all seeds in one compile."""
    return np.asarray(learning_curves(make_offpolicy_runner(config), num_seeds, metric))


PENDULUM = dict(
    env_id="Pendulum-v1",
    total_timesteps=8000,
    hidden_sizes=(64, 64),
    learning_starts=500,
    rollout_steps=1000,
    eval_episodes=10,
    actor_learning_rate=1e-3,
    critic_learning_rate=1e-3,
    buffer_size=10000,
)


@pytest.mark.slow
def test_sac_pendulum():
    """SAC on Pendulum-v1, 8000 env steps (1 env, 1 update per step, (64, 64) nets, Adam 1e-3).

    Threshold: the greedy policy's mean return over 10 episodes after the last iteration is
    >= -200 for both seeds (measured: -121 and -182; the first evaluation is about -1700).
    """
    evaluations = train_with_evaluations(SACTrainConfig(**PENDULUM, alpha_learning_rate=1e-3))
    assert evaluations.shape == (2, 8)
    assert_threshold(evaluations[:, 0], -500, "SAC Pendulum first greedy return", at_least=False)
    assert_threshold(evaluations[:, -1], -200, "SAC Pendulum last greedy return")


@pytest.mark.slow
def test_dqn_cartpole():
    """Double DQN on CartPole-v1, 50 000 env steps (4 envs, 2 updates per vector step,
    (256, 256) nets, Adam 1e-3, 3-step returns, batch 64, hard target copy every 128 updates,
    epsilon 1 -> 0.04 over 8000 steps), greedy evaluation of 10 episodes after every 2000 steps.

    Threshold ("solves"): for both seeds the greedy return reaches >= 475 at some evaluation,
    and the last evaluation is >= 195. Measured on 8 seeds (the test's two and 6 more, one
    program of 8 seeds): best 500 for all 8 on jax 0.10.2 and 0.12; last 500, 500, 500, 500,
    500, 456, 500, 500 (jax 0.10.2) and 447, 500, 500, 500, 500, 500, 234, 500 (jax 0.12).
    The earlier setting (1-step returns, Adam 2.3e-3) swung between 60 and 500 from one
    evaluation to the next late in training: its last evaluations of the same 8 seeds were
    181 to 500 (jax 0.10.2) and 63 to 500 (jax 0.12), failing the last bar in 1 and 3 of 8
    seeds (this test failed on jax 0.12 by that luck, 92 for one seed, not by a jax fault).
    """
    config = PRESETS["dqn"]["CartPole-v1"]  # `lamella train dqn` runs exactly this test's settings
    assert isinstance(config, DQNTrainConfig) and config.eval_episodes == 10
    evaluations = train_with_evaluations(config)
    assert_threshold(evaluations.max(axis=1), 475, "DQN CartPole best greedy return")
    assert_threshold(evaluations[:, -1], 195, "DQN CartPole last greedy return")


@pytest.mark.slow
def test_td3_pendulum():
    """TD3 on Pendulum-v1 with the SAC test's budget and settings (8000 steps, 1e-3, (64, 64)).

    Threshold: the last greedy evaluation (10 episodes) >= -200 for both seeds (measured: -139, -191).
    """
    evaluations = train_with_evaluations(TD3TrainConfig(**PENDULUM))
    assert_threshold(evaluations[:, -1], -200, "TD3 Pendulum last greedy return")


@pytest.mark.slow
def test_ddpg_pendulum_three_seeds():
    """DDPG on Pendulum-v1 with the SAC test's budget and settings (8000 steps, 1e-3, (64, 64)),
    3 seeds in one compile.

    Threshold: the mean of the last two greedy evaluations (10 episodes each) >= -250 for every
    seed, and the first evaluation (after 1000 steps) <= -500, so the policy learned it
    (measured: last two -132/-123, -161/-161, -120/-149; first -1530, -1466, -1603).
    DDPG's curve is noisy (one seed fell to -550 at 5000 steps), hence two evaluations.
    """
    evaluations = train_with_evaluations(DDPGTrainConfig(**PENDULUM), num_seeds=3)
    assert evaluations.shape == (3, 8)
    assert_threshold(evaluations[:, 0], -500, "DDPG Pendulum first greedy return", at_least=False)
    assert_threshold(evaluations[:, -2:].mean(axis=1), -250, "DDPG Pendulum mean of the last two returns")


@pytest.mark.slow
def test_tqc_pendulum_three_seeds():
    """TQC (2 critics x 25 quantiles, 2 dropped per critic) on Pendulum-v1 with the SAC test's
    budget and settings (8000 steps, Adam 1e-3 for actor, critics and temperature, (64, 64)),
    3 seeds in one compile.

    Threshold: the mean of the last two greedy evaluations (10 episodes each) >= -250 for every
    seed, and the first <= -500 (measured: last two -128/-122, -161/-180, -123/-154; first
    -1734, -1651, -1692).
    """
    config = TQCTrainConfig(**PENDULUM, alpha_learning_rate=1e-3)
    evaluations = train_with_evaluations(config, num_seeds=3)
    assert_threshold(evaluations[:, 0], -500, "TQC Pendulum first greedy return", at_least=False)
    assert_threshold(evaluations[:, -2:].mean(axis=1), -250, "TQC Pendulum mean of the last two returns")


@pytest.mark.slow
def test_discrete_sac_cartpole_three_seeds():
    """Discrete SAC on CartPole-v1, 20 000 env steps (4 envs, 2 updates per vector step,
    (64, 64) nets, Adam 1e-3, tau 0.01, batch 64, target entropy 0.5 log 2), 3 seeds in one
    compile; greedy evaluation of 10 episodes after every 2000 steps.

    Threshold: the mean of the last three evaluations >= 150 for every seed (measured: 232,
    257, 234; pushing one way all the time ends an episode in about 10 steps, uniform random
    actions in about 22).
    Discrete SAC plateaus near 250 here with these settings (target entropy 0.2 log 2 gave the
    same); it is the DQN test that solves CartPole.
    """
    config = SACTrainConfig(
        env_id="CartPole-v1",
        total_timesteps=20_000,
        num_envs=4,
        rollout_steps=500,
        hidden_sizes=(64, 64),
        learning_starts=1000,
        batch_size=64,
        buffer_size=20_000,
        eval_episodes=10,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        target_entropy_scale=0.5,
        updates_per_step=2,
        tau=0.01,
    )
    evaluations = train_with_evaluations(config, num_seeds=3)
    assert evaluations.shape == (3, 10)
    assert_threshold(
        evaluations[:, -3:].mean(axis=1), 150, "discrete SAC CartPole mean of the last three returns"
    )
