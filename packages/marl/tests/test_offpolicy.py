"""Independent off-policy learners (IDQN, ISAC): the per-agent adapter, bad input, and
``lamella train idqn`` through the driver (per-agent run log, checkpoints, exact resume)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import train
from lamella.agents.config import ConfigError
from lamella.agents.offpolicy import Batch, DQNConfig, make_dqn
from lamella.agents.protocol import Agent
from lamella.envs import spaces
from lamella.marl.offpolicy import (
    IDQNConfig,
    ISACConfig,
    make_idqn_runner,
    make_independent_agent,
    make_isac_runner,
)

LBF = "Foraging-5x5-2p-1f-coop-v3"
N, B, F, A = 3, 4, 5, 6
OBS_SPACE = spaces.Dict(
    {"obs": spaces.Box(-1.0, 1.0, (N, F), np.float32), "action_mask": spaces.Box(0, 1, (N, A), np.bool_)}
)
ACTION_SPACE = spaces.MultiDiscrete(np.full((N,), A))


def recording_learner(config, observation_space, action_space):
    """A single-agent learner that reports what it was given (no network: nothing to compile)."""
    seen = {"observation_space": observation_space, "action_space": action_space}

    def init(key, obs_example=None):
        return {"count": jnp.zeros((), jnp.int32)}, ()

    def policy(key, train_state, obs, memory, eval=False):
        # Each agent's action: the index of its first legal action, plus nothing random.
        action = jnp.argmax(obs["action_mask"], axis=-1).astype(jnp.int32)
        return action, {"count": train_state["count"] + obs["obs"].shape[0]}, memory

    def update(batch, train_state, memory):
        seen["batch"] = batch
        metrics = {"reward": jnp.mean(batch.reward), "discount": jnp.mean(batch.discount)}
        return {"count": train_state["count"] + 1}, memory, metrics

    recording_learner.seen = seen
    return Agent(init, policy, update, lambda memory, eval=False: ())


def multi_agent_batch():
    obs = {
        "obs": jnp.arange(B * N * F, dtype=jnp.float32).reshape(B, N, F),
        "action_mask": jnp.zeros((B, N, A), bool).at[:, :, 2].set(True),
    }
    reward = jnp.tile(jnp.array([1.0, 2.0, 4.0]), (B, 1))
    discount = jnp.full((B, N), 0.9)
    return Batch(obs, jnp.zeros((B, N), jnp.int32), reward, discount, obs, jax.random.key(0))


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("team", [True, False])
def test_independent_agent_folds_or_stacks_agents_with_ids_and_team_reward(share, team):
    agent = make_independent_agent(
        recording_learner, None, OBS_SPACE, ACTION_SPACE, num_agents=N, share_parameters=share,
        agent_id=True, team_reward=team,
    )  # fmt: skip
    seen = recording_learner.seen
    # One agent's spaces: its features plus a one-hot id of N, its own mask, Discrete(A).
    assert seen["observation_space"]["obs"].shape == (F + N,)
    assert seen["observation_space"]["action_mask"].shape == (A,)
    assert isinstance(seen["action_space"], spaces.Discrete) and seen["action_space"].n == A
    state, memory = agent.init(jax.random.key(0))
    assert state["count"].shape == (() if share else (N,))  # one learner, or one per agent
    batch = multi_agent_batch()
    action, state, _ = agent.policy(jax.random.key(1), state, batch.obs, memory)
    assert action.shape == (B, N) and np.all(np.asarray(action) == 2)
    # Shared: one learner acted B * N agent steps; stacked: each agent's learner B.
    np.testing.assert_array_equal(state["count"], B * N if share else np.full(N, B))
    state, _, metrics = agent.update(batch, state, memory)
    given = seen["batch"]
    expected_reward = 7.0 if team else np.mean([1.0, 2.0, 4.0])
    np.testing.assert_allclose(metrics["reward"], expected_reward)
    np.testing.assert_allclose(metrics["discount"], 0.9)
    if not share:
        assert given.obs["obs"].shape == (B, F + N)  # the vmapped learner sees one agent's batch
        np.testing.assert_array_equal(state["count"], np.full(N, B + 1))  # every agent's learner updated
        return
    x = np.asarray(given.obs["obs"])
    assert x.shape == (B * N, F + N)  # agents folded into the batch
    ids = x[:, F:].reshape(B, N, N)
    features = x[:, :F].reshape(B, N, F)
    np.testing.assert_array_equal(ids, np.broadcast_to(np.eye(N), (B, N, N)))
    np.testing.assert_array_equal(features, np.asarray(batch.obs["obs"]))
    assert given.obs["action_mask"].shape == (B * N, A)


def test_unshared_dqn_keeps_one_network_per_agent_and_honours_masks():
    agent = make_independent_agent(
        make_dqn, DQNConfig(hidden_sizes=(8,)), OBS_SPACE, ACTION_SPACE, num_agents=N,
        share_parameters=False, agent_id=False,
    )  # fmt: skip
    state, memory = agent.init(jax.random.key(0))
    kernels = [leaf for leaf in jax.tree.leaves(state.params) if leaf.ndim == 3]
    assert {k.shape for k in kernels} == {(N, F, 8), (N, 8, A)}
    assert not np.allclose(kernels[0][0], kernels[0][1])  # independently initialised
    batch = multi_agent_batch()
    for eval_ in (True, False):
        action, _, _ = agent.policy(jax.random.key(1), state, batch.obs, memory, eval=eval_)
        assert np.all(np.asarray(action) == 2)  # the only legal action
    new_state, _, metrics = jax.jit(agent.update)(batch, state, memory)
    assert int(new_state.updates[0]) == 1 and np.isfinite(float(metrics["loss"]))


@pytest.mark.parametrize(
    ("make", "config", "words"),
    [
        (make_idqn_runner, IDQNConfig(env_id="CartPole-v1"), ["single agent"]),
        (make_idqn_runner, IDQNConfig(env_id="MPE-simple_spread-v3", env_kwargs=("continuous_actions=true",)),
         ["discrete actions", "isac"]),
        (make_isac_runner, ISACConfig(env_id=LBF, env_kwargs=()), ["continuous actions", "idqn"]),
        # ISAC's default env_kwargs (MPE's continuous_actions=true) on an env without that switch.
        (make_isac_runner, ISACConfig(env_id=LBF), ["continuous actions", "discrete", "no continuous_actions switch", "idqn"]),
        (make_idqn_runner, IDQNConfig(n_step=3), ["n_step=1"]),
        (make_idqn_runner, IDQNConfig(num_envs=0), ["num_envs"]),
        (make_isac_runner, ISACConfig(env_id="IteratedPrisonersDilemma-v0", team_reward=True, env_kwargs=()),
         ["team_reward"]),
    ],
)  # fmt: skip
def test_bad_input_is_a_user_error_before_anything_compiles(make, config, words):
    with pytest.raises(ConfigError) as error:
        make(config)
    assert all(word in str(error.value) for word in words), str(error.value)


TINY = [
    "total_timesteps=480", "rollout_steps=20", "num_envs=4", "learning_starts=80", "batch_size=16",
    "buffer_size=400", "hidden_sizes=16", "exploration_steps=200", "eval_max_steps=20",
]  # fmt: skip


@pytest.fixture(scope="module")
def idqn_runs(tmp_path_factory):
    """``lamella train idqn`` on LBF: whole, and stopped after two chunks then resumed."""
    base = tmp_path_factory.mktemp("idqn")
    common = ["idqn", "--env", LBF, "--seeds", "2", "--no-progress", "--no-plot", "--eval-episodes", "2",
              "--chunk-iterations", "2", *TINY]  # fmt: skip
    assert train.main([*common, "--out-dir", str(base / "whole")]) == 0
    assert train.main([*common, "--out-dir", str(base / "part"), "--max-chunks", "2"]) == 0
    assert train.main([*common, "--resume", str(base / "part")]) == 0
    return base


def test_lamella_train_idqn_logs_team_and_per_agent_metrics(idqn_runs):
    runs = json.loads((idqn_runs / "whole" / "metrics.json").read_text())["multi_agent"][LBF]["idqn"]
    assert sorted(runs) == ["seed_0", "seed_1"]
    last = runs["seed_0"]["step_3"]
    assert last["step_count"] == 480
    for key in ("mean_episode_return", "return_agent_0", "return_agent_1", "train_episode_return",
                "train_return_agent_1", "train_loss", "train_epsilon"):  # fmt: skip
        assert key in last, sorted(last)
    np.testing.assert_allclose(
        np.add(last["return_agent_0"], last["return_agent_1"]), last["mean_episode_return"], rtol=1e-5
    )
    assert min(last["train_loss"]) > 0  # updates ran


def test_lamella_train_idqn_resumes_exactly(idqn_runs):
    for name in ("metrics.json", "metrics.csv"):
        whole = (idqn_runs / "whole" / name).read_bytes()
        assert whole == (idqn_runs / "part" / name).read_bytes(), name


def test_unshared_isac_keeps_one_actor_and_critic_ensemble_per_agent():
    # Shapes only (jax.eval_shape: nothing compiles); ISAC's training runs in the learning test.
    runner = make_isac_runner(ISACConfig(hidden_sizes=(8,), share_parameters=False, batch_size=16))
    state = jax.eval_shape(runner.init, jax.random.key(0))
    train_state = state.train_state
    for params in (train_state.actor_params, train_state.critic_params, train_state.target_critic_params):
        assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(params))  # the agent axis
    kernels = {leaf.shape for leaf in jax.tree.leaves(train_state.actor_params) if leaf.ndim == 3}
    assert kernels == {(2, 11 + 2, 8), (2, 8, 5)}  # obs 11 + agent id 2 -> 8 -> mean / log_std of 5
    assert state.buffer_state.trajectory.experience.action.shape[-2:] == (2, 5)
    assert state.buffer_state.trajectory.experience.reward.shape[-1] == 2  # one reward per agent
    assert dict(runner.metric_axes) == {"return": ("agent",)}


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_isac_on_a_single_agent_env_names_the_single_agent(env_id):
    # Before, Pendulum-v1 was refused for ISAC's default env_kwargs and CartPole-v1 pointed to idqn,
    # which refuses a single-agent env in turn.
    with pytest.raises(ConfigError, match=rf"isac trains multi-agent envs .*{env_id} has a single agent"):
        make_isac_runner(ISACConfig(env_id=env_id))
