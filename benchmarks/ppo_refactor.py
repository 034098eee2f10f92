"""PPO on CartPole-v1: today's ppo.py against an earlier ppo.py, side by side in one process.

    git show 033a90b:packages/agents/src/lamella/agents/ppo.py > /tmp/ppo_old.py
    python benchmarks/ppo_refactor.py --old /tmp/ppo_old.py [--reps 5] [--seeds64-steps 4096]

The earlier file is loaded as a module beside today's ``lamella.agents.ppo`` and uses today's
shared modules (networks, distributions, losses, runner). Both build their runner from
``PRESETS["ppo"]["CartPole-v1"]``. Measured, alternating old / new (BENCHMARKS.md: interleaved,
medians, ratios; the machine is shared, so only the ratio means something):

* compile: tracing + XLA compile of the driver's three programs for one seed
  (``driver.compile_runner`` + ``driver.compile_ahead``, what ``lamella train`` does; jit caches
  cleared before each), and of one ``jit(train)`` over the whole budget;
* env steps/s: that compiled ``train`` for one seed, the whole 2e5-step budget;
* seeds/s: 64 seeds vmapped in one call, ``--seeds64-steps`` steps each.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

from lamella.agents import PRESETS, make_train
from lamella.agents import ppo as new_ppo
from lamella.agents.driver import compile_ahead, compile_runner


def load_old(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("lamella_agents_ppo_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def checksum(tree: Any) -> float:
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.number)]
    return float(sum(jnp.sum(jnp.asarray(x, jnp.float32)) for x in leaves))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", required=True, help="path of the earlier ppo.py")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seeds64-steps", type=int, default=4096)
    args = parser.parse_args()
    sides = {"old": load_old(args.old), "new": new_ppo}
    config = PRESETS["ppo"]["CartPole-v1"]
    key = jax.random.key(0)
    jax.jit(lambda x: jnp.tanh(x) @ x).lower(jnp.ones((4, 4))).compile()  # one-time compiler start-up

    driver_compile: dict[str, list[float]] = {name: [] for name in sides}
    train_compile: dict[str, list[float]] = {name: [] for name in sides}
    compiled_train: dict[str, Any] = {}
    for _ in range(args.reps):
        for name, module in sides.items():
            jax.clear_caches()

            def driver_programs(module: Any = module) -> Any:
                compiled = compile_runner(module.make_ppo_runner(config))
                compile_ahead(compiled, key[None])
                return compiled.init(key[None])

            driver_compile[name].append(timed(driver_programs)[0])
            jax.clear_caches()
            seconds, compiled_train[name] = timed(
                lambda module=module: jax.jit(make_train(module.make_ppo_runner(config))).lower(key).compile()
            )
            train_compile[name].append(seconds)

    run_times: dict[str, list[float]] = {name: [] for name in sides}
    for name in sides:
        checksum(compiled_train[name](key))  # warm-up
    for rep in range(args.reps):
        for name in sides:
            seconds, out = timed(lambda name=name, rep=rep: compiled_train[name](jax.random.key(rep)))
            run_times[name].append(seconds)
            checksum(out)

    small = dataclasses.replace(config, total_timesteps=args.seeds64_steps)
    keys = jax.random.split(jax.random.key(1), 64)
    many = {
        name: jax.jit(jax.vmap(make_train(module.make_ppo_runner(small)))).lower(keys).compile()
        for name, module in sides.items()
    }
    many_times: dict[str, list[float]] = {name: [] for name in sides}
    for name in sides:
        checksum(many[name](keys))
    for _ in range(args.reps):
        for name in sides:
            seconds, out = timed(lambda name=name: many[name](keys))
            many_times[name].append(seconds)
            checksum(out)

    steps = config.total_timesteps // config.steps_per_iteration * config.steps_per_iteration
    rows = [
        ("driver compile, 1 seed (s)", driver_compile, lambda t: t, "lower"),
        ("jit(train) compile, 1 seed (s)", train_compile, lambda t: t, "lower"),
        ("env steps/s, 1 seed", run_times, lambda t: steps / t, "higher"),
        (f"seeds/s, 64 seeds x {args.seeds64_steps} steps", many_times, lambda t: 64 / t, "higher"),
    ]
    print(f"jax {jax.__version__}, {os.cpu_count()} cores, {args.reps} interleaved repetitions, medians")
    print("| measure | old | new | new / old |")
    print("| --- | --- | --- | --- |")
    for label, times, convert, _ in rows:
        old, new = (convert(statistics.median(times[name])) for name in ("old", "new"))
        print(f"| {label} | {old:.3g} | {new:.3g} | {new / old:.2f} |")
    for label, times, _, _ in rows:
        print(f"{label}: " + ", ".join(f"{name} {[round(t, 2) for t in ts]}" for name, ts in times.items()))


if __name__ == "__main__":
    main()
