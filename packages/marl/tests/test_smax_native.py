"""MAPPO trains on lamella-envs' native SMAX (``SMAX-3m-v0``) by id, as on any registered env.

A smoke test of the pieces SMAX brings (action masks that change as enemies move in and out of
range, allies that die and stay done, the global state for the centralised critic): three
iterations give finite losses, rewards are paid and episodes end; the evaluation logs each
episode's ``won`` (``eval_info=("won",)``). The JaxMARL-adapted SMAX is
trained in the top-level ``tests/test_jaxmarl_ippo.py``.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.marl import MAPPOConfig, make_mappo_runner


def test_mappo_trains_a_few_iterations_on_native_smax():
    config = MAPPOConfig(
        env_id="SMAX-3m-v0",
        env_kwargs=("max_episode_steps=20",),  # episodes end inside the 16-step rollouts
        total_timesteps=3 * 4 * 16,  # 3 iterations of 4 envs x 16 steps
        num_envs=4,
        num_steps=16,
        num_epochs=1,
        num_minibatches=1,
        hidden_sizes=(16,),
        eval_episodes=8,
        eval_info=("won",),
    )
    runner = make_mappo_runner(config)

    def train(key):
        state = runner.init(key)
        state, metrics = jax.lax.scan(
            lambda state, _: runner.step(state), state, length=config.num_iterations
        )
        return state, metrics, runner.evaluate(state, key)

    state, metrics, evaluation = jax.jit(train)(jax.random.key(0))
    metrics = jax.device_get(metrics)
    losses = {name: value for name, value in metrics.items() if "loss" in name}
    assert {"policy_loss", "value_loss"} <= set(losses), sorted(metrics)
    for name, value in losses.items():
        assert np.asarray(value).shape[0] == 3 and np.all(np.isfinite(value)), (name, value)
    assert np.any(np.asarray(metrics["reward"]) != 0)
    assert np.asarray(metrics["episodes"]).sum() > 0
    assert int(state.iteration) == 3
    won = np.asarray(evaluation["won"])
    assert won.shape == (8,) and set(won.tolist()) <= {0.0, 1.0}
    # A won episode was paid the win bonus (1, to each living ally).
    assert np.all(np.asarray(evaluation["episode_return"])[won == 1.0] >= 1.0)


def test_eval_info_may_not_name_the_evaluations_own_metrics():
    MAPPOConfig(env_id="SMAX-3m-v0", eval_info=("won",)).validate()
    with pytest.raises(ConfigError, match="eval_info"):
        MAPPOConfig(env_id="SMAX-3m-v0", eval_info=("return",)).validate()


def test_eval_info_naming_an_entry_the_env_does_not_report_is_refused_when_the_runner_is_built():
    # Before, the runner built and its first evaluation raised a ValueError from inside the trace:
    # a traceback from lamella train instead of one error line.
    config = MAPPOConfig(env_id="Foraging-5x5-2p-1f-coop-v3", eval_info=("won",), hidden_sizes=(8,))
    with pytest.raises(
        ConfigError, match=r"eval_info names 'won'.*Foraging-5x5-2p-1f-coop-v3.*'action_mask'"
    ):
        make_mappo_runner(config)
    # An entry with more than one value per env (one per agent) cannot be one number per episode.
    config = MAPPOConfig(env_id="SMAX-3m-v0", eval_info=("action_mask",), hidden_sizes=(8,))
    with pytest.raises(ConfigError, match=r"eval_info names 'action_mask'.*one value per env"):
        make_mappo_runner(config)
