"""PPO's envs split over 1, 2 and 4 devices (``num_devices``): env steps/s and agreement.

    python benchmarks/ppo_devices.py [--envs 64] [--steps 128] [--iterations 8] [--reps 5] [--seeds 1]
    python benchmarks/ppo_devices.py --algo ippo|mappo|rec_mappo|es|dr|plr [...]

``--algo`` times another runner that splits its batch the same way: IPPO / MAPPO / recurrent
MAPPO on LBF ``Foraging-8x8-2p-2f-coop-v3`` (``--envs`` envs), ES (SNES) on CartPole-v1 (a
population of ``--envs`` members, one episode of at most ``--steps`` steps each), DR / PLR on
AMaze 13x13 (``--envs`` levels).

The devices are SIMULATED CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``,
set here before jax starts): on a machine with 2 cores, "4 devices" are 4 XLA CPU clients
sharing those 2 cores, so the figures measure the cost of the sharded program (the
collectives, the gathered batch, the per-device update shares) and whatever parallelism the
cores give, not what 4 real accelerators would give.

What runs: the driver's own programs (``driver.compile_runner(runner, seeds, num_devices=d)``,
what ``run_experiment(..., num_devices=d)`` runs) for PPO on CartPole-v1 with ``--envs`` envs
and ``--steps`` steps per rollout: one chunk call of ``--iterations`` iterations is timed
(about a second), the device counts alternating (1 2 4 1 2 4 ...), medians and ratios to
1 device reported; compile time separately. The chunk's state and metrics go into a checksum.

Agreement: from the same initial state, the first chunk's metrics (losses, KL, clip fraction,
returns) on d devices against 1 device, the largest relative difference.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import dataclasses
import platform
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents import PRESETS
from lamella.agents.driver import compile_ahead, compile_runner
from lamella.agents.es import ESConfig, make_es_runner
from lamella.agents.ppo import make_ppo_runner

DEVICE_COUNTS = (1, 2, 4)
ALGORITHMS = ("ppo", "ippo", "mappo", "rec_mappo", "es", "dr", "plr")


def build(args: argparse.Namespace) -> tuple[Any, str, int]:
    """``(runner, description, env steps per iteration per seed)`` for ``--algo``."""
    if args.algo == "ppo":
        config = dataclasses.replace(
            PRESETS["ppo"]["CartPole-v1"],
            num_envs=args.envs,
            num_steps=args.steps,
            total_timesteps=args.envs * args.steps * 1000,
            recurrent=args.recurrent,
        )
        kind = "GRU" if args.recurrent else "MLP"
        return make_ppo_runner(config), f"PPO CartPole-v1 ({kind})", args.envs * args.steps
    if args.algo in ("ippo", "mappo", "rec_mappo"):
        from lamella.marl import IPPOConfig, MAPPOConfig, RecMAPPOConfig, make_multi_agent_ppo_runner

        kind = {"ippo": IPPOConfig, "mappo": MAPPOConfig, "rec_mappo": RecMAPPOConfig}[args.algo]
        config = kind(
            env_id="Foraging-8x8-2p-2f-coop-v3",
            num_envs=args.envs,
            num_steps=args.steps,
            total_timesteps=args.envs * args.steps * 1000,
        )
        name = f"{args.algo} Foraging-8x8-2p-2f-coop-v3"
        return make_multi_agent_ppo_runner(config), name, args.envs * args.steps
    if args.algo == "es":
        config = ESConfig(
            population_size=args.envs,
            num_rollouts=1,
            max_episode_steps=args.steps,
            total_timesteps=args.envs * args.steps * 1000,
        )
        # Steps per iteration: the most a generation can use (every episode to the cap).
        return make_es_runner(config), "ES (SNES) CartPole-v1, population", args.envs * args.steps
    from lamella.ued.runners import DRConfig, PLRConfig, make_ued_runner

    common = {
        "num_envs": args.envs,
        "num_steps": args.steps,
        "total_timesteps": args.envs * args.steps * 1000,
    }
    if args.algo == "dr":
        config = DRConfig(**common)
    else:  # PLR scores completed episodes only: an episode must fit in a rollout (PLRConfig.validate)
        config = PLRConfig(**common, max_episode_steps=min(args.steps, PLRConfig.max_episode_steps))
    return make_ued_runner(config), f"{args.algo.upper()} AMaze-13x13-v0, levels", args.envs * args.steps


def checksum(tree: Any) -> float:
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.number)]
    return float(sum(np.sum(np.asarray(x, np.float64)) for x in leaves))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=ALGORITHMS, default="ppo")
    parser.add_argument("--envs", type=int, default=64, help="the batch axis: envs, levels or members")
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=8, help="iterations per timed chunk call")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--recurrent", action="store_true", help="the GRU core (minibatches of whole envs)")
    args = parser.parse_args()
    runner, description, steps_per_iteration = build(args)
    keys = jax.vmap(jax.random.key)(jnp.arange(args.seeds, dtype=jnp.uint32))
    length = jnp.asarray(args.iterations, jnp.int32)
    programs, states, compile_s, first_metrics = {}, {}, {}, {}
    for count in DEVICE_COUNTS:
        start = time.perf_counter()
        compiled = compile_runner(runner, args.seeds, num_devices=count)
        compile_ahead(compiled, keys)
        state = compiled.init(keys)
        jax.block_until_ready(state)
        compile_s[count] = time.perf_counter() - start
        state, metrics = compiled.chunk(state, length)
        first_metrics[count] = {k: np.asarray(v) for k, v in metrics.items()}
        programs[count], states[count] = compiled.chunk, state
    times: dict[int, list[float]] = {count: [] for count in DEVICE_COUNTS}
    total = 0.0
    for _ in range(args.reps):
        for count in DEVICE_COUNTS:
            start = time.perf_counter()
            state, metrics = programs[count](states[count], length)
            jax.block_until_ready((state, metrics))
            times[count].append(time.perf_counter() - start)
            total += checksum((state, metrics))
            states[count] = state
    steps = args.seeds * steps_per_iteration * args.iterations
    print(
        f"{description}, {args.envs} x {args.steps} steps, {args.seeds} seed(s); "
        f"{args.iterations} iterations per call, {args.reps} rounds"
    )
    print(
        f"machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"jax {jax.__version__}; SIMULATED CPU devices sharing those cores (see the docstring)"
    )
    print(
        f"{'devices':>8} {'members/device' if args.algo == 'es' else 'envs/device':>12} {'compile s':>10} {'env steps/s':>12} {'vs 1':>6} {'max rel diff':>13}"
    )
    base = statistics.median(times[1])
    for count in DEVICE_COUNTS:
        median = statistics.median(times[count])
        diff = max(
            float(np.max(np.abs(first_metrics[count][k] - v) / np.maximum(np.abs(v), 1e-3)))
            for k, v in first_metrics[1].items()
        )
        print(
            f"{count:>8} {args.envs // count:>12} {compile_s[count]:>10.1f} {steps / median:>12.3g} "
            f"{base / median:>6.2f} {diff:>13.2e}"
        )
    print(f"(checksum {total:.6g}; max rel diff: first chunk's metrics against 1 device)")


if __name__ == "__main__":
    main()
