"""The child process of ``test_devices_offpolicy_shaping.py``: IDQN and ISAC (the off-policy loop,
envs split), recurrent IQL (its own sequence loop, envs split), the opponent-shaping RL runner
(envs split; opponents' instances split) and the evolved meta-agents (``mfos_es``, ``meta_es``:
population split) on 4 simulated CPU devices and on 1, printed as JSON.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before jax is imported, so
this runs in its own process (the parent's test suite keeps one device). It computes; the
parent asserts. Usage: ``python devices_offpolicy_shaping_child.py OUT_DIR`` (the parent sets
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
from lamella.marl import IDQNConfig, ISACConfig, RecIQLConfig
from lamella.marl.shaping import MetaConfig, MetaESConfig, ShapingConfig

# 8 envs (2 per device), batches of 16 (4 per device); learning starts in the first iteration,
# so every iteration's metrics include updates. Four iterations in two chunks: three evaluations.
LOOP: dict[str, Any] = {
    "num_envs": 8,
    "batch_size": 16,
    "buffer_size": 512,
    "rollout_steps": 8,
    "total_timesteps": 8 * 8 * 4,
    "learning_starts": 32,
    "hidden_sizes": (16,),
    "eval_episodes": 2,
    "eval_max_steps": 20,
}
# The two ways of making a single-agent learner independent: one shared network whose batch is
# the agents' rows (IDQN: action masks, epsilon-greedy), and one network per agent vmapped over
# the agent axis (ISAC: each agent's rows of the whole batch's actor noise).
OFFPOLICY: dict[str, Any] = {
    "idqn": IDQNConfig(**LOOP, exploration_steps=128),
    "isac": ISACConfig(
        **LOOP,
        env_id="MPE-simple_spread-v3",
        env_kwargs=("continuous_actions=true", "N=2"),
        share_parameters=False,
    ),
}
# Recurrent IQL on LBF (action masks): 8 envs, windows of 1 burn-in + 3 steps, 8 windows per
# update (2 per device), soft target updates; updates from the first iteration on (one window
# of 4 steps stored).
RECURRENT = RecIQLConfig(
    env_id="Foraging-5x5-2p-1f-coop-v3",
    num_envs=8,
    rollout_length=4,
    total_timesteps=8 * 4 * 4,
    buffer_size=64,
    min_buffer_size=4,
    sample_batch_size=8,
    sample_sequence_length=3,
    burn_in=1,
    eps_decay=64,
    hidden_sizes=(8,),
    rnn_hidden_size=8,
    post_torso_sizes=(8,),
    eval_episodes=2,
    eval_max_steps=20,
)
# The shaping RL runner on the IPD (episodes of 4 rounds), 8 envs (2 per device), minibatches of
# 32 steps (8 per device):
# a PPO learner over the split envs against a fixed strategy (which acts on every env on every
# device), and a recurrent PPO learner over the split envs against 4 PPO opponents (one instance,
# with its 2 envs, per device).
SHAPING_COMMON: dict[str, Any] = {
    "num_envs": 8,
    "num_steps": 8,
    "num_inner_steps": 4,
    "num_minibatches": 2,
    "num_epochs": 2,
    "total_timesteps": 8 * 8 * 4,
}
SHAPING: dict[str, Any] = {
    "shaping_tft": ShapingConfig(**SHAPING_COMMON, eval_episodes=2),
    "shaping_ppo": ShapingConfig(
        **SHAPING_COMMON, agents=("ppo", "ppo"), num_opponents=4, eval_episodes=4, recurrent=True
    ),
}
# 8 members (2 per device), four generations (two chunks of two, one compiled chunk): Open_ES against exact-gradient naive learners,
# CMA-ES against PPO co-players that learn over two inner episodes.
POPULATION: dict[str, Any] = {
    "mfos_es": MetaESConfig(
        population_size=8,
        num_outer_steps=5,
        total_timesteps=8 * 4 * 5 * 4,
        eval_episodes=2,
        hidden_sizes=(8,),
    ),
    "meta_es": MetaConfig(
        population_size=8,
        num_envs=2,
        num_inner_steps=4,
        num_outer_steps=2,
        total_timesteps=8 * 2 * 4 * 2 * 4,
        eval_episodes=2,
    ),
}


def main(out_dir: str) -> None:
    result: dict[str, Any] = {"device_count": jax.device_count()}
    compiled = count_compile_ahead()  # the bad inputs below must fail before any compile

    train = device_trainer(out_dir)

    started = time.perf_counter()
    result["errors"] = {
        "num_envs": error_text(
            lambda: train(dataclasses.replace(OFFPOLICY["idqn"], num_envs=6), 4, "num_envs")
        ),
        "batch_size": error_text(
            lambda: train(dataclasses.replace(OFFPOLICY["isac"], batch_size=6), 4, "batch_size")
        ),
        "windows": error_text(
            lambda: train(dataclasses.replace(RECURRENT, sample_batch_size=6), 4, "windows")
        ),
        "opponents": error_text(
            lambda: train(dataclasses.replace(SHAPING["shaping_ppo"], num_opponents=2), 4, "opponents")
        ),
        "shaping_minibatch": error_text(
            lambda: train(
                dataclasses.replace(SHAPING["shaping_tft"], num_minibatches=32), 4, "shaping_minibatch"
            )
        ),
        "population": error_text(
            lambda: train(dataclasses.replace(POPULATION["mfos_es"], population_size=6), 4, "population")
        ),
        "meta_population": error_text(
            lambda: train(
                dataclasses.replace(POPULATION["meta_es"], population_size=10), 4, "meta_population"
            )
        ),
    }
    result["compiled_before_errors"] = len(compiled)
    result["dirs_written"] = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []

    result["runs"] = {}
    for name, config in {**OFFPOLICY, "rec_iql": RECURRENT, **SHAPING, **POPULATION}.items():
        one, four = train(config, 1, f"{name}_1"), train(config, 4, f"{name}_4")
        with open(four.config_path, encoding="utf-8") as handle:
            layout = json.load(handle)["devices"]
        run: dict[str, Any] = {
            "metrics": {"1": flat_run_log(one.metrics_path), "4": flat_run_log(four.metrics_path)},
            "layout": layout,
        }
        if name in SHAPING:
            trained = [r.state.train_states for r in (one, four)]
            run.update(
                state_max_abs_diff=max_abs_diff(*trained),
                state_max_abs=max_abs(trained[0]),
                env_state_max_abs_diff=max_abs_diff(one.state.env_state, four.state.env_state),
                # Adam's step counts of every learner and instance: the updates ran.
                adam_counts=[sorted({int(x) for x in integer_leaves(t)}) for t in trained],
            )
        elif name not in POPULATION:
            trained = [r.state.train_state for r in (one, four)]
            # The online networks against their target copies, which started equal: learning moved them.
            online, target = (
                ("critic_params", "target_critic_params") if name == "isac" else ("params", "target_params")
            )
            run.update(
                state_max_abs_diff=max_abs_diff(*trained),
                state_max_abs=max_abs(trained[0]),
                buffer_max_abs_diff=max_abs_diff(one.state.buffer_state, four.state.buffer_state),
                updates=[int(np.asarray(t.updates).max()) for t in trained],
                moved=max_abs_diff(getattr(trained[0], online), getattr(trained[0], target)),
            )
        else:
            searched = [r.state.search_state for r in (one, four)]
            run.update(
                state_max_abs_diff=max_abs_diff(*searched),
                state_max_abs=max_abs(searched[0]),
                generations=[int(np.asarray(s.generation_counter).max()) for s in searched],
                best_fitness=[float(np.asarray(s.best_fitness).max()) for s in searched],
            )
        result["runs"][name] = run
        print(
            f"{name}: {time.perf_counter() - started:.1f} s, {time.process_time():.1f} CPU-s", file=sys.stderr
        )
    print(json.dumps(result))


def integer_leaves(tree: Any) -> list[Any]:
    """Every entry of the integer leaves of ``tree``."""
    return [
        v
        for x in jax.tree.leaves(tree)
        if np.issubdtype(np.asarray(x).dtype, np.integer)
        for v in np.ravel(np.asarray(x))
    ]


if __name__ == "__main__":
    main(sys.argv[1])
