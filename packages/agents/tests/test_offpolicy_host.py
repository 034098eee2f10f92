"""The off-policy loop on the host, around gymnasium vector envs."""

from __future__ import annotations

import json

import gymnasium  # lamella-agents[gymnasium]; the agents test env installs it (no skip)
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.agents.config import ConfigError
from lamella.agents.offpolicy import SACTrainConfig, train_host
from lamella.agents.offpolicy.host import _final_obs, from_gymnasium_space
from lamella.envs import spaces


def test_train_host_runs_and_writes_the_run_log(tmp_path):
    config = SACTrainConfig(
        env_id="Pendulum-v1",
        total_timesteps=400,
        num_envs=2,
        hidden_sizes=(8,),
        learning_starts=200,
        batch_size=16,
        buffer_size=1000,
        eval_episodes=2,
    )
    result = train_host(config, "Pendulum-v1", seed=3, eval_every=200, out_dir=str(tmp_path))
    assert result.env_steps == 400 and result.eval_steps == [200, 400]
    with open(result.metrics_path) as f:
        log = json.load(f)
    run = log["gymnasium"]["Pendulum-v1"]["sac"]["seed_3"]
    # The run log holds each evaluation's two episodes, and they average to what train_host returned.
    logged = [run[f"step_{i}"] for i in range(len(result.eval_steps))]
    assert [entry["step_count"] for entry in logged] == result.eval_steps
    for entry, mean_return in zip(logged, result.eval_returns):
        assert len(entry["mean_episode_return"]) == 2
        np.testing.assert_allclose(np.mean(entry["mean_episode_return"]), mean_return, rtol=1e-6)
    # Pendulum's reward per step is in [-16.3, 0] and an evaluation episode is 200 steps.
    assert all(-16.3 * 200 <= r < 0 for r in result.eval_returns), result.eval_returns


def test_an_out_dir_holding_a_run_log_is_refused(tmp_path):
    """Before: a second seed into the first seed's folder wrote its RunLog over the first's
    metrics.json, the first seed gone without a word."""
    earlier = '{"gymnasium": {"Pendulum-v1": {"sac": {"seed_0": {}}}}}'
    (tmp_path / "metrics.json").write_text(earlier)
    config = SACTrainConfig(env_id="Pendulum-v1", total_timesteps=400, num_envs=2)
    with pytest.raises(FileExistsError, match=r"train_host: out_dir .* already holds a run log.*seed_1"):
        train_host(config, "Pendulum-v1", seed=1, out_dir=str(tmp_path))
    assert (tmp_path / "metrics.json").read_text() == earlier


def test_final_observation_replaces_the_reset_one_where_done():
    next_obs = np.zeros((3, 2))
    info = {"final_obs": np.array([None, np.ones(2), None], dtype=object)}
    out = _final_obs(next_obs, info, np.array([False, True, False]))
    np.testing.assert_array_equal(out, [[0, 0], [1, 1], [0, 0]])


def test_spaces_convert_and_bad_vector_envs_are_refused():
    box = from_gymnasium_space(gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    assert isinstance(box, spaces.Box) and box.shape == (2,)
    assert from_gymnasium_space(gymnasium.spaces.Discrete(3)).n == 3
    env = gymnasium.make_vec("Pendulum-v1", num_envs=1, vectorization_mode="sync")  # NEXT_STEP mode
    with pytest.raises(ValueError, match="SAME_STEP"):
        train_host(SACTrainConfig(total_timesteps=200, rollout_steps=200), env)


@pytest.mark.parametrize(
    ("env", "kwargs", "match"),
    [
        (
            lambda: gymnasium.make("Pendulum-v1"),
            {},
            r"^train_host: env is a single gymnasium env \(TimeLimit\); it needs a vector env of num_envs=1: "
            r"gymnasium\.make_vec\(id, num_envs=1",
        ),
        (
            lambda: "Breakout-MinAtar",
            {},
            r"^train_host: 'Breakout-MinAtar' is a lamella env, not a gymnasium one; train it with the compiled loop",
        ),
        (lambda: "Pendulm-v1", {}, r"^train_host: Environment `Pendulm` doesn't exist"),
        (
            lambda: le.make("Pendulum-v1", autoreset=False)[0],
            {},
            r"^train_host: env is a lamella env \(Pendulum\), stepped inside compiled code.*make_offpolicy_runner",
        ),
        (
            lambda: "Pendulum-v1",
            {"seed": "3"},
            r"^train_host: seed must be a non-negative int, got str '3'\.$",
        ),
    ],
    ids=["single-env", "lamella-id", "unknown-id", "lamella-env", "seed-str"],
)
def test_what_is_not_a_gymnasium_vector_env_names_the_fix(env, kwargs, match):
    """Each was an AttributeError ('TimeLimit' object has no attribute 'num_envs'), gymnasium's
    NameNotFound, or a JAX dtype error before."""
    with pytest.raises(ConfigError, match=match):
        train_host(SACTrainConfig(total_timesteps=200, rollout_steps=200, num_envs=1), env(), **kwargs)


def test_train_host_gives_the_batch_sampler_the_envs_time_limit():
    """``GoalFunctions.episode_length`` is the gymnasium env's time limit (``spec.max_episode_steps``
    of its sub-envs), so lamella-gcrl's HER checks that the buffer holds an episode of each env;
    None without a time limit. Before, train_host always gave None: HER's check was skipped."""
    seen = []

    class Built(Exception):
        pass

    def spy(config, buffer, goals):  # stops train_host once its sampler is built: nothing compiles
        seen.append(goals.episode_length)
        raise Built

    same_step = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
    envs = [
        "Pendulum-v1",  # 200 steps
        gymnasium.make_vec("Pendulum-v1", 2, "sync", vector_kwargs=same_step, max_episode_steps=50),
        gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.make("Pendulum-v1").unwrapped] * 2, **same_step
        ),  # no time limit
    ]
    config = SACTrainConfig(
        env_id="Pendulum-v1", total_timesteps=200, rollout_steps=100, num_envs=2, buffer_size=100, her=True
    )
    for env in envs:
        with pytest.raises(Built):
            train_host(config, env, compute_reward=lambda a, d: -jnp.sum((a - d) ** 2), batch_sampler=spy)
    assert seen == [200, 50, None]
