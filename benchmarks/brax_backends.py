"""Compile time and step throughput of each Brax physics backend behind lamella's Brax adapter.

    hatch -e hatch-test.py3.11-envs run python benchmarks/brax_backends.py --env inverted_pendulum

For each backend: the time to compile ``reset`` and ``step`` of the bare adapted env (jit of one
env), and env steps per second of a compiled ``lax.scan`` of ``--steps`` auto-resetting steps over
``--num-envs`` envs with pre-drawn actions (every output folded into a checksum so nothing is
optimised away). Backends are measured in a fixed order in one process; compile times are
single measurements and drift with the machine's load, so compare them within one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp

import lamella.envs
from lamella.envs.adapters.brax import BACKENDS


def measure(env_id: str, num_envs: int, steps: int) -> tuple[float, float, float]:
    env, params = lamella.envs.make(env_id)
    key = jax.random.key(0)
    start = time.perf_counter()
    reset = jax.jit(env.reset).lower(key, params).compile()
    reset_time = time.perf_counter() - start
    obs, state = reset(key, params)
    action = jnp.zeros(env.action_space(params).shape)
    start = time.perf_counter()
    jax.jit(env.step).lower(key, state, action, params).compile()
    step_time = time.perf_counter() - start

    actions = jax.random.uniform(jax.random.key(1), (steps, num_envs, *action.shape), minval=-1, maxval=1)

    @jax.jit
    def rollout(keys: jax.Array, actions: jax.Array) -> jax.Array:
        _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

        def body(carry, action):
            states, total = carry
            obs, states, reward, terminated, truncated, _ = step(keys, states, action, params)
            total = total + obs.sum() + reward.sum() + terminated.sum() + truncated.sum()
            return (states, total), None

        (_, total), _ = jax.lax.scan(body, (states, jnp.zeros(())), actions)
        return total

    keys = jax.random.split(key, num_envs)
    rollout(keys, actions).block_until_ready()
    start = time.perf_counter()
    rollout(keys, actions).block_until_ready()
    return reset_time, step_time, steps * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="inverted_pendulum")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    import brax

    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
        f"brax {brax.__version__}, {args.env}, {args.num_envs} envs x {args.steps} steps"
    )
    print(f"{'backend':<12} {'reset compile s':>16} {'step compile s':>15} {'env steps/s':>12}")
    for backend in BACKENDS:
        reset_time, step_time, rate = measure(f"brax:{args.env}@{backend}", args.num_envs, args.steps)
        print(f"{backend:<12} {reset_time:16.1f} {step_time:15.1f} {rate:12.3g}", flush=True)


if __name__ == "__main__":
    main()
