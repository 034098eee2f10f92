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


def test_lamella_train_takes_a_jaxmarl_id(tmp_path, monkeypatch):
    """``lamella train ippo --env jaxmarl:<id> env_kwargs=...``: the runner builds the adapted env
    from its id and settings, the run log files it under ``jaxmarl``, and ``lamella eval
    checkpoints`` rebuilds the env from the run's config to evaluate its checkpoint."""
    import json

    from lamella.agents import train
    from lamella.eval.__main__ import main as eval_main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    argv = ["ippo", "--env", "jaxmarl:HeuristicEnemySMAX", "--no-progress", "--out-dir", str(out)]
    argv += ["env_kwargs=scenario=3m,max_steps=20", "total_timesteps=128", "num_envs=4", "num_steps=16"]
    argv += ["num_epochs=1", "num_minibatches=1", "hidden_sizes=16"]
    assert train.main(argv) == 0
    log = json.loads((out / "metrics.json").read_text())
    assert list(log) == ["jaxmarl"] and list(log["jaxmarl"]) == ["jaxmarl:HeuristicEnemySMAX"]
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["env_kwargs"] == ["scenario=3m", "max_steps=20"]
    assert eval_main(["checkpoints", str(out), "--episodes", "2", "--out", str(tmp_path / "eval.csv")]) == 0
    rows = (tmp_path / "eval.csv").read_text().splitlines()
    assert rows[1].split(",")[2:4] == ["jaxmarl:HeuristicEnemySMAX", "jaxmarl:HeuristicEnemySMAX"], rows
