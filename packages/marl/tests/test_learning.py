"""IPPO and MAPPO learn small Level-Based Foraging tasks, three seeds each, well above random.

Each algorithm trains its three seeds (``jax.random.split(jax.random.key(0), 3)``) in one
vmapped compile (``make_train``), then every seed is evaluated on 64 episodes (the policy
sampled, as Mava evaluates: ``eval_greedy=False``). The score is the mean team return (the sum of
both agents' rewards; 1.0 means every food of every episode was eaten within the 50-step limit).

The random baseline is measured here, on the same env and the same evaluation loop: uniformly
random actions (``make_random_agent``; illegal ones act as NONE), 1024 episodes. Measured when the
test was written: 0.021 on Foraging-5x5-2p-1f-coop-v3 and 0.0029 on Foraging-8x8-2p-2f-coop-v3
(0.028 and 0.0035 with 4096 episodes; Mava reports 0.003 for the latter's random policy).

Settings are Mava's presets except the budget and the network width (64, 64): IPPO 204,800 env
steps per seed, MAPPO 102,400. Returns measured when the test was written: IPPO 0.92, 0.78, 0.87;
MAPPO 1.0, 1.0, 1.0.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lamella.envs
from lamella.agents import evaluate_agent, make_random_agent, make_train
from lamella.marl import IPPOConfig, MAPPOConfig, make_ippo_runner, make_mappo_runner

SEEDS = jax.random.split(jax.random.key(0), 3)


def random_team_return(env_id: str) -> float:
    env, params = lamella.envs.make(env_id, autoreset=False)
    agent = make_random_agent(env.action_space(params))
    train_state, memory = agent.init(jax.random.key(0))
    out = evaluate_agent(agent, train_state, env, params, jax.random.key(1), 1024, 100, memory, greedy=False)
    return float(out["episode_return"].mean())


def train_and_evaluate(runner):
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(SEEDS)
    evaluation = jax.jit(jax.vmap(runner.evaluate))(state, jax.random.split(jax.random.key(1), len(SEEDS)))
    return np.asarray(evaluation["episode_return"].mean(axis=1)), evaluation, metrics


@pytest.mark.parametrize(
    ("make_runner", "config", "threshold"),
    [
        (
            make_ippo_runner,
            IPPOConfig(
                env_id="Foraging-8x8-2p-2f-coop-v3",
                total_timesteps=204_800,
                hidden_sizes=(64, 64),
                eval_episodes=64,
            ),
            0.5,
        ),
        (
            make_mappo_runner,
            MAPPOConfig(
                env_id="Foraging-5x5-2p-1f-coop-v3",
                total_timesteps=102_400,
                hidden_sizes=(64, 64),
                eval_episodes=64,
            ),
            0.8,
        ),
    ],
    ids=["ippo-Foraging-8x8-2p-2f-coop", "mappo-Foraging-5x5-2p-1f-coop"],
)
def test_learns_well_above_random_for_three_seeds(make_runner, config, threshold):
    random_return = random_team_return(config.env_id)
    assert random_return < 0.05  # the baseline the threshold is compared with
    returns, evaluation, metrics = train_and_evaluate(make_runner(config))
    print(
        f"{type(config).__name__} {config.env_id}: team return per seed {returns}, random {random_return:.4f}"
    )
    assert np.all(returns >= threshold), (returns, random_return)
    assert np.all(returns >= 10 * random_return)
    # Per-agent returns are logged beside the team's and add up to it.
    np.testing.assert_allclose(
        evaluation["return"].sum(-1), evaluation["episode_return"], rtol=1e-5, atol=1e-6
    )
    assert metrics["return"].shape == (len(SEEDS), make_runner(config).num_iterations, 2)
