"""The child process of ``test_offpolicy_devices.py``: the off-policy loop on 4 simulated CPU
devices against 1, printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes; the
parent asserts. Usage: ``python offpolicy_devices_child.py OUT_DIR`` (the parent sets
``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import jax
import numpy as np

from lamella.agents import driver
from lamella.agents.offpolicy import DDPGTrainConfig, DQNTrainConfig, SACTrainConfig, TQCTrainConfig
from lamella.agents.recording import read_recording
from lamella.agents.testing import count_compile_ahead, error_text, flat_run_log, max_abs, max_abs_diff

# 8 envs (2 per device), batches of 16 (4 per device); learning starts in the first iteration,
# so every iteration's metrics include updates. Four iterations in two chunks: three evaluations.
LOOP = dict(
    num_envs=8,
    batch_size=16,
    buffer_size=512,
    hidden_sizes=(16, 16),
    eval_episodes=2,
    eval_max_steps=20,
    rollout_steps=8,
    total_timesteps=8 * 8 * 4,
    learning_starts=32,
)
# Discrete actions, epsilon-greedy exploration, n-step targets, hard target copies.
DQN = DQNTrainConfig(
    env_id="CartPole-v1",
    n_step=2,
    exploration_steps=128,
    target_update_period=8,
    **LOOP,
)
# Continuous actions: sampled next actions and actor noise (each device its rows of the whole
# batch's noise), the learned temperature.
SAC = SACTrainConfig(env_id="Pendulum-v1", **LOOP)
# SAC's agent (each device its rows of the batch's noise) with quantile critics and the truncated
# pooled target; 5 quantiles instead of 25, the same code.
TQC = TQCTrainConfig(env_id="Pendulum-v1", num_quantiles=5, drop_per_critic=1, **LOOP)
# The deterministic core with one critic, no smoothing noise and an actor update every step
# (TD3 itself, twin critics, block of smoothing noise, delayed actor: lamella-gcrl's TD3+HER case).
DDPG = DDPGTrainConfig(env_id="Pendulum-v1", **LOOP)
# Discrete SAC: expected values over CartPole's actions, a categorical policy, the temperature.
DISCRETE_SAC = SACTrainConfig(env_id="CartPole-v1", **LOOP)
# name -> config; the parent asserts the same things of each.
CASES = {"dqn": DQN, "sac": SAC, "tqc": TQC, "ddpg": DDPG, "discrete_sac": DISCRETE_SAC}


def run(config: Any, num_devices: int, out_dir: str, **options: Any) -> Any:
    return driver.run_experiment(
        config,
        seeds=1,
        out_dir=out_dir,
        chunk_iterations=2,
        num_devices=num_devices,
        progress=False,
        plot=False,
        **options,
    )


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = count_compile_ahead()
    result["errors"] = {
        "num_envs": error_text(
            lambda: run(dataclasses.replace(DQN, num_envs=6), 4, os.path.join(out_dir, "num_envs"))
        ),
        "batch_size": error_text(
            lambda: run(dataclasses.replace(SAC, batch_size=6), 4, os.path.join(out_dir, "batch_size"))
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    for name, config in CASES.items():
        one, four = (run(config, n, os.path.join(out_dir, f"{name}_{n}")) for n in (1, 4))
        with open(four.config_path, encoding="utf-8") as handle:
            layout = json.load(handle)["devices"]
        trained = [r.state.train_state for r in (one, four)]
        # The online networks against their target copies, which started equal: learning moved them.
        online, target = (
            ("params", "target_params") if name == "dqn" else ("critic_params", "target_critic_params")
        )
        result[name] = {
            "metrics": {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)},
            "train_state_max_abs_diff": max_abs_diff(*trained),
            "train_state_max_abs": max_abs(trained[0]),
            "buffer_max_abs_diff": max_abs_diff(one.state.buffer_state, four.state.buffer_state),
            "updates": [int(np.asarray(t.updates).max()) for t in trained],
            "moved": max_abs_diff(getattr(trained[0], online), getattr(trained[0], target)),
            "layout": layout,
        }
        if name == "dqn":
            # DQN on 4 devices again, recording: each device writes its block of the envs, so
            # the vault must hold every env's steps in order, the replay data of the 1-device run.
            recorded = run(config, 4, os.path.join(out_dir, "dqn_4_recorded"), record_vault=True)
            vault = read_recording(os.path.join(out_dir, "dqn_4_recorded", "vault"))
            steps = vault["actions"].shape[1]
            stored = one.state.buffer_state.trajectory.experience  # (1 member, envs, capacity, ...)
            fields = {"observations": "obs", "actions": "action", "rewards": "reward"}
            fields.update(terminals="terminated", truncations="truncated")
            result["dqn_recorded"] = {
                "shapes": {key: list(value.shape) for key, value in vault.items()},
                # Every field, integers and flags included (max_abs_diff compares floats only).
                "vault_vs_one_device_buffer": {
                    key: float(
                        np.max(
                            np.abs(
                                vault[key].astype(np.float64)
                                - np.asarray(getattr(stored, field))[0, :, :steps].astype(np.float64)
                            )
                        )
                    )
                    for key, field in fields.items()
                },
                "episode_ends": int(np.sum(vault["terminals"] | vault["truncations"])),
                "train_state_vs_unrecorded": max_abs_diff(recorded.state.train_state, four.state.train_state),
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
