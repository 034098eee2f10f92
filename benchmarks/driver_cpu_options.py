"""Whole training runs with the driver's CPU compile options against XLA's defaults.

    python benchmarks/driver_cpu_options.py [--pairs 5] [--ppo-steps 100000] [--sac-steps 8000]

Each timed run is a fresh process (nothing compiled or cached before it) that calls
``run_experiment`` for one seed, compile and training included: PPO's ``CartPole-v1`` preset and
SAC's ``Pendulum-v1`` preset with fewer steps. One side keeps what ``driver.compile_options`` gives
(the options the installed XLA accepts: on jax 0.11 and later the optimisation levels alone), the
other compiles every program with XLA's defaults (``compile_options`` patched to return ``None``,
what the driver gave on jax 0.11 and later before each option was probed alone). The two sides
alternate, the order flipped every pair; printed: each side's median wall and CPU seconds (user +
system of the process) and the median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def child(side: str, algorithm: str, steps: int) -> None:
    start = time.perf_counter()
    import jax

    from lamella.agents import driver

    if side == "xla":
        driver.compile_options = lambda program, num_seeds=1, mode="auto": None  # type: ignore[assignment]
    if algorithm == "ppo":
        from lamella.agents import PRESETS, make_ppo_runner

        config = dataclasses.replace(PRESETS["ppo"]["CartPole-v1"], total_timesteps=steps)
        make_runner = make_ppo_runner
    else:
        from lamella.agents.offpolicy.presets import PRESETS as OFF_POLICY
        from lamella.agents.offpolicy.presets import make_offpolicy_runner_of

        config = dataclasses.replace(OFF_POLICY["sac"]["Pendulum-v1"], total_timesteps=steps)
        make_runner = make_offpolicy_runner_of
    with tempfile.TemporaryDirectory() as out_dir:
        driver.run_experiment(
            config,
            seeds=1,
            out_dir=out_dir,
            progress=False,
            plot=False,
            algorithm=algorithm,
            make_runner=make_runner,
        )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    options = {p: driver.compile_options(p) for p in ("init", "chunk", "evaluate")}
    print(
        "RESULT "
        + json.dumps(
            {
                "wall": time.perf_counter() - start,
                "cpu": usage.ru_utime + usage.ru_stime,
                "jax": jax.__version__,
                "options": options,
            }
        )
    )


def run(side: str, algorithm: str, steps: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, algorithm, str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--ppo-steps", type=int, default=100_000)
    parser.add_argument("--sac-steps", type=int, default=8_000)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    for algorithm, steps in (("ppo", args.ppo_steps), ("sac", args.sac_steps)):
        results: dict[str, list[dict[str, float]]] = {"driver": [], "xla": []}
        for pair in range(args.pairs):
            order = ("xla", "driver") if pair % 2 == 0 else ("driver", "xla")
            for side in order:
                results[side].append(run(side, algorithm, steps))
        first = results["driver"][0]
        print(
            f"{algorithm} ({steps} steps, one seed), jax {first['jax']}; driver options: {first['options']}"
        )
        for side, rows in results.items():
            wall = statistics.median(r["wall"] for r in rows)
            cpu = statistics.median(r["cpu"] for r in rows)
            print(f"  {side:<7} wall {wall:6.2f} s  CPU {cpu:6.2f} s")
        for clock in ("wall", "cpu"):
            ratios = [x[clock] / d[clock] for x, d in zip(results["xla"], results["driver"], strict=True)]
            print(
                f"  XLA defaults / driver, {clock}: median {statistics.median(ratios):.3f} "
                f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
            )


if __name__ == "__main__":
    main()
