"""PPO on CartPole-v1: where training time goes, lamella against the PureJaxRL-style reference.

    python benchmarks/ppo_update_split.py [--reps 5] [--envs 8 16]
    taskset -c 0 python benchmarks/ppo_update_split.py      # the same on one core

Both sides are ``benchmarks/ppo_cartpole.py``'s, on ``PRESETS["ppo"]["CartPole-v1"]`` with
``num_envs`` set. For each env count and side, one compiled call trains one seed for the whole
budget twice: with the preset's update ("full") and with one gradient step per iteration
(``num_epochs=1, num_minibatches=1``: the rollout, GAE and one minibatch). The difference is the
update's share. Timed calls interleaved, medians (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ppo_cartpole import checksum, full_train, make_lamella, make_reference

from lamella.agents import PRESETS

SIDES = {"lamella": make_lamella, "reference": make_reference}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions of each timing")
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 16], help="env counts to measure")
    args = parser.parse_args()

    base = PRESETS["ppo"]["CartPole-v1"]
    jax.jit(lambda x: jnp.tanh(x) @ x).lower(jnp.ones((4, 4))).compile()  # compiler start-up
    compiled = {}
    for envs in args.envs:
        for update in ("full", "one-step"):
            config = dataclasses.replace(base, num_envs=envs)
            if update == "one-step":
                config = dataclasses.replace(config, num_epochs=1, num_minibatches=1)
            for name, make in SIDES.items():
                train = jax.jit(full_train(make(config))).lower(jax.random.key(0)).compile()
                checksum(train(jax.random.key(0)))
                compiled[envs, update, name] = train
    times: dict[tuple[int, str, str], list[float]] = {case: [] for case in compiled}
    for rep in range(args.reps):
        for case, train in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(train(jax.random.key(rep)))
            times[case].append(time.perf_counter() - start)
    median = {case: statistics.median(values) for case, values in times.items()}

    print(f"jax {jax.__version__}, {len(os.sched_getaffinity(0))} core(s) usable, medians of {args.reps}")
    print("| envs | side | full (s) | one-step (s) | update part (s) |")
    print("| --- | --- | --- | --- | --- |")
    part = {}
    for envs in args.envs:
        for name in SIDES:
            full, one = median[envs, "full", name], median[envs, "one-step", name]
            part[envs, name] = full - one
            print(f"| {envs} | {name} | {full:.3f} | {one:.3f} | {full - one:.3f} |")
    for envs in args.envs:
        ratio = {
            update: median[envs, update, "lamella"] / median[envs, update, "reference"]
            for update in ("full", "one-step")
        }
        print(
            f"{envs} envs, lamella / reference: full {ratio['full']:.2f}, one-step {ratio['one-step']:.2f}, "
            f"update part {part[envs, 'lamella'] / part[envs, 'reference']:.2f}"
        )


if __name__ == "__main__":
    main()
