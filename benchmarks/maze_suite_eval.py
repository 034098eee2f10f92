"""Named-maze suite evaluation time: minimax's LSTM student on PerfectMazeXL and on minimax-test.

    hatch run bench:python benchmarks/maze_suite_eval.py [--episodes 100] [--seeds 1]

What is timed: :func:`lamella.ued.suites.evaluate_suite` (what ``lamella eval checkpoints
--suite`` runs per checkpoint) with the student of the ``AMaze-13x13-v0`` presets (minimax's:
3x3 conv, LSTM 256, 32-unit heads), untrained parameters, actions sampled (minimax's protocol).
An untrained student almost never reaches the goal, so nearly every episode runs to the maze's
horizon (21,218 steps on PerfectMazeXL): the worst case. Reported: the first call (compile and
run) and the median of ``--repeats`` further calls (run only), with the episodes' mean length as
the check that the work was done. minimax's own evaluation of 500 PerfectMazeXL episodes takes
more than an hour on an L4 GPU (its issue #11): its step computes a full 101x101 maze reset on
every step, which lamella's evaluation loop never does.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

from lamella.ued import suites
from lamella.ued.presets import PRESETS
from lamella.ued.runners import make_actor_critic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = PRESETS["dr"]["AMaze-13x13-v0"]
    from lamella.envs import maze

    actor_critic = make_actor_critic(config, maze.AMaze().action_space())
    obs = {"image": np.zeros((1, 5, 5, 3), np.uint8), "agent_dir": np.zeros((1,), np.int32)}
    keys = jax.random.split(jax.random.key(0), args.seeds)
    params = jax.vmap(lambda k: actor_critic.init(k, obs))(keys)
    print(
        f"jax {jax.__version__}, {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"{args.seeds} seed(s) x {args.episodes} episodes per maze, LSTM-256 student, sampled actions"
    )
    for suite in ("PerfectMazeXL", "minimax-test"):
        start = time.perf_counter()
        out = suites.evaluate_suite(config, params, suite, keys, args.episodes)
        first = time.perf_counter() - start
        times = []
        for repeat in range(args.repeats):
            start = time.perf_counter()
            out = suites.evaluate_suite(
                config, params, suite, jax.random.split(jax.random.key(repeat + 1), args.seeds), args.episodes
            )
            times.append(time.perf_counter() - start)
        lengths = {name: float(r["episode_length"].mean()) for name, r in out.items()}
        solved = {name: float(r["solved"].mean()) for name, r in out.items()}
        print(
            f"{suite:<14} first call (compile + run) {first:6.1f} s, then median {np.median(times):6.1f} s; "
            f"{len(out)} maze(s), mean episode length {np.mean(list(lengths.values())):.0f}, "
            f"mean solve rate {np.mean(list(solved.values())):.3f}"
        )


if __name__ == "__main__":
    main()
