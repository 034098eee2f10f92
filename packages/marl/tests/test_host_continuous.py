"""Continuous actions on the PettingZoo host loop (``lamella.marl.host``): IPPO and MAPPO on mpe2's
numpy MPE ``simple_speaker_listener_v4`` made with ``continuous_actions=True``.

The agents' action spaces differ: the speaker's is ``Box(0, 1, (3,))`` (its utterance), the
listener's ``Box(0, 1, (5,))`` (no-op, then -x, +x, -y, +y forces). The host loop acts with one
Gaussian head over ``D = 5`` entries for both (the JAX runners' head, tanh-squashed into [0, 1])
and hands each agent its own first ``D_i`` entries, as lamella's MPE pads its continuous actions
to the largest agent's.

Learning check: three seeds (0, 1, 2) per algorithm, each 8,192 env steps on 8 envs (16 PPO
updates of 512 env steps; the jitted functions are cached by config, so the seeds compile once),
then 64 greedy evaluation episodes (the Gaussian's mean). Two baselines are measured here on the
same batch, 256 episodes each: actions uniform in each agent's Box (about -37.7 per agent; -36.7
over 1024 episodes), and standing still (every entry 0.5: no force, the listener stays where it
starts; about -34.4; -33.9 over 1024 episodes). Both agents get the same shared reward, so the
per-agent return is the team's score. Threshold: every seed's per-agent return >= -30 and at
least 4 above the better baseline (measured when written: IPPO -22.6, -25.2, -17.8; MAPPO -22.1,
-26.5, -17.8; seeds 3 to 5 of each gave -17.9 to -20.7). As in the discrete host tests, the
update's first minibatch recomputes exactly the distributions the loop acted with
(``first_minibatch_kl`` below 1e-6: the stored raw Gaussian samples and observations are those
the policy produced and saw).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gymnasium import spaces
from mpe2 import simple_speaker_listener_v4, simple_spread_v3  # a test dependency of lamella-marl

from lamella.agents.config import ConfigError
from lamella.marl import IPPOConfig, MAPPOConfig, RecIPPOConfig, RecMAPPOConfig, host
from lamella.marl.host import ParallelEnvBatch, train_host


def speaker_listener():
    return simple_speaker_listener_v4.parallel_env(continuous_actions=True)


CONFIG = IPPOConfig(
    env_id="mpe2-simple_speaker_listener_v4-continuous",
    total_timesteps=8192,
    num_envs=8,
    num_steps=64,
    num_minibatches=2,
    hidden_sizes=(64, 64),
    learning_rate=3e-3,
    eval_episodes=64,
    eval_greedy=True,
    team_reward=False,  # both agents already get the shared reward
)


class Recording:
    """An env whose step records the actions it was given; other attributes are the wrapped env's."""

    def __init__(self, env, action_space=None):
        self.env = env
        self.given: list[dict] = []
        self._action_space = action_space

    def __getattr__(self, name):
        return getattr(self.env, name)

    def action_space(self, agent):
        return self._action_space(agent) if self._action_space else self.env.action_space(agent)

    def step(self, actions):
        self.given.append(actions)
        return self.env.step(actions)


def baseline_returns(episodes: int = 256) -> dict[str, float]:
    """Per-agent returns of uniform random actions and of standing still (every entry 0.5)."""
    batch = ParallelEnvBatch([speaker_listener() for _ in range(episodes)])
    rng = np.random.default_rng(0)
    out = {}
    for kind in ("random", "still"):
        batch.reset(7)
        returns, finished = np.zeros((episodes, batch.num_agents)), np.zeros(episodes, bool)
        while not finished.all():
            shape = (episodes, batch.num_agents, batch.action_size)
            action = (
                rng.uniform(batch.action_low, batch.action_high, shape)
                if kind == "random"
                else np.full(shape, 0.5)
            )
            _, reward, _, _, _, done = batch.step(action)
            returns += np.where(finished[:, None], 0.0, reward)
            finished |= done
        out[kind] = float(returns.mean())
    return out


def test_the_batch_pads_box_actions_and_gives_each_agent_its_own_entries():
    envs = [Recording(speaker_listener()) for _ in range(2)]
    batch = ParallelEnvBatch(envs)
    assert batch.continuous and batch.num_actions == 0
    assert batch.agent_action_sizes.tolist() == [3, 5] and batch.action_size == 5
    assert batch.action_low.tolist() == [0.0] * 5 and batch.action_high.tolist() == [1.0] * 5
    obs = batch.reset(0)
    assert set(obs) == {"obs"} and obs["obs"].shape == (2, 2, 11)  # no mask for continuous actions
    action = np.linspace(-0.2, 1.2, 20).reshape(2, 2, 5)  # some entries outside [0, 1]
    _, reward, terminated, truncated, _, done = batch.step(action)
    assert reward.shape == (2, 2) and not done.any() and not (terminated | truncated).any()
    for e, env in enumerate(envs):
        given = env.given[-1]
        assert given["speaker_0"].shape == (3,) and given["listener_0"].shape == (5,)
        assert given["speaker_0"].dtype == np.float32
        np.testing.assert_allclose(given["speaker_0"], np.clip(action[e, 0, :3], 0, 1), rtol=1e-6)
        np.testing.assert_allclose(given["listener_0"], np.clip(action[e, 1], 0, 1), rtol=1e-6)


@pytest.fixture(scope="module")
def baselines():
    return baseline_returns()


@pytest.mark.parametrize("config_class", [IPPOConfig, MAPPOConfig], ids=["ippo", "mappo"])
def test_host_loop_learns_continuous_speaker_listener_for_three_seeds(config_class, baselines):
    assert -45 < baselines["random"] < -30 and -40 < baselines["still"] < -28, baselines
    config = config_class(**{f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)})
    # The update recomputes the distributions the loop acted with (feed-forward: exactly).
    assert_learns_for_three_seeds(config, baselines, kl_bound=1e-6)


def assert_learns_for_three_seeds(config, baselines, kl_bound):
    """Trains seeds 0-2 on speaker-listener for 8,192 steps; each seed's greedy per-agent return
    is >= -30 and 4 above the better of the uniform and standing-still baselines."""
    scores = []
    for seed in (0, 1, 2):
        result = train_host(config, speaker_listener, seed=seed, eval_every=config.total_timesteps)
        assert result.env_steps == 8192 and result.eval_steps == [8192]
        assert len(result.train_metrics) == 16
        assert max(abs(m["first_minibatch_kl"]) for m in result.train_metrics) < kl_bound
        scores.append(float(np.mean(result.eval_agent_returns[-1])))
    print(
        f"host {config.algorithm} continuous speaker-listener: per-agent return per seed {scores}, "
        f"baselines {baselines}"
    )
    assert min(scores) >= -30.0, (scores, baselines)
    assert min(scores) >= max(baselines.values()) + 4.0, (scores, baselines)


def box(low, high, shape):
    return lambda agent: spaces.Box(low, high, shape, np.float32)


@pytest.mark.parametrize(
    ("config", "make_env", "words"),
    [
        (IPPOConfig(num_envs=1, eval_episodes=1),
         lambda: Recording(speaker_listener(), lambda a: spaces.Discrete(3) if a == "speaker_0" else spaces.Box(0, 1, (5,))),
         ["Discrete", "Box", "mix"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: Recording(speaker_listener(), box(0, 1, (5, 1))),
         ["1-D Box", "(5, 1)", "Flatten"]),
        (IPPOConfig(num_envs=1, eval_episodes=1),
         lambda: Recording(speaker_listener(), lambda a: spaces.Box(0, 1 if a == "speaker_0" else 2, (3,))),
         ["same bounds", "listener_0", "Rescale"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: Recording(speaker_listener(), box(-np.inf, np.inf, (5,))),
         ["not finite", "continuous_action='clip'"]),
        (IPPOConfig(num_envs=1, eval_episodes=1), lambda: Recording(speaker_listener(), box(0, np.inf, (5,))),
         ["not finite", "continuous_action='clip'"]),
    ],
    ids=["mixed", "2-d box", "differing bounds", "unbounded with tanh", "half bounded with tanh"],
)  # fmt: skip
def test_bad_continuous_action_spaces_are_user_errors(config, make_env, words):
    with pytest.raises(ConfigError) as error:
        train_host(config, make_env)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_unbounded_actions_are_clipped_with_continuous_action_clip():
    """``continuous_action='clip'`` takes an unbounded Box: the raw Gaussian sample is the action
    (clipping to infinite bounds changes nothing); the refusal above is tanh's only."""
    envs = [Recording(simple_spread_v3.parallel_env(continuous_actions=True), box(-np.inf, np.inf, (5,)))]
    batch = ParallelEnvBatch(envs)
    assert batch.continuous and np.isinf(batch.action_low).all()
    host._check_continuous(batch, dataclasses.replace(CONFIG, continuous_action="clip"))  # no refusal
    batch.reset(0)
    action = np.linspace(-3, 3, 15, dtype=np.float32).reshape(1, 3, 5)
    batch.step(action)
    np.testing.assert_array_equal(envs[0].given[-1]["agent_2"], action[0, 2])


RECURRENT = dict(
    hidden_sizes=(64,),
    post_torso_sizes=(64,),
    rnn_hidden_size=64,
    activation="tanh",
    num_minibatches=4,  # divides num_envs (8): the recurrent update splits by env
    ent_coef=0.0,
    normalize_values=True,
)


@pytest.mark.parametrize("config_class", [RecIPPOConfig, RecMAPPOConfig], ids=["rec_ippo", "rec_mappo"])
def test_recurrent_host_loop_learns_continuous_speaker_listener_for_three_seeds(config_class, baselines):
    """rec_ippo and rec_mappo (a GRU per agent; rec_mappo's critic on ``env.state()``) with the
    Gaussian head, on the feed-forward test's env, budget, batch and step size. 64-step rollouts
    and 25-step episodes do not line up, so episodes cross rollout boundaries and the memory is
    carried over them; every update's first minibatch recomputes the distributions the loop acted
    with from the stored memories, reset flags and raw samples. Measured when written (seeds 0 to
    5): rec_ippo -26.2, -25.3, -16.4, -18.7, -19.1, -20.6; rec_mappo -23.0, -23.4, -17.5, -19.8,
    -19.4, -23.7."""
    config = config_class(
        **{f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG) if f.name not in RECURRENT},
        **RECURRENT,
    )
    assert_learns_for_three_seeds(config, baselines, kl_bound=1e-5)
