"""The child process of ``test_devices.py``: runs on 4 simulated CPU devices and prints JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes; the
parent asserts. Usage: ``python devices_child.py OUT_DIR`` (the parent sets ``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

import lamella.envs
from lamella.agents import devices, driver, sweep
from lamella.agents.distributions import Gaussian
from lamella.agents.es import ESConfig
from lamella.agents.ppo import PPOConfig
from lamella.agents.recording import read_recording
from lamella.agents.rollout import PolicyStep, make_rollout
from lamella.agents.testing import BanditConfig, error_text, flat_run_log, make_bandit_runner

# Observation and reward normalisation on: every statistic the update pools over envs is
# reduced over devices too. 8 envs, 2 per device; minibatches of 32 steps, 8 per device.
# test_hosts.py's many-host run trains this config too (hosts_child.OVERRIDES on the CartPole
# preset) and compares with the 4-device run here, so the two files share this one child.
CONFIG = PPOConfig(
    num_envs=8,
    num_steps=16,
    num_minibatches=4,
    num_epochs=2,
    total_timesteps=8 * 16 * 4,
    eval_episodes=4,
    hidden_sizes=(16, 16),
    normalize_observations=True,
    normalize_rewards=True,
)


# A sweep of two learning rates (each trains both seeds), on 1 and on 4 devices.
SWEEP = [{"learning_rate": 3e-4}, {"learning_rate": 3e-3}]

# ES: a population of 8 members, 2 per device; 4 generations of 8 members x 1 episode x 20 steps.
# Pendulum: every member's return is its own float, so a member told another's return would show.
# Observation normalisation on: its statistics pool every device's block of members' observations.
ES = ESConfig(
    env_id="Pendulum-v1",
    population_size=8,
    num_rollouts=1,
    max_episode_steps=20,
    total_timesteps=8 * 20 * 4,
    eval_episodes=4,
    eval_max_steps=20,
    hidden_sizes=(8,),
    normalize_observations=True,
)


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = []  # compile_ahead calls: the bad inputs below must fail before any
    real_compile_ahead = driver.compile_ahead
    # Programs compiled after the last compile_ahead: the sharded programs must not be among
    # them (the arrays' layouts are those the programs were compiled ahead for).
    compiles: list[str] = []
    since_ahead: list[int] = [0]

    class CompileLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Compiling "):
                compiles.append(message.split(" ")[1])

    logging.getLogger("jax").addHandler(CompileLog())
    logging.getLogger("jax").setLevel(logging.DEBUG)
    jax.config.update("jax_log_compiles", True)

    def counting_compile_ahead(*args: Any, **kwargs: Any) -> Any:
        compiled.append(1)
        shapes = real_compile_ahead(*args, **kwargs)
        since_ahead[0] = len(compiles)
        return shapes

    driver.compile_ahead = counting_compile_ahead

    def ppo(num_devices: int, name: str, config: PPOConfig = CONFIG, seeds: int = 1, **kwargs: Any) -> Any:
        return driver.run_experiment(
            config,
            seeds=seeds,
            out_dir=os.path.join(out_dir, name),
            chunk_iterations=2,
            num_devices=num_devices,
            progress=False,
            plot=False,
            **kwargs,
        )

    # Bad input: one ConfigError each, before anything compiles.
    result["errors"] = {
        "too_many": error_text(lambda: ppo(8, "too_many")),
        "not_divisible": error_text(
            lambda: ppo(4, "not_divisible", PPOConfig(num_envs=6, total_timesteps=6 * 128))
        ),
        "minibatch": error_text(
            lambda: ppo(
                4, "minibatch", PPOConfig(num_envs=4, num_steps=2, num_minibatches=4, total_timesteps=64)
            )
        ),
        "sweep_not_divisible": error_text(
            lambda: ppo(
                4, "sweep_not_divisible", PPOConfig(num_envs=6, total_timesteps=6 * 128), variants=SWEEP
            )
        ),
        "sweep_plan_not_divisible": error_text(
            lambda: sweep.plan_sweep(
                "ppo", PPOConfig(num_envs=6, total_timesteps=6 * 128), {"num_envs": [6, 8]}, num_devices=4
            )
        ),
        "es_not_divisible": error_text(
            lambda: driver.run_experiment(
                dataclasses.replace(ES, population_size=6, total_timesteps=6 * 20 * 4),
                out_dir=os.path.join(out_dir, "es_not_divisible"),
                num_devices=4,
                progress=False,
            )
        ),
        "no_sharding": error_text(
            lambda: driver.run_experiment(
                BanditConfig(total_timesteps=64),
                algorithm="bandit",
                make_runner=make_bandit_runner,
                out_dir=os.path.join(out_dir, "bandit"),
                num_devices=2,
                progress=False,
            )
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    # The same config and seed on 1 and on 4 devices.
    one, four = ppo(1, "one"), ppo(4, "four")
    result["compiled_after_ahead"] = compiles[since_ahead[0] :]
    result["compiled_chunks"] = [name for name in compiles if "chunk" in name]
    result["metrics"] = {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)}
    params = [jax.tree.leaves(r.state.train_state.params) for r in (one, four)]
    result["params_max_abs_diff"] = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(*params, strict=True)
    )
    result["params_max_abs"] = max(float(np.max(np.abs(np.asarray(a)))) for a in params[0])
    # test_hosts.py's reference: the 4-device run its two processes (same config) must equal.
    result["params_4"] = [float(x) for leaf in params[1] for x in np.ravel(np.asarray(leaf))]
    result["obs_equal"] = bool(np.array_equal(np.asarray(one.state.obs), np.asarray(four.state.obs)))
    with open(four.config_path, encoding="utf-8") as handle:
        result["layout"] = json.load(handle)["devices"]
    result["checkpoint_devices"] = driver.ckpt.read_metadata(four.checkpoint_path)["num_devices"]
    # Stopped after one chunk and resumed on 4 devices: bit-identical to the run that never stopped.
    part = ppo(4, "part", max_chunks=1)
    resumed = driver.run_experiment(
        CONFIG, seeds=1, out_dir=part.out_dir, resume=True, progress=False, plot=False
    )
    result["resumed_equal"] = flat_run_log(resumed.metrics_path) == result["metrics"]["4"]
    result["resumed_iterations"] = [part.iteration, resumed.iteration]
    result["resume_error"] = error_text(
        lambda: driver.run_experiment(CONFIG, out_dir=one.out_dir, resume=True, num_devices=4)
    )

    # A sweep: every variant x seed with its envs split over the devices, as one run would;
    # on 4 devices through lamella sweep's plan (what --devices 4 runs).
    one_sweep = ppo(1, "sweep_1", seeds=2, variants=SWEEP)
    grid = {"learning_rate": [v["learning_rate"] for v in SWEEP]}
    plan = sweep.plan_sweep("ppo", CONFIG, grid, seeds=2, num_devices=4)
    four_sweep = os.path.join(out_dir, "sweep_4")
    sweep.run_sweep(plan, four_sweep, chunk_iterations=2, progress=False)
    result["sweep_compiled_after_ahead"] = compiles[since_ahead[0] :]
    result["sweep_metrics"] = {
        "1": flat_run_log(one_sweep.metrics_path),
        "4": flat_run_log(os.path.join(four_sweep, "p0", "metrics.json")),
    }
    with open(os.path.join(four_sweep, "p0", "config.json"), encoding="utf-8") as handle:
        result["sweep_layout"] = json.load(handle)["devices"]
    with open(os.path.join(four_sweep, sweep.SWEEP_FILE), encoding="utf-8") as handle:
        result["sweep_devices"] = json.load(handle)["num_devices"]

    # A bare env (the collector resets it) and a Gaussian policy: a device's block of the
    # transitions is that block of the one-device rollout.
    env, params_env = lamella.envs.make("Pendulum-v1", autoreset=False, max_steps_in_episode=12)
    axis = devices.DeviceAxis(devices.MESH_AXIS, 4)

    def collect(axis: Any, key: jax.Array) -> Any:
        rollout = make_rollout(env, 30, 8, devices=axis)

        def policy(key: jax.Array, obs: jax.Array, memory: Any, reset: jax.Array) -> Any:
            mean = 0.5 * obs[:, :1]
            dist = Gaussian(mean, jnp.zeros(1), -2 * jnp.ones(1), 2 * jnp.ones(1))
            raw = dist.sample(key, axis.start(obs.shape[0])) if axis.sharded else dist.sample(key)
            return memory, PolicyStep(dist.to_action(raw), raw, dist.log_prob(raw), mean[:, 0])

        _, batch = rollout.collect(rollout.init(key, params_env), policy, key, params_env)
        return batch.obs, batch.raw_action, batch.reward, batch.done

    key = jax.random.key(3)
    expected = jax.jit(lambda k: collect(devices.DeviceAxis(), k))(key)
    got = jax.jit(
        jax.shard_map(
            lambda k: collect(axis, k),
            mesh=devices.make_mesh(4),
            in_specs=PartitionSpec(),
            out_specs=PartitionSpec(None, devices.MESH_AXIS),
            check_vma=False,
        )
    )(key)
    result["rollout_dones"] = int(np.asarray(expected[3]).sum())
    result["rollout_max_abs_diff"] = [
        float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float))))
        for a, b in zip(expected, got, strict=True)
    ]
    # ES: the population split over 4 devices (ask and tell replicated), against 1 device.
    es = [
        driver.run_experiment(
            ES,
            seeds=1,
            out_dir=os.path.join(out_dir, f"es_{n}"),
            chunk_iterations=2,
            num_devices=n,
            progress=False,
            plot=False,
        )
        for n in (1, 4)
    ]
    result["es_metrics"] = {str(n): flat_run_log(r.metrics_path) for n, r in zip((1, 4), es, strict=True)}
    result["es_state_max_abs_diff"] = max(
        float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float)), initial=0.0))
        for a, b in zip(*(jax.tree.leaves(r.state.train_state) for r in es), strict=True)
    )
    result["es_obs_count"] = [
        float(np.asarray(r.state.train_state.obs_stats.count).reshape(-1)[0]) for r in es
    ]
    with open(es[1].config_path, encoding="utf-8") as handle:
        result["es_layout"] = json.load(handle)["devices"]

    # PPO recording its experience (record_vault) on 1 and on 4 devices: each device writes its
    # block of the envs, so the vaults must hold the same steps in the same order.
    vaults = []
    for n in (1, 4):
        ppo(n, f"recorded_{n}", record_vault=True)
        vaults.append(read_recording(os.path.join(out_dir, f"recorded_{n}", "vault")))
    result["recorded"] = {
        "shapes": {key: list(value.shape) for key, value in vaults[1].items()},
        "max_abs_diff": {
            key: float(np.max(np.abs(vaults[0][key].astype(float) - vaults[1][key].astype(float))))
            for key in vaults[0]
        },
        "episode_ends": int(np.sum(vaults[1]["terminals"] | vaults[1]["truncations"])),
        # test_hosts.py compares the 2-process run's vault with this 4-device one.
        "folder_4": os.path.join(out_dir, "recorded_4", "vault"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
