"""lamella-marl's IPPO trains on a JaxMARL env through lamella-envs' adapter (``[jaxmarl]`` extra).

A smoke test across the layers: the adapted SMAX env (action masks from JaxMARL's available
actions, SMAX's own rewards and episode ends) goes into ``make_ippo_runner`` unchanged, and a few
iterations of PPO updates give finite losses.
"""

from __future__ import annotations

import jax
import numpy as np

from lamella.envs.adapters.jaxmarl import from_jaxmarl
from lamella.marl import IPPOConfig, make_ippo_runner


def test_ippo_trains_a_few_iterations_on_adapted_smax():
    env = from_jaxmarl("HeuristicEnemySMAX", scenario="3m", max_steps=20)
    config = IPPOConfig(
        total_timesteps=3 * 4 * 16,  # 3 iterations of 4 envs x 16 steps
        num_envs=4,
        num_steps=16,
        num_epochs=1,
        num_minibatches=1,
        hidden_sizes=(16,),
    )
    runner = make_ippo_runner(config, env=env)

    def train(key):
        state = runner.init(key)
        return jax.lax.scan(lambda state, _: runner.step(state), state, length=config.num_iterations)

    state, metrics = jax.jit(train)(jax.random.key(0))
    metrics = jax.device_get(metrics)
    losses = {name: value for name, value in metrics.items() if "loss" in name}
    assert losses, f"no loss among the metrics {sorted(metrics)}"
    for name, value in losses.items():
        assert np.asarray(value).shape[0] == 3 and np.all(np.isfinite(value)), (name, value)
    # The rollouts went through SMAX: rewards were paid and episodes (20 steps at most) ended.
    assert np.any(np.asarray(metrics["reward"]) != 0)
    assert np.asarray(metrics["episodes"]).sum() > 0
    assert int(state.iteration) == 3
