"""IPPO and MAPPO learn small Level-Based Foraging tasks, and MAPPO a small MPE task and a small
RWARE warehouse, three seeds each, well above random.

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

MPE (issue 15's "MAPPO on a small RWARE or MPE task"): MAPPO on ``MPE-simple_speaker_listener-v4``
with discrete actions (a speaker that only talks sees the goal landmark's colour, a listener that
only moves is rewarded ``-|listener - goal|^2``; both agents get that reward, so
``team_reward=False`` and the per-agent return is the shared score of one 25-step episode). The
centralised critic reads the env's global state. Mava's presets except the budget (20,480 env
steps per seed: 10 updates of 16 envs x 128 steps), the width (64, 64) and the step size (3e-3).
The random baseline, measured here with the same evaluation (uniform actions, 1024 episodes), is
-41.5 per agent; the threshold is -28 per agent for every seed (and random + 10). Measured when
written: -22.7, -17.8, -20.3 (30,720 steps: -19.4, -16.1, -18.4).

RWARE: MAPPO on a small warehouse of rware's rules (lamella-envs' ``RobotWarehouse``, checked
step by step against rware 2.0.0): ``rware-tiny-2ag-v2`` with ``shelf_columns=3``,
``column_height=1`` and ``max_steps=100``, a 4 x 10 grid with 4 shelves (2 requested at a time),
the two goals in the bottom row, 100-step episodes. The registered tiny-2ag (11 x 10, 32
shelves, 500 steps) learns far too slowly for CI: 0.1 deliveries per episode after 409,600 steps
(README, "Learning on LBF, RWARE, MPE and SMAX"). Mava's presets except the budget (102,400 env
steps per seed), the width (64, 64) and the step size (3e-3; at 1e-3 the same budget gave 0.17 to
0.83). The score is deliveries per episode (the team return); the random baseline, measured here
(uniform actions, 1024 episodes), is about 0.05. Threshold: >= 1.0 for every seed and >= 10x
random. Measured when written: 1.70, 1.64, 2.61 (seeds of ``split(key(0), 6)``: 1.67 to 2.39).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lamella.envs
from lamella.agents import evaluate_agent, make_random_agent, make_train
from lamella.marl import IPPOConfig, MAPPOConfig, make_ippo_runner, make_mappo_runner
from lamella.marl.ppo import bare_multi_agent_env

SEEDS = jax.random.split(jax.random.key(0), 3)


def random_returns(env_id: str, **env_kwargs) -> tuple[float, float]:
    """Uniformly random actions on the evaluation loop of the tests, 1024 episodes: the mean team
    return and the mean per-agent return."""
    env, params = lamella.envs.make(env_id, autoreset=False, **env_kwargs)
    agent = make_random_agent(env.action_space(params))
    train_state, memory = agent.init(jax.random.key(0))
    out = evaluate_agent(
        agent, train_state, env, params, jax.random.key(1), 1024, 100, memory, greedy=False, per_agent=True
    )
    return float(out["episode_return"].mean()), float(out["agent_return"].mean())


def random_team_return(env_id: str) -> float:
    return random_returns(env_id)[0]


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


def test_mappo_learns_speaker_listener_well_above_random_for_three_seeds():
    env_id = "MPE-simple_speaker_listener-v4"
    _, random_return = random_returns(env_id)
    assert -45.0 < random_return < -38.0, random_return  # the baseline the threshold is compared with
    config = MAPPOConfig(
        env_id=env_id,
        total_timesteps=16 * 128 * 10,
        hidden_sizes=(64, 64),
        learning_rate=3e-3,
        team_reward=False,  # both agents already get the shared reward
        eval_episodes=64,
    )
    _, evaluation, metrics = train_and_evaluate(make_mappo_runner(config))
    returns = np.asarray(evaluation["return"].mean(axis=(1, 2)))  # per agent, per seed
    print(f"MAPPO {env_id}: per-agent return per seed {returns}, random {random_return:.2f}")
    assert np.all(returns >= -28.0), (returns, random_return)
    assert np.all(returns >= random_return + 10.0), (returns, random_return)
    # The two agents share one reward: each agent's return is the team's half.
    np.testing.assert_allclose(evaluation["return"][..., 0], evaluation["return"][..., 1], rtol=1e-5)
    assert metrics["return"].shape == (len(SEEDS), config.num_iterations, 2)


def test_mappo_learns_a_small_warehouse_well_above_random_for_three_seeds():
    small = {"shelf_columns": 3, "column_height": 1, "max_steps": 100}
    random_return, _ = random_returns("rware-tiny-2ag-v2", **small)
    assert 0.005 < random_return < 0.1, random_return  # the baseline the threshold is compared with
    config = MAPPOConfig(
        env_id="rware-tiny-2ag-v2",
        env_kwargs=tuple(f"{name}={value}" for name, value in small.items()),
        total_timesteps=102_400,
        hidden_sizes=(64, 64),
        learning_rate=3e-3,
        eval_episodes=64,
    )
    env, _, _ = bare_multi_agent_env(config, None, None)  # what the runner trains on
    assert (env.rows, env.cols, env.num_shelves, env.request_queue_size) == (4, 10, 4, 2)
    returns, _, metrics = train_and_evaluate(make_mappo_runner(config))
    print(f"MAPPO small warehouse: deliveries per episode per seed {returns}, random {random_return:.4f}")
    assert np.all(returns >= 1.0), (returns, random_return)
    assert np.all(returns >= 10 * random_return), (returns, random_return)
    assert metrics["return"].shape == (len(SEEDS), config.num_iterations, 2)
