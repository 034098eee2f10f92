"""Does a curriculum help on harder Level-Based Foraging? DR, Robust PLR, ACCEL and PAIRED at one budget.

    hatch run bench:python benchmarks/ued_foraging_curricula.py [--iterations 60] [--seeds 3]
        [--algorithms dr plr accel paired] [--out runs/ued_foraging_curricula]
        [--env Foraging-8x8-2p-2f-coop-v3]

What is run: each algorithm's ``Foraging-8x8-2p-2f-v3`` preset (8x8 levels, 2 agents, 2 foods,
50-step episodes, 2 agents sharing a 64-64 MLP, 32 envs x 100 steps per iteration) trained for
``--iterations`` iterations, ``--seeds`` seeds in one vmapped program, through the driver
(``lamella.agents.driver.run_experiment``: chunks, run log, checkpoints), so every algorithm gets
the same number of the student's env steps (PAIRED's antagonist and teacher play on top of
that, as in PAIRED's own accounting). Then each final student is evaluated, actions sampled,
on ``--episodes`` fresh random levels of the layout (DR's distribution, the same levels for
every algorithm and seed) and the same number of episodes on each named level that fits the
layout (``SplitFoods``, ``CoopCorners``), and on the same levels with the uniformly random
policy (the student's network with its action head zeroed) as the floor. ``--env`` trains the
same presets on another LBF id of the same shape (the ``-coop`` variant, where every food needs
both agents), evaluated on the named levels that fit it.

Reported: one table, per test level the IQM of the seeds' solve rates with a 95 % stratified
bootstrap interval over seeds (``lamella.eval.interval_estimates``; with 3 seeds the IQM is the
mean), the per-seed solve rates, and each algorithm's process CPU time (compile included).
Results are kept in ``<out>/results.json`` per algorithm, so several processes may train
different ``--algorithms`` into one folder; ``--report`` prints the table of what is there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.agents.driver import run_experiment
from lamella.envs.multi_agent import lbf
from lamella.eval import estimates_table, interval_estimates, to_markdown
from lamella.ued.paired import make_paired_runner
from lamella.ued.presets import FORAGING_8X8_ID, PRESETS
from lamella.ued.runners import make_ued_runner

ALGORITHMS = ("dr", "plr", "accel", "paired")
PAIRED_LIKE = ("paired", "minimax", "population_paired")
EVAL_KEY = 2024


def uniform_policy(params):
    """The same network with its action head zeroed: a uniformly random policy."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "'head'" in jax.tree_util.keystr(path) else x, params
    )


def evaluate(name: str, config, state, episodes: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Solve rates ``(seeds, levels)`` of the trained students and of the random policy."""
    eval_config = dataclasses.replace(config, eval_episodes=episodes)
    make = make_paired_runner if name in PAIRED_LIKE else make_ued_runner
    runner = make(eval_config)
    program = jax.jit(jax.vmap(runner.evaluate, in_axes=(0, None)))
    key = jax.random.key(EVAL_KEY)
    trained = np.asarray(program(state, key)["solved"].mean(axis=1))
    if name in PAIRED_LIKE:
        floor_state = state.replace(student_params=uniform_policy(state.student_params))
    else:
        floor_state = state.replace(params=uniform_policy(state.params))
    floor = np.asarray(program(floor_state, key)["solved"].mean(axis=1))
    return list(eval_config.eval_levels), trained, floor


def train_one(name: str, env_id: str, iterations: int, seeds: int, episodes: int, out: str) -> dict:
    base = PRESETS[name][FORAGING_8X8_ID]
    env, _ = lamella.envs.make(env_id, autoreset=False)
    config = dataclasses.replace(
        base,
        env_id=env_id,
        eval_levels=("random", *lbf.named_levels_for(env.unwrapped)),
        total_timesteps=base.steps_per_iteration * iterations,
        eval_episodes=32,  # the driver's evaluations during training: small, the final one below
    )
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    result = run_experiment(
        config,
        seeds=seeds,
        algorithm=name,
        out_dir=os.path.join(out, name),
        chunk_iterations=max(1, iterations // 4),
        progress=False,
        plot=False,
    )
    levels, trained, floor = evaluate(name, config, result.state, episodes)
    record = {
        "levels": levels,
        "solved": trained.tolist(),
        "random_policy": floor.tolist(),
        "iterations": iterations,
        "env_steps_per_seed": result.step_count,
        "process_cpu_s": time.process_time() - start_cpu,
        "wall_s": time.perf_counter() - start_wall,
        "load_average": os.getloadavg(),
    }
    print(f"{name}: {json.dumps(record)}", flush=True)
    return record


def report(results: dict, env_id: str) -> None:
    names = [n for n in (*ALGORITHMS, "minimax", "population_paired") if n in results]
    if not names:
        print("no results yet")
        return
    levels = results[names[0]]["levels"]
    first = results[names[0]]
    print(
        f"\n{first['iterations']} iterations ({first['env_steps_per_seed']:,} env steps per seed), "
        f"{len(first['solved'])} seeds, {env_id}; solve rate, IQM over seeds [95 % bootstrap CI]"
    )
    for index, level in enumerate(levels):
        scores = {n: np.asarray(results[n]["solved"])[:, index : index + 1] for n in names}
        scores["uniformly random"] = np.asarray(results[names[0]]["random_policy"])[:, index : index + 1]
        estimates = interval_estimates(scores, ("iqm",), reps=2000, key=0)
        header, rows = estimates_table(estimates, digits=2)
        for row in rows:
            if row[0] in results:
                per_seed = ", ".join(f"{x:.2f}" for x in np.asarray(results[row[0]]["solved"])[:, index])
                row.append(per_seed)
                row.append(f"{results[row[0]]['process_cpu_s']:.0f}")
            else:
                row.extend(["", ""])
        print(f"\nlevel: {level}")
        print(to_markdown(([*header, "solve rate per seed", "process CPU-s"], rows)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=256, help="final evaluation episodes per level")
    parser.add_argument("--algorithms", nargs="*", default=list(ALGORITHMS))
    parser.add_argument("--env", default=FORAGING_8X8_ID, help="an LBF id with 8x8 levels, 2 agents, 2 foods")
    parser.add_argument("--out", default="runs/ued_foraging_curricula")
    parser.add_argument("--report", action="store_true", help="only print the table of <out>/results.json")
    args = parser.parse_args()
    path = os.path.join(args.out, "results.json")
    print(
        f"jax {jax.__version__}, {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if not args.report:
        os.makedirs(args.out, exist_ok=True)
        for name in args.algorithms:
            record = train_one(name, args.env, args.iterations, args.seeds, args.episodes, args.out)
            results = json.load(open(path)) if os.path.exists(path) else {}
            results[name] = record
            with open(path, "w") as handle:
                json.dump(results, handle, indent=1)
    report(json.load(open(path)) if os.path.exists(path) else {}, args.env)


if __name__ == "__main__":
    main()
