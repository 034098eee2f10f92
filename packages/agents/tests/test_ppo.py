"""PPO: config checks, the Agent protocol, hyper-parameter vmaps, and learning tests."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents import PRESETS, Agent, PPOConfig, make_ppo, make_ppo_runner, make_train
from lamella.envs import spaces

EVAL_KEY = jax.random.key(1234)


def train_and_evaluate(config: PPOConfig, num_seeds: int, seed: int = 0):
    """Train ``num_seeds`` seeds in one compiled call; greedy evaluation at the end."""
    runner = make_ppo_runner(config)

    def run(key):
        state, metrics = make_train(runner)(key)
        return state, metrics, runner.evaluate(state, EVAL_KEY)

    keys = jax.random.split(jax.random.key(seed), num_seeds)
    return jax.jit(jax.vmap(run))(keys)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_minibatches": 3}, "multiple of num_minibatches"),
        ({"total_timesteps": 10}, "less than one iteration"),
        ({"torso": "resnet"}, "torso"),
        ({"recurrent": True, "num_envs": 6, "num_minibatches": 4}, "num_envs"),
        ({"activation": "swoosh"}, "activation"),
    ],
)
def test_bad_config_raises_at_construction(change, message):
    with pytest.raises(ValueError, match=message):
        make_ppo_runner(dataclasses.replace(PPOConfig(), **change))


@pytest.mark.parametrize("recurrent", [False, True], ids=["feedforward", "recurrent"])
@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(3), spaces.MultiDiscrete([2, 3]), spaces.Box(-1.0, 1.0, (2,))],
    ids=["discrete", "multidiscrete", "box"],
)
def test_agent_protocol_policy_shapes_and_purity(space, recurrent):
    config = PPOConfig(num_envs=4, recurrent=recurrent, rnn_hidden_size=8, hidden_sizes=(8,), eval_episodes=3)
    agent, _ = make_ppo(config, spaces.Box(-1.0, 1.0, (5,)), space)
    assert isinstance(agent, Agent)
    obs = jnp.ones((4, 5))
    train_state, memory = agent.init(jax.random.key(0), obs)
    policy = jax.jit(agent.policy, static_argnames="eval")
    action, train_state2, memory2 = policy(jax.random.key(1), train_state, obs, memory)
    assert action.shape == (4, *space.shape)
    assert bool(jnp.all(jax.vmap(space.contains)(action)))
    again, _, _ = policy(jax.random.key(1), train_state, obs, memory)
    np.testing.assert_array_equal(action, again)
    greedy, _, _ = policy(jax.random.key(2), train_state, obs, memory, eval=True)
    greedy_other_key, _, _ = policy(jax.random.key(3), train_state, obs, memory, eval=True)
    np.testing.assert_array_equal(greedy, greedy_other_key)
    eval_memory = agent.reset_memory(memory, eval=True)
    if recurrent:
        assert jax.tree.leaves(memory2)[0].shape == (4, 8)
        assert jax.tree.leaves(eval_memory)[0].shape == (3, 8)
        assert not np.allclose(jax.tree.leaves(memory2)[0], 0.0)
    # Many agents at once: vmap over train states.
    states = jax.vmap(lambda k: agent.init(k, obs)[0])(jax.random.split(jax.random.key(4), 3))
    actions = jax.vmap(lambda ts: agent.policy(jax.random.key(5), ts, obs, memory)[0])(states)
    assert actions.shape == (3, 4, *space.shape)


@pytest.fixture(scope="module")
def cartpole_result():
    return train_and_evaluate(PRESETS["ppo"]["CartPole-v1"], num_seeds=3)


def test_ppo_solves_cartpole_for_three_seeds(cartpole_result):
    state, metrics, evaluation = cartpole_result
    returns = np.asarray(evaluation["episode_return"])  # (seeds, episodes)
    assert returns.shape == (3, PRESETS["ppo"]["CartPole-v1"].eval_episodes)
    per_seed = returns.mean(axis=1)
    assert np.all(per_seed >= 475), f"greedy returns per seed: {per_seed}"


def test_ppo_metrics_and_state(cartpole_result):
    state, metrics, _ = cartpole_result
    runner = make_ppo_runner(PRESETS["ppo"]["CartPole-v1"])
    for name in ("episode_return", "loss", "entropy", "value_loss", "clip_fraction"):
        assert metrics[name].shape == (3, runner.num_iterations)
        assert metrics[name].dtype == jnp.float32
        assert np.isfinite(np.asarray(metrics[name])).all()
    np.testing.assert_array_equal(state.iteration, runner.num_iterations)
    # Training improves the running return from the random policy's (about 20).
    assert np.all(np.asarray(metrics["episode_return"])[:, -5:].mean(1) > 200)
    # Every leaf of the runner state is an array (checkpointable, vmappable).
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(state))


def test_hyperparameters_vmap_in_one_compile():
    base = PPOConfig(total_timesteps=2 * 16 * 32, num_steps=32, hidden_sizes=(16,), eval_episodes=2)

    def train(learning_rate, ent_coef, key):
        config = dataclasses.replace(base, learning_rate=learning_rate, ent_coef=ent_coef)
        return make_train(make_ppo_runner(config))(key)

    learning_rates = jnp.array([1e-4, 1e-2])
    ent_coefs = jnp.array([0.0, 0.05])
    keys = jax.random.split(jax.random.key(0), 2)
    state, metrics = jax.jit(jax.vmap(train))(learning_rates, ent_coefs, keys)
    assert metrics["loss"].shape == (2, 2)
    # Same key, different learning rate: the parameters move differently.
    same_key = jnp.stack([keys[0], keys[0]])
    state, _ = jax.jit(jax.vmap(train))(learning_rates, ent_coefs, same_key)
    kernel = jax.tree.leaves(state.train_state.params)[-1]
    assert not np.allclose(kernel[0], kernel[1])


def test_recurrent_ppo_trains_and_evaluates():
    config = PPOConfig(
        total_timesteps=2 * 8 * 32,
        num_envs=8,
        num_steps=32,
        num_minibatches=2,
        recurrent=True,
        cell="lstm",
        rnn_hidden_size=8,
        hidden_sizes=(8,),
        eval_episodes=3,
    )
    state, metrics, evaluation = train_and_evaluate(config, num_seeds=2)
    assert evaluation["episode_return"].shape == (2, 3)
    assert np.isfinite(np.asarray(metrics["loss"])).all()


@pytest.mark.slow
def test_recurrent_ppo_learns_cartpole():
    config = dataclasses.replace(
        PRESETS["ppo"]["CartPole-v1"], recurrent=True, rnn_hidden_size=64, total_timesteps=300_000
    )
    _, _, evaluation = train_and_evaluate(config, num_seeds=2)
    per_seed = np.asarray(evaluation["episode_return"]).mean(1)
    assert np.all(per_seed >= 400), per_seed


def _require(env_id: str) -> None:
    if env_id not in lamella.envs.registered():
        pytest.skip(f"environment {env_id!r} is not registered in lamella.envs yet")


@pytest.mark.slow
def test_continuous_ppo_solves_pendulum():
    _require("Pendulum-v1")
    _, _, evaluation = train_and_evaluate(PRESETS["ppo"]["Pendulum-v1"], num_seeds=3)
    per_seed = np.asarray(evaluation["episode_return"]).mean(1)
    assert np.all(per_seed >= -250), f"greedy returns per seed: {per_seed}"


@pytest.mark.slow
def test_recurrent_ppo_solves_memory_chain_where_feedforward_cannot():
    _require("MemoryChain-bsuite")
    config = PRESETS["ppo"]["MemoryChain-bsuite"]
    _, _, recurrent_eval = train_and_evaluate(config, num_seeds=3)
    _, _, feedforward_eval = train_and_evaluate(dataclasses.replace(config, recurrent=False), num_seeds=3)
    recurrent_returns = np.asarray(recurrent_eval["episode_return"]).mean(1)
    feedforward_returns = np.asarray(feedforward_eval["episode_return"]).mean(1)
    # bsuite MemoryChain pays +1 for the remembered action and -1 otherwise: chance level is 0.
    assert np.all(recurrent_returns >= 0.9), recurrent_returns
    assert np.all(feedforward_returns <= 0.5), feedforward_returns


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"recurrent": True, "cell": "gru"},
        {"recurrent": True, "cell": "lstm", "env_id": "MemoryChain-bsuite"},
    ],
    ids=["feedforward", "gru", "lstm-memorychain"],
)
def test_update_recomputes_the_rollout_distributions_exactly(change):
    """Before the first gradient step the update's log-probs equal the rollout's.

    For recurrent PPO this checks that minibatches start from the right carries and reset at the
    same steps as the rollout did (episodes end inside the rollout on both envs).
    """
    if "env_id" in change:
        _require(change["env_id"])
    config = dataclasses.replace(
        PPOConfig(),
        total_timesteps=2 * 8 * 64,
        num_envs=8,
        num_steps=64,
        num_minibatches=2,
        rnn_hidden_size=16,
        hidden_sizes=(16,),
        **change,
    )
    runner = make_ppo_runner(config)
    state, metrics = jax.jit(make_train(runner))(jax.random.key(3))
    kl = np.asarray(metrics["first_minibatch_kl"])
    np.testing.assert_allclose(kl, 0.0, atol=1e-5)
    assert np.all(np.asarray(metrics["episodes"]) > 0)
