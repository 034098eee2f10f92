"""The child process of ``test_devices_mfos_dice.py``: M-FOS-RL (PPO's envs split) and DiCE-LOLA
(each batch's sampled episodes split) on 4 simulated CPU devices and on 1, printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes; the
parent asserts. Usage: ``python devices_mfos_dice_child.py OUT_DIR`` (the parent sets
``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

import jax
import numpy as np

from lamella.agents.testing import (
    count_compile_ahead,
    device_trainer,
    error_text,
    flat_run_log,
    max_abs,
    max_abs_diff,
)
from lamella.marl.shaping import DiceConfig, MFOSConfig

# Four iterations in two chunks (three evaluations) each.
# M-FOS-RL: 8 meta-games (2 per device) of 5 outer steps, minibatches of 20 steps (5 per device).
# DiCE: batches of 8 episodes (2 per device) of 5 rounds; LOLA vs LOLA (one vmapped computation,
# the look-ahead through the devices' mean) and LOLA vs the naive learner.
RUNS: dict[str, Any] = {
    "mfos_rl": MFOSConfig(
        num_envs=8,
        num_steps=5,
        num_outer_steps=5,
        num_minibatches=2,
        num_epochs=2,
        hidden_sizes=(8,),
        eval_episodes=2,
        total_timesteps=8 * 5 * 4,
    ),
    "lola": DiceConfig(batch_size=8, num_inner_steps=5, eval_episodes=2, total_timesteps=3 * 8 * 5 * 4),
    "lola_v_nl": DiceConfig(
        agents=("lola", "naive"),
        batch_size=8,
        num_inner_steps=5,
        eval_episodes=2,
        total_timesteps=2 * 8 * 5 * 4,
    ),
}


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = count_compile_ahead()  # the bad inputs below must fail before any compile

    train = device_trainer(out_dir)

    started = time.perf_counter()
    result["errors"] = {
        "num_envs": error_text(
            lambda: train(dataclasses.replace(RUNS["mfos_rl"], num_envs=6), 4, "num_envs")
        ),
        "minibatch": error_text(
            lambda: train(dataclasses.replace(RUNS["mfos_rl"], num_minibatches=4), 4, "minibatch")
        ),
        "batch_size": error_text(
            lambda: train(dataclasses.replace(RUNS["lola"], batch_size=6), 4, "batch_size")
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    result["runs"] = {}
    for name, config in RUNS.items():
        one, four = train(config, 1, f"{name}_1"), train(config, 4, f"{name}_4")
        with open(four.config_path, encoding="utf-8") as handle:
            layout = json.load(handle)["devices"]
        if name == "mfos_rl":
            trained = [r.state.train_state for r in (one, four)]
            extra = {
                # The meta-games' states (the co-players' logits): the same actions were taken.
                "env_state_max_abs_diff": max_abs_diff(one.state.env_state, four.state.env_state),
                # Adam's step counts: the updates ran.
                "adam_counts": [
                    sorted(
                        {
                            int(v)
                            for x in jax.tree.leaves(t)
                            if np.issubdtype(np.asarray(x).dtype, np.integer)
                            for v in np.ravel(np.asarray(x))
                        }
                    )
                    for t in trained
                ],
            }
        else:
            trained = [(r.state.logits, r.state.opt_states) for r in (one, four)]
            # The learners started at logits 0 (init_scale 0): how far learning moved them.
            extra = {
                "moved": max_abs(one.state.logits),
                "iterations": [int(r.state.iteration.max()) for r in (one, four)],
            }
        result["runs"][name] = {
            "metrics": {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)},
            "layout": layout,
            "state_max_abs_diff": max_abs_diff(*trained),
            "state_max_abs": max_abs(trained[0]),
            **extra,
        }
        print(
            f"{name}: {time.perf_counter() - started:.1f} s, {time.process_time():.1f} CPU-s", file=sys.stderr
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
