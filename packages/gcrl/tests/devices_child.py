"""The child process of ``test_devices.py``: HER and a goal setter in the off-policy loop on 4
simulated CPU devices against 1, printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes; the
parent asserts. Usage: ``python devices_child.py OUT_DIR`` (the parent sets ``XLA_FLAGS``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import jax
import numpy as np

import lamella.envs
from lamella.agents import driver
from lamella.agents.testing import flat_run_log, max_abs, max_abs_diff
from lamella.gcrl import SACTrainConfig, TD3TrainConfig, goal_override, make_offpolicy_runner

# 8 envs (2 per device), batches of 16 (4 per device), HER relabelling from the replicated
# buffer; learning starts in the first iteration. Four iterations in two chunks.
LOOP = dict(
    env_id="PointRobotGoal-v0",
    her=True,
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
# SAC with "future" goals and the env's own goals.
SAC = SACTrainConfig(**LOOP)
# TD3 with "final" goals, and a goal setter that draws each env's goal and moves it every 4
# steps: its per-env state runs on the gathered batch, the same on every device.
TD3 = TD3TrainConfig(her_strategy="final", **LOOP)


def with_setter(config: Any) -> Any:
    env, params = lamella.envs.make(config.env_id, autoreset=False)
    bare = env.unwrapped
    setter = goal_override(
        lambda key, obs: jax.random.uniform(key, (2,), minval=-0.5, maxval=0.5) + 0.0 * obs["achieved_goal"],
        lambda achieved, desired: bare.compute_reward(achieved, desired, params),
        lambda achieved, desired: bare.is_success(achieved, desired, params),
        change_every=4,
    )
    return make_offpolicy_runner(config, goal_setter=setter)


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    for name, config, make in (("sac_her", SAC, None), ("td3_her_setter", TD3, with_setter)):
        runs = [
            driver.run_experiment(
                config,
                seeds=1,
                out_dir=os.path.join(out_dir, f"{name}_{n}"),
                chunk_iterations=2,
                num_devices=n,
                progress=False,
                plot=False,
                **({} if make is None else {"algorithm": "td3", "make_runner": make}),
            )
            for n in (1, 4)
        ]
        states = [r.state.train_state for r in runs]
        result[name] = {
            "metrics": {str(n): flat_run_log(r.metrics_path) for n, r in zip((1, 4), runs, strict=True)},
            "train_state_max_abs_diff": max_abs_diff(*states),
            "train_state_max_abs": max_abs(states[0]),
            "setter_state_max_abs_diff": max_abs_diff(*(r.state.setter_state for r in runs)),
            "setter_state_max_abs": max_abs(runs[0].state.setter_state),
            "updates": [int(np.asarray(s.updates).max()) for s in states],
            # The critics against their target copies, which started equal: learning moved them.
            "critic_moved": max_abs_diff(states[0].critic_params, states[0].target_critic_params),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
