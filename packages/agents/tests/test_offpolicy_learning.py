"""Off-policy learning tests (no goals): every seed of a vmapped run must reach the stated threshold.

Each test trains two seeds in one compiled program (``jax.vmap`` over
``jax.random.split(jax.random.key(0), 2)``) and evaluates the greedy policy after every
iteration inside the same program (keys ``fold_in(seed_key, iteration)``), so the whole
learning curve costs one compile. Thresholds, budgets and evaluation protocols are in each
docstring. Measured on a 2-core CPU (jax 0.10.2), see the package README.

Every test here is marked ``slow``: they train rather than compile, and CI runs lamella-agents'
``slow`` tests with XLA's default CPU emitters, the others with the older ones that compile
faster and run slower (scripts/test_all.py, ``SLOW_APART_XLA_FLAGS``). The SAC and DQN tests
cost 31.9 and 82.3 CPU-s with the older emitters, 29.2 and 65.9 with the default ones (SAC at
8000 steps; its 10 000 since 2026-12-04 cost about a quarter more).
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
# The SAC and TD3 tests' budget and evaluation: 100 greedy episodes per evaluation (10 leave a
# good policy's mean +-30 from its true value, enough to cross -200 by chance) and the steps their
# 8-seed sweeps settled by (docstrings).
_SETTLED = dict(total_timesteps=10000, eval_episodes=100)


@pytest.mark.slow
def test_sac_pendulum():
    """SAC on Pendulum-v1, 10 000 env steps (1 env, 1 update per step, (64, 64) nets, Adam 1e-3),
    greedy evaluation of 100 episodes after every 1000 steps.

    Threshold: the greedy policy's mean return after the last iteration is >= -200 for both seeds
    (measured: -152 and -136 on jax 0.10.2, -156 and -136 on jax 0.12; the first evaluation is
    about -1700). Measured on 8 seeds (the test's two and 6 more, one program), 12 000 steps: every
    evaluation after 10 000, 11 000 and 12 000 steps within -136 to -167 on both jax versions,
    while at 6000 to 9000 steps one seed still dipped to -290..-530 on both.
    The earlier setting (8000 steps, 10 evaluation episodes) failed -200 for 1 of those 8 seeds
    on jax 0.12 and 2 of 8 on jax 0.10.2 (this test failed on jax 0.12 by that luck): 10
    episodes of Pendulum from random starts spread a good policy's mean by about +-30, and 8000
    steps are before some seeds settle.
    """
    config = SACTrainConfig(**{**PENDULUM, **_SETTLED}, alpha_learning_rate=1e-3)
    evaluations = train_with_evaluations(config)
    assert evaluations.shape == (2, 10)
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
    """TD3 on Pendulum-v1 with the SAC test's budget and settings (10 000 steps, 1e-3, (64, 64),
    100 greedy episodes per evaluation).

    Threshold: for both seeds the best of the last three evaluations (8000, 9000 and 10 000
    steps) is >= -200, and the first (1000 steps) <= -500 (measured: -156 and -143 on jax 0.10.2,
    -148 and -139 on jax 0.12; first -1580 and -1505). Measured on 8 seeds (the test's two and 6
    more, one program of 8 seeds, 12 000 steps): best of those three -153 or better on jax 0.10.2
    and -157 or better on jax 0.12 for all 8.
    The best, not the last: TD3 reaches -200 here but does not stay there. In that sweep a seed
    that had converged (-140 to -160) fell for one evaluation to -320..-650 about once in every
    eight evaluations after 8000 steps, on both jax versions, and so did it with gamma 0.98, lr
    5e-4 or 3e-4, (128, 128) nets or exploration noise 0.2 and 0.3 (8 seeds each, jax 0.12); the
    last evaluation missed -200 for 1 to 4 of the 8 seeds in every one of them. The earlier test
    (the last of 10-episode evaluations after 8000 steps) passed CI by its seeds' luck and failed
    on jax 0.12 (-235 for one seed).
    """
    evaluations = train_with_evaluations(TD3TrainConfig(**{**PENDULUM, **_SETTLED}))
    assert evaluations.shape == (2, 10)
    assert_threshold(evaluations[:, 0], -500, "TD3 Pendulum first greedy return", at_least=False)
    assert_threshold(evaluations[:, -3:].max(axis=1), -200, "TD3 Pendulum best of the last three returns")


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
