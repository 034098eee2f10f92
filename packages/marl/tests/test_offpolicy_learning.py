"""IDQN learns a small Level-Based Foraging task and ISAC continuous MPE simple_speaker_listener,
three seeds each, well above random (ISAC's baselines and settings are given beside its test).

The three seeds (``jax.random.split(jax.random.key(0), 3)``) train in one vmapped compile
(``make_train`` of the off-policy loop), then each seed is evaluated on 64 episodes with the
exploring policy (``eval_greedy=False``: epsilon at ``epsilon_end`` = 0.05; in LBF two greedy
agents can block each other for the rest of an episode). The score is the mean team return (both
agents' rewards summed; 1.0 means the food of every episode was eaten within the 50-step limit).

The random baseline is measured here on the same env and evaluation loop: uniformly random
actions (``make_random_agent``; illegal ones act as NONE), 1024 episodes; 0.0205 when the test
was written. The threshold, 0.3 per seed, is more than 14x that.

Settings: ``IDQNConfig``'s defaults (double DQN, Huber loss, shared parameters with one-hot agent
ids, team reward, 4 envs, one update per vector step, epsilon 1 -> 0.05 over 20,000 env steps,
MLP (64, 64)) for 40,000 env steps per seed. Returns measured when the test was written: 0.94,
0.69, 0.53.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.agents import evaluate_agent, make_random_agent, make_train
from lamella.agents.protocol import Agent
from lamella.marl import IDQNConfig, ISACConfig, make_idqn_runner, make_isac_runner

SEEDS = jax.random.split(jax.random.key(0), 3)
ENV_ID = "Foraging-5x5-2p-1f-coop-v3"
THRESHOLD = 0.3


def random_team_return(env_id: str) -> float:
    env, params = lamella.envs.make(env_id, autoreset=False)
    agent = make_random_agent(env.action_space(params))
    train_state, memory = agent.init(jax.random.key(0))
    out = evaluate_agent(agent, train_state, env, params, jax.random.key(1), 1024, 100, memory, greedy=False)
    return float(out["episode_return"].mean())


def test_idqn_learns_foraging_well_above_random_for_three_seeds():
    random_return = random_team_return(ENV_ID)
    assert random_return < 0.05  # the baseline the threshold is compared with
    runner = make_idqn_runner(IDQNConfig(env_id=ENV_ID, total_timesteps=40_000, eval_episodes=64))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(SEEDS)
    evaluation = jax.jit(jax.vmap(runner.evaluate))(state, jax.random.split(jax.random.key(1), len(SEEDS)))
    returns = np.asarray(evaluation["episode_return"].mean(axis=1))
    print(f"IDQN {ENV_ID}: team return per seed {returns}, random {random_return:.4f}")
    assert np.all(returns >= THRESHOLD), (returns, random_return)
    assert np.all(returns >= 10 * random_return)
    # Each agent's return is reported beside the team's and they add up.
    np.testing.assert_allclose(evaluation["return"].sum(-1), evaluation["episode_return"], rtol=1e-5)
    assert np.all(np.asarray(metrics["loss"][:, -1]) > 0)


# ISAC on MPE simple_speaker_listener with continuous actions: the listener must move to the
# landmark only the speaker sees. Baselines measured when the test was written (1024 episodes,
# team return = both agents' shared reward summed over 25 steps): uniformly random actions -73.6,
# standing still (all-zero actions) -68.9. The threshold, -50 per seed, beats both by more than 18.
# Settings: ISACConfig's defaults (shared parameters with agent ids, 4 envs, one update per
# vector step, MLP (64, 64), Adam 1e-3) with batches of 64 for 10,000 env steps per seed;
# evaluation with the mean action, 64 episodes. Returns measured when the test was written: -33.7,
# -35.0, -34.6 (-34.5, -31.6, -33.2 with the default batch of 256, at a third more CPU time).
ISAC_THRESHOLD = -50.0


def still_agent():
    """All-zero continuous actions (no movement, silent speaker)."""
    return Agent(
        init=lambda key, obs=None: ((), ()),
        policy=lambda key, ts, obs, memory, eval=False: (jnp.zeros((obs.shape[0], 2, 5)), ts, memory),
        update=None,
        reset_memory=lambda memory, eval=False: (),
    )


def test_isac_learns_speaker_listener_well_above_random_and_standing_still_for_three_seeds():
    env, params = lamella.envs.make(
        "MPE-simple_speaker_listener-v4", autoreset=False, continuous_actions=True
    )
    agent = make_random_agent(env.action_space(params))
    train_state, memory = agent.init(jax.random.key(0))
    baselines = {
        "random": evaluate_agent(
            agent, train_state, env, params, jax.random.key(1), 1024, 25, memory, greedy=False
        ),
        "still": evaluate_agent(still_agent(), (), env, params, jax.random.key(1), 1024, 25, ()),
    }
    random_return, still_return = (float(out["episode_return"].mean()) for out in baselines.values())
    # The baselines the threshold is compared with (-73.6 and -68.9 when the test was written).
    assert max(random_return, still_return) < ISAC_THRESHOLD - 18
    runner = make_isac_runner(ISACConfig(total_timesteps=10_000, eval_episodes=64, batch_size=64))
    state, _ = jax.jit(jax.vmap(make_train(runner)))(SEEDS)
    evaluation = jax.jit(jax.vmap(runner.evaluate))(state, jax.random.split(jax.random.key(1), len(SEEDS)))
    returns = np.asarray(evaluation["episode_return"].mean(axis=1))
    print(
        f"ISAC speaker_listener: team return per seed {returns}, random {random_return:.1f}, still {still_return:.1f}"
    )
    assert np.all(returns >= ISAC_THRESHOLD), (returns, random_return)
