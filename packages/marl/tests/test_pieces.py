"""IPPO/MAPPO's own pieces: masks, per-agent networks, the dict observation, bad input, the driver.

Learning is checked in ``test_learning.py``; this file compiles only small things (one driver
run of a tiny config, shared by the run-log and resume checks).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.config import ConfigError
from lamella.agents.driver import run_experiment
from lamella.envs import EnvInputError, spaces, struct, wrappers
from lamella.envs.environment import Environment
from lamella.marl import (
    IDQNConfig,
    IPPOConfig,
    MAPPOConfig,
    MultiAgentActorCriticNet,
    MultiAgentObservation,
    RecMAPPOConfig,
    make_idqn_runner,
    make_ippo_runner,
    make_mappo_runner,
    make_rec_ippo_runner,
    masked_categorical,
)
from lamella.marl.rec_iql import RecIQLConfig, make_rec_iql_runner
from lamella.marl.shaping import MetaConfig, ShapingConfig, make_meta_runner, make_shaping_runner

LBF = "Foraging-5x5-2p-1f-coop-v3"


def test_masked_categorical_samples_scores_and_entropy_only_legal_actions():
    logits = jnp.zeros((2, 4))
    mask = jnp.array([[True, False, True, False], [True, True, True, True]])
    dist = masked_categorical(logits, mask)
    # Uniform over the legal actions: log 1/2 for row 0 (two legal), log 1/4 for row 1.
    np.testing.assert_allclose(dist.log_prob(jnp.array([2, 3])), np.log([0.5, 0.25]), rtol=1e-6)
    np.testing.assert_allclose(dist.entropy(), np.log([2.0, 4.0]), rtol=1e-6)
    assert float(dist.log_prob(jnp.array([1, 0]))[0]) < -1e8  # an illegal action: probability 0
    samples = jax.vmap(lambda k: dist.sample(k))(jax.random.split(jax.random.key(0), 2000))
    row0 = np.asarray(samples[:, 0])
    assert set(np.unique(row0)) == {0, 2}  # never 1 or 3
    assert abs(np.mean(row0 == 0) - 0.5) < 0.05
    assert set(np.unique(np.asarray(samples[:, 1]))) == {0, 1, 2, 3}
    # The mode of a masked row is legal even where an illegal logit is the largest.
    big = masked_categorical(jnp.array([[5.0, 9.0, 1.0, 0.0]]), mask[:1])
    assert int(big.mode()[0]) == 0


def test_masked_categorical_refuses_a_mask_it_would_misread():
    logits = jnp.zeros((4, 4))
    # One flag per row broadcast over the actions: it masked action i of every row instead.
    with pytest.raises(ValueError, match=r"mask has shape \(4,\) but logits \(4, 4\).*one bool per action"):
        masked_categorical(logits, jnp.array([True, False, True, True]))
    # An additive mask (0 legal, -inf illegal) made every action legal.
    additive = jnp.where(jnp.eye(4, dtype=bool), 0.0, -jnp.inf)
    with pytest.raises(TypeError, match=r"mask must be bool .*got float32.*`mask == 0`"):
        jax.jit(masked_categorical)(logits, additive)


def _obs(num_envs: int, n: int, size: int, num_actions: int, state_size: int = 0) -> dict:
    key = jax.random.key(3)
    out = {
        "obs": jax.random.normal(key, (num_envs, n, size)),
        "action_mask": jnp.ones((num_envs, n, num_actions), bool),
    }
    if state_size:
        out["global_state"] = jax.random.normal(jax.random.key(4), (num_envs, state_size))
    return out


@pytest.mark.parametrize("share", [True, False])
def test_network_shares_parameters_or_keeps_one_set_per_agent(share):
    n, size, num_actions = 3, 5, 4
    net = MultiAgentActorCriticNet(n, num_actions, hidden_sizes=(8,), share_parameters=share, agent_id=False)
    obs = _obs(2, n, size, num_actions)
    params = net.init(jax.random.key(0), obs)
    kernels = [
        x for path, x in jax.tree_util.tree_leaves_with_path(params) if "kernel" in jax.tree_util.keystr(path)
    ]
    if share:
        assert all(k.ndim == 2 for k in kernels)
    else:
        assert all(k.ndim == 3 and k.shape[0] == n for k in kernels)  # a leading agent axis
    dist, value = net.apply(params, obs)
    assert dist.logits.shape == (2, n, num_actions) and value.shape == (2, n)
    np.testing.assert_allclose(net.apply(params, obs, method=net.value), value, rtol=1e-6)
    # The same observation for every agent: a shared network without ids answers identically
    # for each agent, separate networks do not.
    same = {**obs, "obs": jnp.broadcast_to(obs["obs"][:, :1], obs["obs"].shape)}
    _, value_same = net.apply(params, same)
    spread = float(jnp.max(jnp.abs(value_same - value_same[:, :1])))
    assert (spread < 1e-6) if share else (spread > 1e-4)


def test_agent_ids_and_centralised_critic():
    n, size, num_actions, state_size = 2, 5, 4, 7
    obs = _obs(2, n, size, num_actions, state_size)
    same = {**obs, "obs": jnp.broadcast_to(obs["obs"][:, :1], obs["obs"].shape)}
    with_ids = MultiAgentActorCriticNet(n, num_actions, hidden_sizes=(8,), agent_id=True)
    params = with_ids.init(jax.random.key(0), same)
    dist, _ = with_ids.apply(params, same)
    # One shared network, identical observations: the one-hot id alone makes the agents differ.
    assert float(jnp.max(jnp.abs(dist.logits[:, 0] - dist.logits[:, 1]))) > 1e-6
    central = MultiAgentActorCriticNet(
        n, num_actions, hidden_sizes=(8,), agent_id=False, centralised_critic=True
    )
    params = central.init(jax.random.key(0), obs)
    _, value = central.apply(params, obs)
    # The critic reads only the global state: changing the agents' observations leaves it.
    _, value_other = central.apply(params, {**obs, "obs": obs["obs"] + 1.0})
    np.testing.assert_allclose(value, value_other, rtol=1e-6)
    _, value_state = central.apply(params, {**obs, "global_state": obs["global_state"] + 1.0})
    assert float(jnp.max(jnp.abs(value - value_state))) > 1e-4


def test_observation_carries_the_mask_and_the_final_global_state_at_episode_ends():
    env, params = lamella.envs.make(LBF, autoreset=False, max_episode_steps=3)
    env = wrappers.AutoReset(MultiAgentObservation(env, global_state=True))
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs["action_mask"], env.env.env.action_mask(state, params))
    np.testing.assert_array_equal(obs["global_state"], env.env.env.global_state(state, params))
    action = jnp.zeros((2,), jnp.int32)  # NONE: nothing is eaten, the episode is truncated at step 3
    for _ in range(3):
        previous = state
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, action, params)
    assert bool(truncated.all()) and not bool(terminated.any())
    final = info["final_observation"]
    # Nobody moved: the final global state is the last state's, the returned one the new episode's.
    np.testing.assert_array_equal(final["global_state"], env.env.env.global_state(previous, params))
    np.testing.assert_array_equal(obs["global_state"], env.env.env.global_state(state, params))
    np.testing.assert_array_equal(obs["action_mask"], env.env.env.action_mask(state, params))


@pytest.mark.parametrize(
    ("make", "config", "words"),
    [
        (make_ippo_runner, IPPOConfig(env_id="CartPole-v1"), ["ippo", "CartPole-v1", "single agent", "ppo"]),
        (make_mappo_runner, MAPPOConfig(env_id="CartPole-v1"), ["mappo", "single agent"]),
        (
            make_mappo_runner,
            MAPPOConfig(env_id="IteratedPrisonersDilemma-v0"),
            ["global_state", "IteratedPrisonersDilemma-v0", "Use ippo"],
        ),
        (make_ippo_runner, IPPOConfig(env_id="Foraging-9x9-nope"), ["Unknown environment id"]),
        (make_ippo_runner, IPPOConfig(env_id=LBF, num_minibatches=3), ["num_minibatches"]),
        # A Python user's values of the wrong type (the command line parses them): one line each.
        (
            make_ippo_runner,
            IPPOConfig(env_id="MPE-simple_spread-v3", env_kwargs={"continuous_actions": True}),  # type: ignore[arg-type]
            ["IPPOConfig.env_kwargs must be a tuple", "env_kwargs=('continuous_actions=true',)"],
        ),
        (
            make_ippo_runner,
            IPPOConfig(env_id=LBF, hidden_sizes=(64, 0)),
            ["hidden_sizes must hold sizes >= 1"],
        ),
        (
            make_mappo_runner,
            MAPPOConfig(env_id=LBF, num_envs=16.0),
            ["MAPPOConfig.num_envs must be an int", "Write 16."],
        ),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_a_user_error_at_construction(make, config, words):
    with pytest.raises(ConfigError) as raised:
        make(config)
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize(
    ("make", "config", "where"),
    [
        (make_ippo_runner, IPPOConfig(env_id=LBF), "make_ippo_runner"),
        (make_idqn_runner, IDQNConfig(env_id=LBF), "make_idqn_runner"),
        (make_shaping_runner, ShapingConfig(), "make_shaping_runner"),
        (make_meta_runner, MetaConfig(), "make_meta_runner"),
    ],
    ids=["ippo", "idqn", "shaping", "meta"],
)
def test_a_runner_given_what_is_not_an_env_object_names_the_fix(make, config, where):
    with pytest.raises(lamella.envs.EnvInputError) as raised:
        make(config, env=config.env_id)
    assert str(raised.value).startswith(f"{where}: env must be an env object, got the id {config.env_id!r}.")
    with pytest.raises(lamella.envs.EnvInputError, match=f"^{where}: env got a pair .* Unpack it"):
        make(config, env=lamella.envs.make(config.env_id, autoreset=False))


@pytest.mark.parametrize(
    ("make", "config", "message"),
    [
        (
            "lamella.marl:make_ippo_runner",
            "ippo",
            r"^make_ippo_runner: config must be an IPPOConfig, got the str 'ippo'\. Build one: IPPOConfig\(\.\.\.\), or a preset: lamella\.agents\.config\.resolve_config\('ippo', env_id\)",
        ),
        (
            "lamella.marl:make_mappo_runner",
            {"num_envs": 4},
            r"^make_mappo_runner: config must be an IPPOConfig, got dict\. That is a dict: build IPPOConfig\(\*\*settings\)",
        ),
        (
            "lamella.marl:make_rec_ippo_runner",
            "rec_ippo",
            r"^make_rec_ippo_runner: config must be an IPPOConfig",
        ),
        (
            "lamella.marl:make_rec_mappo_runner",
            "rec_mappo",
            r"^make_rec_mappo_runner: config must be an IPPOConfig",
        ),
        (
            "lamella.marl.ppo:make_multi_agent_ppo_runner",
            "ippo",
            r"^make_multi_agent_ppo_runner: config must be an IPPOConfig",
        ),
        (
            "lamella.marl:make_idqn_runner",
            IPPOConfig(),
            r"^make_idqn_runner: config must be an IDQNConfig, got IPPOConfig\.",
        ),
        (
            "lamella.marl:make_isac_runner",
            IDQNConfig(),
            r"^make_isac_runner: config must be an ISACConfig, got IDQNConfig\.",
        ),
        (
            "lamella.marl.rec_iql:make_rec_iql_runner",
            "rec_iql",
            r"^make_rec_iql_runner: config must be a RecIQLConfig",
        ),
        (
            "lamella.marl.host:train_host",
            "ippo",
            r"^train_host: config must be an IPPOConfig, got the str 'ippo'",
        ),
        (
            "lamella.marl.shaping:make_shaping_runner",
            "shaping",
            r"^make_shaping_runner: config must be a ShapingConfig",
        ),
        (
            "lamella.marl.shaping:make_meta_runner",
            ShapingConfig(),
            r"^make_meta_runner: config must be a MetaConfig, got ShapingConfig\..*resolve_config\('meta_es'",
        ),
        (
            "lamella.marl.shaping.dice:make_dice_runner",
            "lola",
            r"^make_dice_runner: config must be a DiceConfig.*resolve_config\('lola'",
        ),
        (
            "lamella.marl.shaping.evolution:make_meta_es_runner",
            "mfos_es",
            r"^make_meta_es_runner: config must be a MetaESConfig.*resolve_config\('mfos_es'",
        ),
        (
            "lamella.marl.shaping.mfos:make_mfos_runner",
            "lamella.marl.shaping.presets:PRESETS",
            r"^make_mfos_runner: config must be an MFOSConfig, got dict\. That is a dict of configs \(presets\?\): pick one by its key \('shaping', 'mfos_es', 'mfos_rl', \.\.\.\)",
        ),
    ],
    ids=lambda value: value.split(":")[-1] if isinstance(value, str) and ":" in value else None,
)
def test_a_runner_given_a_name_a_dict_or_another_config_names_the_fix(make, config, message):
    """Before: ``'str' object has no attribute 'validate'`` (or ``'dict' ...``) from inside."""

    def load(spec):
        module, name = spec.split(":")
        return getattr(importlib.import_module(module), name)

    if isinstance(config, str) and ":" in config:
        config = load(config)
    factory = load(make)
    with pytest.raises(ConfigError, match=message):
        factory(config, lambda: None) if make.endswith("train_host") else factory(config)


def test_a_multi_agent_runner_given_a_pettingzoo_env_points_to_the_host_loop():
    from mpe2 import simple_spread_v3

    with pytest.raises(lamella.envs.EnvInputError) as raised:
        make_ippo_runner(IPPOConfig(), env=simple_spread_v3.parallel_env())
    assert "env is a pettingzoo env" in str(raised.value), str(raised.value)
    assert str(raised.value).endswith("To train on it, use lamella.marl.host.train_host(config, make_env).")


def test_ippo_works_on_an_env_without_global_state():
    runner = make_ippo_runner(
        IPPOConfig(env_id="IteratedPrisonersDilemma-v0", total_timesteps=2048, team_reward=False)
    )
    state = jax.eval_shape(runner.init, jax.random.key(0))
    assert state.obs["action_mask"].shape == (16, 2, 2)  # all-True masks for an env without rules
    assert "global_state" not in state.obs


@struct.dataclass
class _UnevenParams:
    max_steps_in_episode: int = 4


@struct.dataclass
class _UnevenState:
    time: jax.Array


class _Uneven(Environment):
    """Two agents, agent 0 with 2 actions and agent 1 with 4 (``MultiDiscrete([2, 4])``), no
    ``action_mask``; each agent's observation has shape ``obs_shape``, the global state
    ``state_shape``. Both agents' reward is -1 when agent 0 takes an action it does not have."""

    num_agents = 2

    def __init__(self, obs_shape=(3,), state_shape=(4,)):
        self.obs_shape, self.state_shape = tuple(obs_shape), tuple(state_shape)

    @property
    def default_params(self):
        return _UnevenParams()

    def reset_env(self, key, params):
        return jnp.ones((2, *self.obs_shape)), _UnevenState(jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        time = state.time + 1
        reward = jnp.where(action[0] >= 2, -1.0, 0.0) * jnp.ones((2,))
        done = jnp.full((2,), time >= params.max_steps_in_episode)
        return jnp.ones((2, *self.obs_shape)), _UnevenState(time), reward, jnp.zeros((2,), bool), done, {}

    def observation_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (2, *self.obs_shape), jnp.float32)

    def action_space(self, params=None):
        return spaces.MultiDiscrete([2, 4])

    def global_state(self, state, params):
        return jnp.ones(self.state_shape)

    def global_state_space(self, params=None):
        return spaces.Box(-1.0, 1.0, self.state_shape, jnp.float32)


def test_agents_with_fewer_actions_get_the_extra_ones_masked_out():
    """Before: an env without ``action_mask`` got an all-True mask as wide as the largest agent's
    action count, so agent 0 of ``MultiDiscrete([2, 4])`` acted 2 and 3, actions it does not have
    (IPPO, MAPPO, IDQN and rec_iql alike; the host loop already masked them)."""
    env = _Uneven()
    obs, _ = MultiAgentObservation(env).reset(jax.random.key(0), env.default_params)
    np.testing.assert_array_equal(obs["action_mask"], [[True, True, False, False], [True, True, True, True]])
    runner = make_ippo_runner(
        IPPOConfig(total_timesteps=64, num_envs=2, num_steps=32, hidden_sizes=(8,), team_reward=False),
        env=env,
    )
    _, metrics = jax.jit(runner.step)(runner.init(jax.random.key(0)))
    np.testing.assert_array_equal(metrics["reward"], [0.0, 0.0])  # agent 0 never took action 2 or 3


class _OneMaskForAll(_Uneven):
    """``action_mask`` gives one row for both agents, ``(4,)``, not ``(2, 4)``."""

    def action_mask(self, state, params):
        return jnp.ones((4,), bool)


@pytest.mark.parametrize(
    ("make", "config"),
    [
        (make_ippo_runner, IPPOConfig(num_envs=2, num_steps=32, total_timesteps=64)),
        (make_idqn_runner, IDQNConfig(num_envs=2, rollout_steps=8, total_timesteps=64, learning_starts=16)),
    ],
    ids=["ippo", "idqn"],
)
def test_an_action_mask_of_the_wrong_shape_is_refused_naming_the_shape(make, config):
    """Before: IDQN failed inside with "Incompatible shapes for broadcasting", IPPO in the network."""
    config = dataclasses.replace(config, hidden_sizes=(8,), team_reward=False)
    with pytest.raises(EnvInputError, match=r"_OneMaskForAll's action mask has shape \(4,\).*\(2, 4\)"):
        jax.eval_shape(make(config, env=_OneMaskForAll()).init, jax.random.key(0))


@pytest.mark.parametrize(
    ("make", "config"),
    [
        (make_ippo_runner, IPPOConfig(num_envs=2, num_steps=32, total_timesteps=64)),
        (make_mappo_runner, MAPPOConfig(num_envs=2, num_steps=32, total_timesteps=64)),
        (make_idqn_runner, IDQNConfig(num_envs=2, rollout_steps=8, total_timesteps=64, learning_starts=16)),
        (make_rec_iql_runner, RecIQLConfig(num_envs=2, total_timesteps=64, sample_sequence_length=4)),
    ],
    ids=["ippo", "mappo", "idqn", "rec_iql"],
)
def test_a_dict_observation_is_one_row_per_agent(make, config):
    """Before: IPD-in-the-Matrix's dict observation (inventory (2, 6), view (2, 5, 5, 10)) failed
    inside (``float() argument must be ... not 'dict'``, ``'Dict' object has no attribute 'low'``);
    now each agent's entries are flattened as the shaping runners flatten them (6 + 250 values)."""
    config = dataclasses.replace(config, env_id="IPDInTheMatrix-v0", team_reward=False, hidden_sizes=(8,))
    state = jax.eval_shape(make(config).init, jax.random.key(0))
    assert state.obs["obs"].shape == (2, 2, 256)


def test_an_observation_without_the_agent_axis_is_refused():
    class SharedObservation(_Uneven):
        def observation_space(self, params=None):
            return spaces.Box(-1.0, 1.0, (3,), jnp.float32)

    with pytest.raises(
        ConfigError,
        match=r"ippo takes each agent's observation as a Box with the agent axis first, \(num_agents, \.\.\.\) = \(2, \.\.\.\).*observes Box",
    ):
        make_ippo_runner(IPPOConfig(), env=SharedObservation())


@pytest.mark.parametrize(("obs_shape", "size"), [((5, 5, 3), 75), ((), 1)], ids=["image", "scalar"])
def test_observations_of_any_shape_per_agent_are_flattened(obs_shape, size):
    """Before: an agent observation of another rank than 1 (an image ``(n, H, W, C)``, a number
    ``(n,)``) failed inside the network ("Incompatible types for broadcasting"), and a global state
    of rank 2 was misread; IDQN and the host loop already flattened them."""
    env = _Uneven(obs_shape, state_shape=(2, 3))
    observed = MultiAgentObservation(env, global_state=True)
    space = observed.observation_space(env.default_params)
    assert space["obs"].shape == (2, size) and space["global_state"].shape == (6,)
    config = MAPPOConfig(total_timesteps=64, num_envs=2, num_steps=32, hidden_sizes=(8,), team_reward=False)
    runner = make_mappo_runner(config, env=env)
    state = jax.eval_shape(runner.init, jax.random.key(0))
    assert state.obs["obs"].shape == (2, 2, size) and state.obs["global_state"].shape == (2, 6)
    jax.eval_shape(runner.step, state)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "ippo", "--env", "CartPole-v1"], ["single agent", "lamella train ppo"]),
        (["train", "mappo", "--env", "IteratedPrisonersDilemma-v0"], ["global_state", "Use ippo"]),
    ],
)
def test_command_line_bad_input_exits_2_with_one_line(tmp_path, argv, words):
    result = subprocess.run(
        [sys.executable, "-m", "lamella.envs.cli", *argv, "--out-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=300,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and all(word in errors[0] for word in words), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.fixture(scope="module")
def driver_run(tmp_path_factory):
    """A tiny IPPO run through the driver, stopped after one chunk, then resumed to the end."""
    out = tmp_path_factory.mktemp("ippo") / "run"
    config = IPPOConfig(
        env_id=LBF, total_timesteps=4 * 16 * 32, num_steps=32, hidden_sizes=(16,), eval_episodes=4
    )
    first = run_experiment(
        config, seeds=2, out_dir=out, chunk_iterations=2, max_chunks=1, progress=False, plot=False
    )
    second = run_experiment(
        config, seeds=2, out_dir=out, chunk_iterations=2, resume=True, progress=False, plot=False
    )
    return first, second, out


def test_driver_logs_team_and_per_agent_metrics(driver_run):
    first, second, out = driver_run
    assert not first.finished and second.finished
    log = json.loads((out / "metrics.json").read_text())
    runs = log["multi_agent"][LBF]["ippo"]
    assert sorted(runs) == ["seed_0", "seed_1"]
    last = runs["seed_0"]["step_2"]
    for key in (
        "mean_episode_return",  # the team's return (sum over agents), one per evaluation episode
        "return_agent_0",
        "return_agent_1",  # each agent's own return
        "train_episode_return",
        "train_return_agent_0",
        "train_reward_agent_1",
        "train_policy_loss",
    ):
        assert key in last, sorted(last)
    assert len(last["mean_episode_return"]) == 4 and len(last["return_agent_1"]) == 4
    # The team return of an episode is the sum of the agents' returns.
    np.testing.assert_allclose(
        np.add(last["return_agent_0"], last["return_agent_1"]), last["mean_episode_return"], rtol=1e-5
    )
    assert last["step_count"] == 4 * 16 * 32
    # config.json and every checkpoint name the version of the package that declares ippo.
    from importlib.metadata import version

    from lamella.agents import checkpoint as ckpt

    config = json.loads((out / "config.json").read_text())
    meta = ckpt.read_metadata(ckpt.latest_checkpoint(out / "checkpoints"))
    for versions in (config["versions"], meta["versions"]):
        assert versions["lamella-marl"] == version("lamella-marl"), versions
        assert versions["lamella-buffers"] == version("lamella-buffers"), versions


def test_resume_matches_a_run_that_never_stopped(driver_run, tmp_path):
    _, resumed, out = driver_run
    config = IPPOConfig(
        env_id=LBF, total_timesteps=4 * 16 * 32, num_steps=32, hidden_sizes=(16,), eval_episodes=4
    )
    whole = run_experiment(
        config, seeds=2, out_dir=tmp_path / "whole", chunk_iterations=2, progress=False, plot=False
    )
    for a, b in zip(
        jax.tree.leaves(resumed.state.train_state), jax.tree.leaves(whole.state.train_state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (out / "metrics.json").read_text() == (tmp_path / "whole" / "metrics.json").read_text()


@pytest.mark.parametrize("make_runner", [make_ippo_runner, make_rec_ippo_runner])
def test_ippo_runners_give_a_mappo_config_independent_critics(make_runner) -> None:
    # A MAPPOConfig derives from IPPOConfig; the IPPO runners used to build MAPPO from it, and on an
    # env without a global state refused it with "Use ippo", the runner that was called.
    config_class = RecMAPPOConfig if make_runner is make_rec_ippo_runner else MAPPOConfig
    config = config_class(env_id="IteratedPrisonersDilemma-v0", team_reward=False, num_envs=4, num_steps=8)
    runner = make_runner(config)
    assert runner.init is not None
