"""A sweep of 16 PPO configs as ONE compiled program against 16 separate runs: wall time.

    python benchmarks/sweep_one_program.py [--envs 8] [--steps 64] [--iterations 10] [--seeds 1]

The 16 configs: learning_rate x clip_eps, 4 x 4 values, on CartPole-v1 (``--envs`` envs,
``--steps`` steps per rollout, ``--iterations`` iterations, ``--seeds`` seeds each).

* one program: ``lamella.agents.sweep.plan_sweep`` + ``run_sweep`` (what ``lamella sweep ppo
  --grid learning_rate=... clip_eps=...`` runs): both fields are traced, so the 16 configs x
  seeds train side by side in one compiled program (one compile, one population axis);
* 16 runs: ``run_experiment`` once per config in this process, what a script looping over
  configs does (each config is a new program, so each compiles; separate processes would add
  JAX's import and start-up on top).

Both sides write the same run logs (evaluations, checkpoints) with the same chunking, and
wall time includes every compile. The final greedy returns of the two sides are compared
(the same seeds and keys: they agree up to float reassociation inside the vmapped program),
which also consumes every result. The sides run once each, alternately ``--reps`` times
(16-runs, one-program, ...), medians reported: on a shared machine the ratio is the figure.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import dataclasses
import platform
import statistics
import tempfile
import time

import jax
import numpy as np

from lamella.agents import sweep
from lamella.agents.config import resolve_config
from lamella.agents.driver import run_experiment

LEARNING_RATES = (3e-4, 1e-3, 2.5e-3, 5e-3)
CLIPS = (0.1, 0.2, 0.3, 0.4)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    config = resolve_config("ppo", "CartPole-v1")
    config = dataclasses.replace(
        config,
        num_envs=args.envs,
        num_steps=args.steps,
        total_timesteps=args.envs * args.steps * args.iterations,
        num_minibatches=2,
    )
    grid = {"learning_rate": list(LEARNING_RATES), "clip_eps": list(CLIPS)}
    times: dict[str, list[float]] = {"16 runs": [], "one program": []}
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            separate = {}
            for lr in LEARNING_RATES:
                for clip in CLIPS:
                    result = run_experiment(
                        dataclasses.replace(config, learning_rate=lr, clip_eps=clip),
                        algorithm="ppo",
                        seeds=args.seeds,
                        out_dir=os.path.join(folder, f"run-{lr}-{clip}"),
                        progress=False,
                        plot=False,
                    )
                    separate[sweep.config_label("ppo", {"learning_rate": lr, "clip_eps": clip})] = (
                        result.final_return
                    )
            times["16 runs"].append(time.perf_counter() - start)

            start = time.perf_counter()
            plan = sweep.plan_sweep("ppo", config, grid, args.seeds)
            assert len(plan.programs) == 1 and plan.traced == ["learning_rate", "clip_eps"]
            swept = sweep.run_sweep(plan, os.path.join(folder, "sweep"), progress=False)
            times["one program"].append(time.perf_counter() - start)
        difference = max(float(np.max(np.abs(np.asarray(swept.scores[k]) - separate[k]))) for k in separate)
        print(f"largest |final return difference| between the sides: {difference:.3g}")
    print(
        f"\n16 PPO configs (learning_rate x clip_eps) on CartPole-v1, {args.envs} envs x {args.steps} steps x "
        f"{args.iterations} iterations, {args.seeds} seed(s) each; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, jax {jax.__version__} ({jax.default_backend()}); medians of {args.reps}"
    )
    print("| how | wall time (s, compiles included) | ratio |")
    print("| --- | --- | --- |")
    base = statistics.median(times["16 runs"])
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.1f} | {base / statistics.median(values):.2f}x |")


if __name__ == "__main__":
    main()
