"""IPPO on PettingZoo parallel envs through the host loop (``lamella.marl.host``), on mpe2's
numpy MPE (a real non-JAX PettingZoo env).

Learning check: ``simple_speaker_listener_v4`` with discrete actions (speaker obs 3, listener obs
11, padded to 11; 25-step episodes that end by truncation). Two seeds (0 and 1), each 8,192 env
steps on 8 envs (16 PPO updates of 512 env steps), then 32 sampled evaluation episodes. The random
baseline is measured here on the same batch (uniform actions, 64 episodes; about -47 per agent).
Threshold: every seed's per-agent return >= -35 (measured -21.5 and -27.4 at 10,240 steps).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from mpe2 import simple_speaker_listener_v4, simple_v3  # a test dependency of lamella-marl

from lamella.agents.config import ConfigError
from lamella.marl import IPPOConfig, MAPPOConfig
from lamella.marl.host import ParallelEnvBatch, train_ippo_host


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


def test_host_ippo_learns_speaker_listener_for_two_seeds(tmp_path):
    random_return = random_agent_return()
    assert -60 < random_return < -40, random_return
    scores = []
    for seed in (0, 1):
        result = train_ippo_host(
            CONFIG,
            speaker_listener,
            seed=seed,
            eval_every=CONFIG.total_timesteps,
            out_dir=tmp_path / f"s{seed}",
        )
        assert result.env_steps == 8192 and result.eval_steps == [8192]
        scores.append(float(np.mean(result.eval_agent_returns[-1])))
    print(f"host IPPO speaker-listener: per-agent return per seed {scores}, random {random_return:.1f}")
    assert min(scores) >= -35.0, scores
    assert min(scores) >= random_return + 10.0, (scores, random_return)
    runs = json.loads((tmp_path / "s1" / "metrics.json").read_text())
    last = runs["pettingzoo"]["mpe2-simple_speaker_listener_v4"]["ippo"]["seed_1"]["step_0"]
    assert last["step_count"] == 8192 and len(last["return_agent_1"]) == 32
    np.testing.assert_allclose(
        np.add(last["return_agent_0"], last["return_agent_1"]), last["mean_episode_return"], rtol=1e-5
    )


@pytest.mark.parametrize(
    ("config", "make_env", "words"),
    [
        (MAPPOConfig(), speaker_listener, ["feed-forward IPPO", "MAPPO"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: simple_v3.parallel_env(), ["multi-agent", "1 agent"]),
        (IPPOConfig(num_envs=1, eval_episodes=1),
         lambda: simple_speaker_listener_v4.parallel_env(continuous_actions=True), ["discrete actions"]),
        (IPPOConfig(total_timesteps=16), speaker_listener, ["less than one iteration"]),
    ],
)  # fmt: skip
def test_bad_input_is_a_user_error(config, make_env, words):
    with pytest.raises(ConfigError) as error:
        train_ippo_host(config, make_env)
    assert all(word in str(error.value) for word in words), str(error.value)
