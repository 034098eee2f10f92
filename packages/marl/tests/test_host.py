"""IPPO and MAPPO on PettingZoo parallel envs through the host loop (``lamella.marl.host``), on
mpe2's numpy MPE (a real non-JAX PettingZoo env). The recurrent runners' host-loop checks are in
``test_host_recurrent.py``.

Learning check: ``simple_speaker_listener_v4`` with discrete actions (speaker obs 3, listener obs
11, padded to 11; 25-step episodes that end by truncation; MAPPO's critic reads ``env.state()``,
the 14 values of both observations). Two seeds (0 and 1) per algorithm, each 8,192 env steps on 8
envs (16 PPO updates of 512 env steps), then 32 sampled evaluation episodes. The random baseline
is measured here on the same batch (uniform actions, 64 episodes; about -47 per agent).
Threshold: every seed's per-agent return >= -35 and >= random + 10 (measured when written: IPPO
-22.6, -26.0; MAPPO -25.0, -25.6). The update's first minibatch recomputes exactly the
distributions the host loop acted with (``first_minibatch_kl`` 0): the stored dict observations,
global state included, are the ones the policy saw.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from gymnasium import spaces
from mpe2 import (
    simple_adversary_v3,
    simple_speaker_listener_v4,
    simple_tag_v3,
    simple_v3,
)  # test dependencies
from pettingzoo.utils.env import ParallelEnv

from lamella.agents.config import ConfigError
from lamella.marl import IPPOConfig, MAPPOConfig, RecIPPOConfig
from lamella.marl.host import ParallelEnvBatch, train_host, train_ippo_host


def speaker_listener():
    return simple_speaker_listener_v4.parallel_env(continuous_actions=False)


CONFIG = IPPOConfig(
    env_id="mpe2-simple_speaker_listener_v4",
    total_timesteps=8192,
    num_envs=8,
    num_steps=64,
    num_minibatches=2,
    hidden_sizes=(64, 64),
    learning_rate=3e-3,
    eval_episodes=32,
    team_reward=False,  # both agents already get the shared reward
)


def random_agent_return(episodes: int = 64) -> float:
    batch = ParallelEnvBatch([speaker_listener() for _ in range(episodes)])
    batch.reset(123)
    rng = np.random.default_rng(0)
    returns, finished = np.zeros((episodes, batch.num_agents)), np.zeros(episodes, bool)
    while not finished.all():
        action = rng.integers(0, batch.agent_actions[None, :], size=(episodes, batch.num_agents))
        _, reward, _, _, _, done = batch.step(action)
        returns += np.where(finished[:, None], 0.0, reward)
        finished |= done
    return float(returns.mean())


def test_the_batch_pads_observations_masks_padded_actions_and_keeps_final_observations():
    batch = ParallelEnvBatch([speaker_listener() for _ in range(2)])
    assert batch.agents == ["speaker_0", "listener_0"] and batch.obs_size == 11
    assert batch.agent_actions.tolist() == [3, 5] and batch.num_actions == 5
    obs = batch.reset(0)
    assert obs["obs"].shape == (2, 2, 11) and obs["action_mask"].shape == (2, 2, 5)
    assert obs["obs"][:, 0, 3:].max() == 0.0  # the speaker's 3 features, then padding
    assert obs["action_mask"][:, 0].tolist() == [[True] * 3 + [False] * 2] * 2  # 3 speaker actions
    for t in range(25):  # max_cycles = 25: the episode is truncated at step 25
        before = obs
        obs, reward, terminated, truncated, final, done = batch.step(
            np.array([[0, 1], [2, 3]])
        )  # the listeners move
        assert reward.shape == (2, 2) and not terminated.any()
        assert done.tolist() == [t == 24] * 2 and truncated.all() == (t == 24)
    # The final observation continues the old episode; the returned one starts a new episode.
    assert not np.array_equal(final["obs"], obs["obs"])
    assert not np.array_equal(final["obs"], before["obs"])


def test_the_batch_adds_each_envs_global_state_and_keeps_the_final_one():
    """MAPPO's input: ``env.state()`` (mpe2: both agents' observations, unpadded) after every reset
    and step; where an episode ended, the final observation holds the state before the reset."""
    batch = ParallelEnvBatch([speaker_listener() for _ in range(2)], global_state=True)
    unpadded = lambda o: np.concatenate([o["obs"][:, 0, :3], o["obs"][:, 1, :11]], axis=-1)  # noqa: E731
    obs = batch.reset(0)
    assert obs["global_state"].shape == (2, 14) and obs["global_state"].dtype == np.float32
    np.testing.assert_array_equal(obs["global_state"], unpadded(obs))
    for _ in range(25):
        obs, _, _, _, final, done = batch.step(np.array([[0, 1], [2, 3]]))
        np.testing.assert_array_equal(final["global_state"], unpadded(final))
        np.testing.assert_array_equal(obs["global_state"], unpadded(obs))
    assert done.all() and not np.array_equal(final["global_state"], obs["global_state"])


@pytest.fixture(scope="module")
def random_return():
    return random_agent_return()


@pytest.mark.parametrize("config_class", [IPPOConfig, MAPPOConfig], ids=["ippo", "mappo"])
def test_host_loop_learns_speaker_listener_for_two_seeds(config_class, random_return, tmp_path):
    assert -60 < random_return < -40, random_return
    config = config_class(**{f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)})
    scores = []
    for seed in (0, 1):
        result = train_host(
            config,
            speaker_listener,
            seed=seed,
            eval_every=config.total_timesteps,
            out_dir=tmp_path / f"s{seed}",
        )
        assert result.env_steps == 8192 and result.eval_steps == [8192]
        # The update recomputes the distributions the loop acted with (feed-forward: exactly).
        assert max(abs(m["first_minibatch_kl"]) for m in result.train_metrics) < 1e-6
        assert len(result.train_metrics) == 16
        scores.append(float(np.mean(result.eval_agent_returns[-1])))
    print(
        f"host {config.algorithm} speaker-listener: per-agent return per seed {scores}, random {random_return:.1f}"
    )
    assert min(scores) >= -35.0, scores
    assert min(scores) >= random_return + 10.0, (scores, random_return)
    runs = json.loads((tmp_path / "s1" / "metrics.json").read_text())
    last = runs["pettingzoo"]["mpe2-simple_speaker_listener_v4"][config.algorithm]["seed_1"]["step_0"]
    assert last["step_count"] == 8192 and len(last["return_agent_1"]) == 32
    np.testing.assert_allclose(
        np.add(last["return_agent_0"], last["return_agent_1"]), last["mean_episode_return"], rtol=1e-5
    )


def test_train_ippo_host_is_the_host_loop():
    assert train_ippo_host is train_host


class WithoutState:
    """speaker-listener without a global state: ``state()`` as PettingZoo's base class has it."""

    def __init__(self):
        self.env = speaker_listener()

    def __getattr__(self, name):
        return getattr(self.env, name)

    def state(self):
        raise NotImplementedError


@pytest.mark.parametrize(
    ("config", "make_env", "words"),
    [
        (MAPPOConfig(num_envs=1, eval_episodes=1), WithoutState, ["mappo", "env.state()", "IPPOConfig"]),
        (RecIPPOConfig(num_envs=3, num_minibatches=2), speaker_listener, ["num_minibatches", "num_envs"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: simple_v3.parallel_env(), ["multi-agent", "1 agent"]),
        (IPPOConfig(total_timesteps=16), speaker_listener, ["less than one iteration"]),
        # What make_env is confused with (each was a TypeError from inside the loop before).
        (IPPOConfig(), "MPE-simple_spread-v3", ["got the str 'MPE-simple_spread-v3'", "make_ippo_runner(IPPOConfig(env_id="]),
        (IPPOConfig(), simple_v3, ["got the module 'mpe2.simple_v3'", "make_env=module.parallel_env"]),
        (IPPOConfig(), simple_speaker_listener_v4.parallel_env(), ["got an env (", "Pass what made this one"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), simple_speaker_listener_v4.env, ["returned an AEC env", "aec_to_parallel(env)"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: None, ["make_env() returned NoneType, not a PettingZoo parallel env"]),
    ],
)  # fmt: skip
def test_bad_input_is_a_user_error(config, make_env, words):
    with pytest.raises(ConfigError) as error:
        train_host(config, make_env)
    assert all(word in str(error.value) for word in words), str(error.value)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ({"env_kwargs": ("continuous_actions=true",)}, ["env_kwargs", "make_env", "parallel_env(continuous_actions=True)"]),
        ({"eval_info": ("won",)}, ["eval_info", "compiled runners"]),
        ({"eval_max_steps": 10}, ["eval_max_steps", "0"]),
    ],
)  # fmt: skip
def test_settings_the_host_loop_does_not_use_are_refused(setting, words):
    # Before, each was ignored without a word: env_kwargs=continuous_actions=true trained discrete actions.
    small = IPPOConfig(num_envs=1, num_steps=8, num_minibatches=1, total_timesteps=8, eval_episodes=1)
    config = dataclasses.replace(small, **setting)
    with pytest.raises(ConfigError, match=r"^train_host") as error:
        train_host(config, speaker_listener)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_a_seed_that_is_not_an_int_is_refused():
    with pytest.raises(ConfigError, match=r"^train_host: seed must be a non-negative int, got str '0'\.$"):
        train_host(IPPOConfig(num_envs=1, eval_episodes=1), speaker_listener, seed="0")


def test_an_out_dir_holding_a_run_log_is_refused(tmp_path):
    # A second seed into the first seed's folder replaced its run log: seed_0 was gone, silently.
    earlier = '{"pettingzoo": {"mpe2-simple_speaker_listener_v4": {"ippo": {"seed_0": {}}}}}'
    (tmp_path / "metrics.json").write_text(earlier)
    config = IPPOConfig(num_envs=1, num_steps=8, num_minibatches=1, total_timesteps=8, eval_episodes=1)
    with pytest.raises(FileExistsError, match=r"already holds a run log.*its own folder.*seed_1"):
        train_host(config, speaker_listener, seed=1, out_dir=tmp_path)
    assert (tmp_path / "metrics.json").read_text() == earlier


class MatchingPennies(ParallelEnv):  # type: ignore[type-arg]
    """Two agents, one step per episode: +1 to the first and -1 to the second when the actions
    match, the other way round when they differ (zero-sum: every step's team reward is 0)."""

    def __init__(self, cooperative=None):
        self.possible_agents = ["even", "odd"]
        self.metadata = {"name": "matching_pennies"}
        if cooperative is not None:
            self.cooperative = cooperative

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {agent: np.zeros((1,), np.float32) for agent in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        win = 1.0 if actions["even"] == actions["odd"] else -1.0
        obs = {agent: np.zeros((1,), np.float32) for agent in self.agents}
        rewards = {"even": win, "odd": -win}
        flags = {agent: True for agent in self.agents}
        self.agents = []
        return obs, rewards, flags, {a: False for a in flags}, {a: {} for a in flags}


TINY = IPPOConfig(
    num_envs=1, num_steps=4, num_minibatches=1, total_timesteps=4, eval_episodes=1, hidden_sizes=(8,)
)


@pytest.mark.parametrize(
    ("make_env", "words"),
    [
        (simple_adversary_v3.parallel_env, ["simple_adversary_v3", "['adversary_0'] are adversaries"]),
        (simple_tag_v3.parallel_env, ["simple_tag_v3", "['adversary_0', 'adversary_1', 'adversary_2']"]),
        (lambda: MatchingPennies(cooperative=False), ["matching_pennies", "cooperative = False"]),
    ],
)  # fmt: skip
def test_team_reward_on_an_env_without_a_team_is_refused_before_training(make_env, words):
    # Before, train_host summed the adversaries' rewards with their opponents' without a word.
    with pytest.raises(ConfigError, match=r"^train_host: team_reward=True .*Set team_reward=False") as error:
        train_host(TINY, make_env)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_team_reward_on_a_zero_sum_env_is_refused_after_the_first_rollout():
    # Nothing declares matching pennies competitive; its first rollout's team reward is 0 at
    # every step while each agent's is not, so the update would learn from nothing. (About 3 s:
    # the one test of the check made while training, so the init and acting programs compile.)
    with pytest.raises(
        ConfigError, match=r"^train_host: team_reward=True .*sum to 0 at every step.*Set team_reward=False"
    ):
        train_host(TINY, MatchingPennies)
