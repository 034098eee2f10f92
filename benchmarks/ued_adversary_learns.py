"""Does the teacher learn? The level statistics of a minimax-adversary (or PAIRED) run over training.

    hatch run bench:python benchmarks/ued_adversary_learns.py [--algorithm minimax] [--iterations 300] [--seeds 2]

What is run: the ``ci`` preset of ``--algorithm`` (``minimax``: one student, the teacher paid
minus its return; ``paired``: protagonist and antagonist, the teacher paid the relative regret;
7x7 levels the teacher builds with 8 wall steps, then the goal, then the agent) trained for
``--iterations`` iterations, seeds vmapped in one program. A control run trains the same
students with the teacher frozen at its initial parameters (``teacher_learning_rate=0``), so
that what the students' learning alone does to the statistics is visible.

Reported per seed, as the mean over the first and the last ``--window`` iterations, for the
learning teacher and the frozen one: the teacher's return, the protagonist's solve rate on the
teacher's levels, and the levels' statistics (walls, solvable fraction, start-to-goal distance).

Stated direction (what a learning teacher should do): the minimax adversary is paid for the
student's failure, so its levels should become harder: its return rises and the solvable
fraction of its levels falls, more than with the frozen teacher. PAIRED's teacher is paid the
regret, which unsolvable levels do not earn, so its solvable fraction should not collapse.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time

import jax
import numpy as np

from lamella.agents import make_train
from lamella.ued.paired import make_paired_runner
from lamella.ued.presets import PRESETS

STATS = ("teacher_return", "solve_rate", "level_walls", "level_solvable", "level_goal_distance")


def train(config, seeds: int) -> dict[str, np.ndarray]:
    runner = make_paired_runner(config)
    train_fn = jax.jit(jax.vmap(make_train(runner)))
    _, metrics = train_fn(jax.random.split(jax.random.key(0), seeds))
    return {name: np.asarray(metrics[name]) for name in STATS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithm", default="minimax", choices=("minimax", "paired", "population_paired"))
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--window", type=int, default=30)
    args = parser.parse_args()
    if args.iterations < 2 * args.window:
        parser.error(f"--iterations ({args.iterations}) must be at least twice --window ({args.window}).")

    base = PRESETS[args.algorithm]["ci"]
    config = dataclasses.replace(base, total_timesteps=base.steps_per_iteration * args.iterations)
    print(
        f"{args.algorithm} ci preset, {args.iterations} iterations, {args.seeds} seeds; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}"
    )
    runs = {}
    for label, run_config in (
        ("learning teacher", config),
        ("frozen teacher", dataclasses.replace(config, teacher_learning_rate=0.0)),
    ):
        start = time.perf_counter()
        runs[label] = train(run_config, args.seeds)
        print(f"{label}: {time.perf_counter() - start:.0f} s (compile included)")

    w = args.window
    print(f"\nmean over the first / last {w} iterations, per seed")
    print("| statistic | run | " + " | ".join(f"seed {s}" for s in range(args.seeds)) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in range(args.seeds)) + " |")
    for name in STATS:
        for label, metrics in runs.items():
            series = metrics[name]
            cells = [f"{series[s, :w].mean():.3f} -> {series[s, -w:].mean():.3f}" for s in range(args.seeds)]
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
