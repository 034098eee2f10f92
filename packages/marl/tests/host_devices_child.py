"""The child process of ``test_host_devices.py``: the PettingZoo host loop (``train_host``) with
its updates split over 4 simulated CPU devices and on 1, printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes, the parent
asserts. Usage: ``python host_devices_child.py OUT_DIR`` (the parent sets ``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

import jax
import numpy as np
from mpe2 import simple_speaker_listener_v4  # a test dependency of lamella-marl

from lamella.agents.testing import error_text
from lamella.marl import IPPOConfig, RecMAPPOConfig, host

# 8 envs, 2 per device; minibatches of 8 * 8 / 2 = 32 env steps (8 per device); recurrent
# minibatches of 4 envs (1 per device). Value normalisation on: the target statistics pool over
# the devices. 3 updates of 2 epochs x 2 minibatches.
COMMON: dict[str, Any] = {
    "env_id": "mpe2-simple_speaker_listener_v4",
    "num_envs": 8,
    "num_steps": 8,
    "num_minibatches": 2,
    "num_epochs": 2,
    "total_timesteps": 8 * 8 * 3,
    "eval_episodes": 2,
    "hidden_sizes": (16,),
    "normalize_values": True,
    "learning_rate": 3e-3,
    "team_reward": False,
}
# Feed-forward IPPO with continuous actions (a Gaussian per agent), recurrent MAPPO (GRU memory
# split with its envs, a centralised critic on env.state()) with discrete ones.
RUNS: dict[str, tuple[Any, bool]] = {
    "ippo_continuous": (IPPOConfig(**COMMON), True),
    "rec_mappo_discrete": (RecMAPPOConfig(**COMMON, post_torso_sizes=(16,), rnn_hidden_size=8), False),
}


def make_env(continuous: bool, made: list[int] | None = None) -> Any:
    def make() -> Any:
        if made is not None:
            made.append(1)
        return simple_speaker_listener_v4.parallel_env(continuous_actions=continuous)

    return make


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    made: list[int] = []  # envs made by the refused runs: none (refused before anything starts)
    ippo, rec = RUNS["ippo_continuous"][0], RUNS["rec_mappo_discrete"][0]
    train = lambda config, devices: host.train_host(config, make_env(True, made), num_devices=devices)  # noqa: E731
    result["errors"] = {
        "too_many": error_text(lambda: train(ippo, 8)),
        "not_divisible": error_text(lambda: train(dataclasses.replace(ippo, num_envs=6), 4)),
        "minibatch": error_text(
            lambda: train(dataclasses.replace(ippo, num_envs=4, num_steps=2, num_minibatches=4), 4)
        ),
        "recurrent_minibatch": error_text(lambda: train(dataclasses.replace(rec, num_minibatches=4), 4)),
        "not_an_int": error_text(lambda: train(ippo, 2.0)),
    }
    result["envs_made_before_errors"] = len(made)
    result["runs"] = {}
    started = time.perf_counter()
    for name, (config, continuous) in RUNS.items():
        one, four = (
            host.train_host(config, make_env(continuous), seed=3, num_devices=devices) for devices in (1, 4)
        )
        params = [jax.tree.leaves(r.train_state.params) for r in (one, four)]
        result["runs"][name] = {
            "train_metrics": {"1": one.train_metrics, "4": four.train_metrics},
            "eval_agent_returns": {"1": one.eval_agent_returns, "4": four.eval_agent_returns},
            "params_max_abs_diff": max(
                float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(*params, strict=True)
            ),
            "params_max_abs": max(float(np.max(np.abs(np.asarray(a)))) for a in params[0]),
            "params_changed": max(
                float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip(params[0], jax.tree.leaves(initial_params(config, continuous)), strict=True)
            ),
            "value_stats_count": [float(np.asarray(r.train_state.value_stats.count)) for r in (one, four)],
            "state_on_first_device": all(
                x.devices() == {jax.devices()[0]} for x in jax.tree.leaves(four.train_state)
            ),
        }
        print(
            f"{name}: {time.perf_counter() - started:.1f} s, {time.process_time():.1f} CPU-s", file=sys.stderr
        )
    print(json.dumps(result))


def initial_params(config: Any, continuous: bool) -> Any:
    """The parameters the runs started from (seed 3's init, the host loop's first key split)."""
    batch = host.ParallelEnvBatch(
        [make_env(continuous)() for _ in range(config.num_envs)], config.centralised_critic
    )
    bounds = (tuple(batch.action_low.tolist()), tuple(batch.action_high.tolist()))
    pieces = host._compiled(config, batch.num_agents, batch.num_actions, bounds, 1)
    _, key_init = jax.random.split(jax.random.key(3))
    train_state, _ = pieces.init(key_init, batch.reset(3))
    return train_state.params


if __name__ == "__main__":
    main(sys.argv[1])
