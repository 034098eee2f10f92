"""The child process of ``test_devices.py``: IPPO and MAPPO on 4 simulated CPU devices and on 1,
printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). One process, one jax
start, every runner of the package: it computes, the parent asserts. Usage:
``python devices_child.py OUT_DIR`` (the parent sets ``XLA_FLAGS``).
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

from lamella.agents.testing import count_compile_ahead, device_trainer, error_text, flat_run_log
from lamella.marl import IPPOConfig, RecMAPPOConfig

MPE = "MPE-simple_spread-v3"  # dense rewards: every logged return and reward is non-zero
# 8 envs, 2 per device; minibatches of 8 * 8 / 2 = 32 steps (8 per device); recurrent minibatches
# of 4 envs (1 per device). Value normalisation on: the target statistics pool over devices.
COMMON: dict[str, Any] = {
    "env_id": MPE,
    "num_envs": 8,
    "num_steps": 8,
    "num_minibatches": 2,
    "num_epochs": 2,
    "total_timesteps": 8 * 8 * 4,
    "eval_episodes": 4,
    "eval_max_steps": 10,
    "hidden_sizes": (16,),
    "normalize_values": True,
    "learning_rate": 3e-3,
}
# Feed-forward IPPO with continuous actions (a Gaussian per agent), recurrent MAPPO (a centralised
# recurrent critic on the global state) with discrete ones: each device samples its block of the
# actions one device samples, from both kinds of distribution.
CONFIGS: dict[str, Any] = {
    "ippo": IPPOConfig(**COMMON, env_kwargs=("continuous_actions=true", "N=2")),
    "rec_mappo": RecMAPPOConfig(**COMMON, env_kwargs=("N=2",), post_torso_sizes=(16,), rnn_hidden_size=8),
}


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = count_compile_ahead()  # the bad inputs below must fail before any compile

    train = device_trainer(out_dir)

    ippo = CONFIGS["ippo"]
    started = time.perf_counter()
    result["errors"] = {
        "too_many": error_text(lambda: train(ippo, 8, "too_many")),
        "not_divisible": error_text(lambda: train(dataclasses.replace(ippo, num_envs=6), 4, "not_divisible")),
        "minibatch": error_text(
            lambda: train(dataclasses.replace(ippo, num_envs=4, num_steps=2, num_minibatches=4), 4, "mb")
        ),
        "recurrent_minibatch": error_text(
            lambda: train(dataclasses.replace(CONFIGS["rec_mappo"], num_minibatches=4), 4, "rec_mb")
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    result["runs"] = {}
    for name, config in CONFIGS.items():
        one, four = train(config, 1, f"{name}_1"), train(config, 4, f"{name}_4")
        params = [jax.tree.leaves(r.state.train_state.params) for r in (one, four)]
        with open(four.config_path, encoding="utf-8") as handle:
            layout = json.load(handle)["devices"]
        result["runs"][name] = {
            "metrics": {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)},
            "params_max_abs_diff": max(
                float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(*params, strict=True)
            ),
            "params_max_abs": max(float(np.max(np.abs(np.asarray(a)))) for a in params[0]),
            # Adam's step count and moments: the updates ran (4 iterations x 2 epochs x 2 minibatches).
            "adam_counts": sorted({int(np.ravel(x)[0]) for x in int_leaves(one.state.train_state.opt_state)}),
            "adam_moment_max": max(
                float(np.max(np.abs(np.asarray(x)))) for x in float_leaves(one.state.train_state.opt_state)
            ),
            "value_stats_count": [
                float(np.asarray(r.state.train_state.value_stats.count)[0]) for r in (one, four)
            ],
            "env_state_max_abs_diff": max(
                float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float)), initial=0.0))
                for a, b in zip(
                    jax.tree.leaves(one.state.env_state), jax.tree.leaves(four.state.env_state), strict=True
                )
            ),
            "layout": layout,
        }
        print(
            f"{name}: {time.perf_counter() - started:.1f} s, {time.process_time():.1f} CPU-s", file=sys.stderr
        )
    print(json.dumps(result))


def int_leaves(tree: Any) -> list[Any]:
    return [x for x in jax.tree.leaves(tree) if np.issubdtype(np.asarray(x).dtype, np.integer)]


def float_leaves(tree: Any) -> list[Any]:
    return [x for x in jax.tree.leaves(tree) if np.issubdtype(np.asarray(x).dtype, np.floating)]


if __name__ == "__main__":
    main(sys.argv[1])
