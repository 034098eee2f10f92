"""lamella-eval against rliable 1.2 on the same scores, side by side in one process.

5 algorithms x 10 tasks x 10 runs, 2000 bootstrap replicates: IQM, mean, median and
optimality gap with stratified percentile CIs, and probability of improvement for
every pair (10 pairs). Both sides get the same score arrays; each side draws with its
own RNG (rliable from np.random, lamella from a JAX key). Timed calls alternate
(lamella, rliable, ...); lamella's first call (compile) is reported apart.

    JAX_PLATFORMS=cpu taskset -c 0,1 python benchmarks/aggregate_vs_rliable.py
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import time
from importlib.metadata import version

import jax
import numpy as np
from rliable import library as rly
from rliable import metrics as rlm

import lamella.eval as le


def _rliable_aggregates(x: np.ndarray) -> np.ndarray:
    return np.array(
        [
            rlm.aggregate_iqm(x),
            rlm.aggregate_mean(x),
            rlm.aggregate_median(x),
            rlm.aggregate_optimality_gap(x),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5, help="timed aggregate calls per side")
    parser.add_argument(
        "--poi-repeats", type=int, default=1, help="timed probability-of-improvement calls per side"
    )
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    algorithms = [f"algo_{i}" for i in range(5)]
    scores = {a: rng.normal(0.4 + 0.05 * i, 0.25, size=(10, 10)) for i, a in enumerate(algorithms)}
    pairs = list(itertools.combinations(algorithms, 2))
    pair_scores = {f"{x},{y}": [scores[x], scores[y]] for x, y in pairs}

    def lamella_aggregates(seed: int) -> le.Estimates:
        return le.interval_estimates(scores, reps=args.reps, key=seed)

    def rliable_aggregates(seed: int) -> tuple[dict, dict]:
        np.random.seed(seed)  # rliable 1.2 ignores random_state
        return rly.get_interval_estimates(scores, _rliable_aggregates, reps=args.reps)

    def lamella_poi(seed: int) -> le.ImprovementEstimates:
        return le.probability_of_improvement_estimates(scores, pairs, reps=args.reps, key=seed)

    def rliable_poi(seed: int) -> tuple[dict, dict]:
        np.random.seed(seed)
        return rly.get_interval_estimates(pair_scores, rlm.probability_of_improvement, reps=args.reps)

    start = time.perf_counter()
    lamella_aggregates(0)
    compile_aggregates = time.perf_counter() - start
    start = time.perf_counter()
    lamella_poi(0)
    compile_poi = time.perf_counter() - start

    def alternate(first, second, repeats):
        times_a, times_b, out_a, out_b = [], [], None, None
        for seed in range(1, repeats + 1):
            start = time.perf_counter()
            out_a = first(seed)
            times_a.append(time.perf_counter() - start)
            start = time.perf_counter()
            out_b = second(seed)
            times_b.append(time.perf_counter() - start)
        return float(np.median(times_a)), float(np.median(times_b)), out_a, out_b

    # The rliable side of probability of improvement takes about a minute: a few lamella
    # calls around each rliable call keep the comparison interleaved.
    agg_l, agg_r, ours, theirs = alternate(lamella_aggregates, rliable_aggregates, args.repeats)
    poi_l, poi_r, ours_poi, theirs_poi = alternate(lamella_poi, rliable_poi, args.poi_repeats)
    poi_l = float(np.median([poi_l, *(_time(lamella_poi, s) for s in range(10, 14))]))

    point_diff = max(float(np.max(np.abs(ours.point[a] - theirs[0][a]))) for a in algorithms)
    ci_diff = max(
        float(
            max(
                np.max(np.abs(ours.lower[a] - theirs[1][a][0])),
                np.max(np.abs(ours.upper[a] - theirs[1][a][1])),
            )
        )
        for a in algorithms
    )
    keys = [f"{x},{y}" for x, y in pairs]
    poi_point_diff = float(np.max(np.abs(ours_poi.point - np.array([theirs_poi[0][k] for k in keys]))))
    poi_ci_diff = float(
        max(
            np.max(np.abs(ours_poi.lower - np.array([theirs_poi[1][k][0, 0] for k in keys]))),
            np.max(np.abs(ours_poi.upper - np.array([theirs_poi[1][k][1, 0] for k in keys]))),
        )
    )
    widths = min(float(np.min(ours.upper[a] - ours.lower[a])) for a in algorithms)

    print(
        f"machine: {_cpu_model()}, {len(os.sched_getaffinity(0))} usable cores, load average "
        f"{os.getloadavg()[0]:.1f}; {len(jax.devices())} JAX device(s) "
        f"{jax.devices()[0].platform}; jax {jax.__version__}, rliable {version('rliable')}, numpy {np.__version__}"
    )
    print(f"5 algorithms x 10 tasks x 10 runs, {args.reps} bootstrap replicates, 95% percentile CIs")
    print()
    print(
        "| work | rliable (s) | lamella (s) | speed-up | lamella compile (s) | max abs diff point | max abs diff CI bound |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| 4 aggregates x 5 algorithms | {agg_r:.3f} | {agg_l:.4f} | {agg_r / agg_l:.0f}x | "
        f"{compile_aggregates:.2f} | {point_diff:.1e} | {ci_diff:.4f} |"
    )
    print(
        f"| probability of improvement, 10 pairs | {poi_r:.2f} | {poi_l:.4f} | {poi_r / poi_l:.0f}x | "
        f"{compile_poi:.2f} | {poi_point_diff:.1e} | {poi_ci_diff:.4f} |"
    )
    print()
    print(f"(narrowest aggregate CI is {widths:.3f} wide: CI bounds differ only by Monte-Carlo error)")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _time(fn, seed: int) -> float:
    start = time.perf_counter()
    fn(seed)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
