"""How many steps the Dubins car needs to reach each goal of ``GMazeGoalDubinsWalls-v0``, at best:
is the 70-step episode what stops HER + SAC short of 0.9 success in the far corridor (issue 12)?

The forward reachable set of the env's own dynamics (``lamella.envs.goal.gmaze.dubins_move``,
vmapped), from the env's start, under ``--steers`` steering values spread over [-1, 1]; after
each step the reached states are thinned to one per cell of a grid (``--xy`` in x and y,
``--headings`` bins of the heading), which keeps the set finite and can only under-count what
the car reaches (so the step counts are upper bounds of the true shortest times). A goal counts
as reached at step t when a reached position lies within the env's success radius (0.1) of it;
goals are the centres of a ``--goals`` x ``--goals`` grid over the square (the env draws them
uniformly there). Prints the share of goals reached by every 5th step, and per corridor (0: the
start's, x < -0.5; 3: the far one, x >= 0.5) the share reachable within the episode and the
mean and largest first step.

    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_reachable.py
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs
from lamella.envs.goal.gmaze import dubins_move

CORRIDORS = [(-1.0, -0.5), (-0.5, 0.0), (0.0, 0.5), (0.5, 1.0)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steers", type=int, default=9, help="steering values in [-1, 1] (default 9)")
    parser.add_argument("--xy", type=float, default=0.02, help="grid cell of the thinning in x and y")
    parser.add_argument("--headings", type=int, default=64, help="heading bins of the thinning")
    parser.add_argument("--goals", type=int, default=400, help="goal grid per axis")
    args = parser.parse_args()
    started = time.process_time()

    env, params = lamella.envs.make("GMazeGoalDubinsWalls-v0", autoreset=False)
    horizon, radius = int(params.max_steps_in_episode), float(params.distance_threshold)
    steers = jnp.linspace(-1.0, 1.0, args.steers)
    # Every state under every steering value: (states, 3) -> (steers * states, 3).
    successors = jax.jit(
        jax.vmap(jax.vmap(lambda p, s: dubins_move(p, s, params), in_axes=(0, None)), in_axes=(None, 0))
    )

    n = args.goals
    cell = 2.0 / n
    centres = (np.arange(n) + 0.5) * cell - 1.0
    offsets = [
        (dy, dx)
        for dy in range(-int(np.ceil(radius / cell)), int(np.ceil(radius / cell)) + 1)
        for dx in range(-int(np.ceil(radius / cell)), int(np.ceil(radius / cell)) + 1)
        if (dx * cell) ** 2 + (dy * cell) ** 2 < radius**2
    ]
    first = np.full((n, n), horizon + 1)  # [goal y, goal x]: the first step that reaches it
    states = np.asarray(params.start, np.float32)[None]
    for step in range(1, horizon + 1):
        padded = 1 << max(0, int(np.ceil(np.log2(len(states)))))  # few shapes, few compiles
        batch = np.concatenate([states, np.repeat(states[:1], padded - len(states), 0)])
        moved = np.asarray(successors(jnp.asarray(batch), steers))[:, : len(states)].reshape(-1, 3)
        key = np.stack(
            [
                np.round(moved[:, 0] / args.xy),
                np.round(moved[:, 1] / args.xy),
                np.round(moved[:, 2] * args.headings / 2.0),
            ],
            axis=1,
        ).astype(np.int64)
        states = moved[np.unique(key, axis=0, return_index=True)[1]]
        near = np.zeros((n, n), bool)
        iy = np.clip(((states[:, 1] + 1.0) / cell).astype(int), 0, n - 1)
        ix = np.clip(((states[:, 0] + 1.0) / cell).astype(int), 0, n - 1)
        for dy, dx in offsets:
            near[np.clip(iy + dy, 0, n - 1), np.clip(ix + dx, 0, n - 1)] = True
        first[near & (first > horizon)] = step
        if step % 5 == 0:
            print(
                f"step {step:3d}: {len(states):7d} states, goals reached so far {np.mean(first <= step):.3f}",
                flush=True,
            )

    reached = first <= horizon
    for index, (low, high) in enumerate(CORRIDORS):
        columns = (centres >= low) & (centres < high if high < 1.0 else centres <= high)
        steps = first[:, columns][reached[:, columns]]
        print(
            f"corridor {index}: reachable within {horizon} steps {reached[:, columns].mean():.3f}, "
            f"first step mean {steps.mean():.1f}, largest {steps.max()}"
        )
    print(f"all goals: reachable {reached.mean():.3f}; {time.process_time() - started:.0f} CPU-s")


if __name__ == "__main__":
    main()
