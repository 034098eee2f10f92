"""lamella-eval against rliable 1.2 on the same scores, side by side.

5 algorithms x 10 tasks x 10 runs, 2000 bootstrap replicates: IQM, mean, median and
optimality gap with stratified percentile CIs, and probability of improvement for
every pair (10 pairs).

Cold (what a user runs once; the issue's measure): fresh processes, start to last file
written, interleaved. The run logs are written once as metrics.json files; lamella's side is
the ``lamella eval aggregate`` command with its defaults (aggregates, performance profiles,
probability of improvement, PNG plots and tables), and again with ``--no-plots``; rliable's
side is a Python process that imports rliable, reads the same files and writes the aggregates
(or the probability of improvement) to a CSV file. A third rliable process produces what
lamella's default command produces (aggregates, the IQM ranking, performance profiles with
bootstrap bands, probability of improvement for every pair, each plotted to a PNG with rliable's
own ``plot_utils``, and the numbers in a CSV file): the same outputs, plots included, on both
sides. It and the PoI process run ``--cold-poi-repeats`` times (about a minute each on an idle
core). Each side runs once untimed first (bytecode
written, files cached: what an installed package has). Wall and CPU time (user + system) of
each process; on a loaded machine the CPU-time ratios are the steadier ones.

``--baseline-src DIR`` adds the same command run with ``DIR`` first on ``PYTHONPATH`` (a
checkout of another version's ``packages/eval/src``), interleaved with the others: before and
after a change in one run.

A further row is the floor of any command that draws with matplotlib: a process that only imports
NumPy, ``matplotlib.figure`` and the Agg backend (what every lamella plot needs) and writes one
empty file; no reading, no bootstrap, no figure.

Warm: the library calls in this process, timed calls alternating; lamella's JAX backend's
first call (compile) is reported apart.

    hatch run bench:python benchmarks/aggregate_vs_rliable.py [--cold-repeats 5] [--skip-warm]
        [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from typing import Any

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


_RLIABLE_SCRIPT = """
import itertools, json, os, sys
import numpy as np
from rliable import library as rly, metrics as rlm

work, out = sys.argv[1], sys.argv[2]
scores, tasks = {}, set()
for path in sys.argv[3:]:
    with open(os.path.join(path, "metrics.json")) as file:
        data = json.load(file)
    for environment, by_task in data.items():
        for task, by_algorithm in by_task.items():
            for algorithm, runs in by_algorithm.items():
                column = [np.mean(r["absolute_metrics"]["score"]) for _, r in sorted(runs.items())]
                scores.setdefault(algorithm, {})[task] = column
matrices = {a: np.array([by_task[t] for t in sorted(by_task)]).T for a, by_task in scores.items()}
np.random.seed(0)  # rliable 1.2 ignores random_state
if work == "aggregates":
    fn = lambda x: np.array([rlm.aggregate_iqm(x), rlm.aggregate_mean(x), rlm.aggregate_median(x),
                             rlm.aggregate_optimality_gap(x)])
    points, intervals = rly.get_interval_estimates(matrices, fn, reps=2000)
    rows = [f"{a}," + ",".join(map(repr, np.concatenate([points[a], intervals[a].ravel()]))) for a in points]
elif work == "improvement":
    pairs = {f"{x},{y}": [matrices[x], matrices[y]] for x, y in itertools.combinations(matrices, 2)}
    points, intervals = rly.get_interval_estimates(pairs, rlm.probability_of_improvement, reps=2000)
    rows = [f"{p},{points[p]!r},{intervals[p][0, 0]!r},{intervals[p][1, 0]!r}" for p in points]
else:  # "everything": the outputs of lamella's default command, with rliable's own plots
    import matplotlib
    matplotlib.use("Agg")
    from rliable import plot_utils
    names = ["IQM", "Mean", "Median", "Optimality Gap"]
    fn = lambda x: np.array([rlm.aggregate_iqm(x), rlm.aggregate_mean(x), rlm.aggregate_median(x),
                             rlm.aggregate_optimality_gap(x)])
    points, intervals = rly.get_interval_estimates(matrices, fn, reps=2000)
    fig, _ = plot_utils.plot_interval_estimates(points, intervals, names, algorithms=sorted(points))
    fig.savefig(os.path.join(out, "aggregates.png"))
    ranked = sorted(points, key=lambda a: -points[a][0])
    fig, _ = plot_utils.plot_interval_estimates(
        {a: points[a][:1] for a in ranked}, {a: intervals[a][:, :1] for a in ranked}, ["IQM"], algorithms=ranked)
    fig.savefig(os.path.join(out, "ranking.png"))
    values = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(values.min(), values.max(), 101)
    profiles, profile_cis = rly.create_performance_profile(matrices, taus, reps=2000)
    ax = plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=profile_cis)
    ax.figure.savefig(os.path.join(out, "performance_profiles.png"))
    pairs = {f"{x},{y}": [matrices[x], matrices[y]] for x, y in itertools.combinations(matrices, 2)}
    poi, poi_cis = rly.get_interval_estimates(pairs, rlm.probability_of_improvement, reps=2000)
    ax = plot_utils.plot_probability_of_improvement(poi, poi_cis)
    ax.figure.savefig(os.path.join(out, "probability_of_improvement.png"))
    rows = [f"{a}," + ",".join(map(repr, np.concatenate([points[a], intervals[a].ravel()]))) for a in points]
    rows += [f"{p},{poi[p]!r},{poi_cis[p][0, 0]!r},{poi_cis[p][1, 0]!r}" for p in poi]
    out = os.path.join(out, "tables.csv")
with open(out, "w") as file:
    file.write("\\n".join(rows) + "\\n")
"""


def _write_run_logs(root: str, scores: dict[str, np.ndarray]) -> list[str]:
    """One metrics.json per algorithm (as lamella train writes them); the paths of the run dirs."""
    dirs = []
    for algorithm, matrix in scores.items():
        data = {"suite": {f"task_{t}": {algorithm: {}} for t in range(matrix.shape[1])}}
        for t in range(matrix.shape[1]):
            runs = data["suite"][f"task_{t}"][algorithm]
            for r in range(matrix.shape[0]):
                runs[f"seed_{r}"] = {"absolute_metrics": {"score": [float(matrix[r, t])]}}
        path = os.path.join(root, "runs", algorithm)
        os.makedirs(path)
        with open(os.path.join(path, "metrics.json"), "w") as file:
            json.dump(data, file)
        dirs.append(path)
    return dirs


def _fresh(command: list[str], outputs: str, pythonpath: str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of ``command``: wall from its start to the last file written
    under/as ``outputs``, CPU the user + system time of the process (and its children).
    ``pythonpath`` goes first on the command's PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["JAX_PLATFORMS"] = "cpu"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    start = time.time()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    cpu = usage.ru_utime + usage.ru_stime
    if os.path.isdir(outputs):
        files = [os.path.join(outputs, f) for f in os.listdir(outputs)]
    else:
        files = [outputs]
    last = max(os.stat(f).st_mtime for f in files)
    os.sync()
    for f in files:
        os.remove(f)
    return last - start, cpu


def _ratio(reference: list[float], these: list[float]) -> str:
    """Median and range of the per-round ratios reference / these (paired by round)."""
    ratios = [r / t for r, t in zip(reference, these)]
    if not ratios:
        return ""
    return f"{np.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"


LAMELLA = "lamella eval aggregate (default: PNG plots)"
NO_PLOTS = "lamella eval aggregate --no-plots"
FLOOR = "floor: import numpy, matplotlib.figure, Agg (no work)"
RLIABLE = "rliable: aggregates"
RLIABLE_POI = "rliable: PoI, 10 pairs"
RLIABLE_ALL = "rliable: the default command's outputs (aggregates, ranking, profiles, PoI; PNG plots)"


def cold(
    scores: dict[str, np.ndarray], repeats: int, poi_repeats: int, baseline_src: str | None = None
) -> None:
    root = tempfile.mkdtemp(prefix="lamella-bench-aggregate-")
    dirs = _write_run_logs(root, scores)
    script = os.path.join(root, "rliable_side.py")
    with open(script, "w") as file:
        file.write(_RLIABLE_SCRIPT)
    out_dir = os.path.join(root, "out")
    lamella = [sys.executable, "-m", "lamella.envs.cli", "eval", "aggregate", *dirs, "--metric", "score"]
    lamella += ["--normalize", "none", "--out-dir", out_dir]
    sides: dict[str, tuple[Any, ...]] = {
        LAMELLA: (lamella, out_dir),
        NO_PLOTS: ([*lamella, "--no-plots"], out_dir),
        FLOOR: (
            [
                sys.executable,
                "-c",
                "import sys, numpy, matplotlib.figure, matplotlib.backends.backend_agg; "
                "open(sys.argv[1], 'w').close()",
                os.path.join(root, "floor.txt"),
            ],
            os.path.join(root, "floor.txt"),
        ),
        RLIABLE: (
            [sys.executable, script, "aggregates", os.path.join(root, "r.csv"), *dirs],
            os.path.join(root, "r.csv"),
        ),
    }
    if baseline_src:
        sides = {
            f"{LAMELLA}, {baseline_src}": (lamella, out_dir, os.path.abspath(baseline_src)),
            **sides,
        }
    poi = (
        [sys.executable, script, "improvement", os.path.join(root, "p.csv"), *dirs],
        os.path.join(root, "p.csv"),
    )
    everything = (
        [sys.executable, script, "everything", os.path.join(root, "all"), *dirs],
        os.path.join(root, "all"),
    )
    os.makedirs(everything[1])
    for side in sides.values():  # untimed: bytecode and file cache, as installed
        _fresh(*side)
    wall: dict[str, list[float]] = {name: [] for name in [*sides, RLIABLE_POI, RLIABLE_ALL]}
    cpu: dict[str, list[float]] = {name: [] for name in wall}
    for i in range(repeats):
        for name, side in sides.items():
            w, c = _fresh(*side)
            wall[name].append(w)
            cpu[name].append(c)
        if i < poi_repeats:  # about a minute on an idle core: fewer of these, still interleaved
            w, c = _fresh(*poi)
            wall[RLIABLE_POI].append(w)
            cpu[RLIABLE_POI].append(c)
            w, c = _fresh(*everything)
            wall[RLIABLE_ALL].append(w)
            cpu[RLIABLE_ALL].append(c)
    print(
        f"cold: fresh processes, start to last file written (wall) and user + system time (CPU); "
        f"median of {repeats} (rliable PoI: {poi_repeats}), interleaved; ratios: median (range) "
        "of the per-round ratios (PoI, all: rliable PoI's and rliable all outputs' medians over this "
        "side's rounds)"
    )
    print()
    print(
        "| process | wall (s) | CPU (s) | rliable aggregates / this, wall | CPU "
        "| rliable PoI / this, wall | CPU | rliable all outputs / this, wall | CPU |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    poi_wall, poi_cpu = float(np.median(wall[RLIABLE_POI])), float(np.median(cpu[RLIABLE_POI]))
    all_wall, all_cpu = float(np.median(wall[RLIABLE_ALL])), float(np.median(cpu[RLIABLE_ALL]))
    for name in wall:
        row = f"| {name} | {np.median(wall[name]):.2f} | {np.median(cpu[name]):.2f} |"
        if name.startswith("rliable"):
            print(row + " | | | | | |")
            continue
        print(
            f"{row} {_ratio(wall[RLIABLE], wall[name])} | {_ratio(cpu[RLIABLE], cpu[name])} | "
            f"{_ratio([poi_wall] * repeats, wall[name])} | {_ratio([poi_cpu] * repeats, cpu[name])} | "
            f"{_ratio([all_wall] * repeats, wall[name])} | {_ratio([all_cpu] * repeats, cpu[name])} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5, help="timed aggregate calls per side")
    parser.add_argument(
        "--poi-repeats", type=int, default=1, help="timed probability-of-improvement calls per side"
    )
    parser.add_argument("--cold-repeats", type=int, default=5, help="fresh processes per lamella side")
    parser.add_argument("--cold-poi-repeats", type=int, default=2, help="fresh rliable PoI processes")
    parser.add_argument("--skip-warm", action="store_true", help="only the fresh-process comparison")
    parser.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="also time the command with DIR first on PYTHONPATH (another version's packages/eval/src)",
    )
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    algorithms = [f"algo_{i}" for i in range(5)]
    scores = {a: rng.normal(0.4 + 0.05 * i, 0.25, size=(10, 10)) for i, a in enumerate(algorithms)}
    pairs = list(itertools.combinations(algorithms, 2))
    pair_scores = {f"{x},{y}": [scores[x], scores[y]] for x, y in pairs}

    print(
        f"machine: {_cpu_model()}, {len(os.sched_getaffinity(0))} usable cores, load average "
        f"{os.getloadavg()[0]:.1f}; jax {jax.__version__}, rliable {version('rliable')}, numpy {np.__version__}"
    )
    print(f"5 algorithms x 10 tasks x 10 runs, {args.reps} bootstrap replicates, 95% percentile CIs")
    print()
    cold(scores, args.cold_repeats, args.cold_poi_repeats, args.baseline_src)
    if args.skip_warm:
        return

    def lamella_aggregates(seed: int) -> le.Estimates:
        return le.interval_estimates(scores, reps=args.reps, key=seed, backend="jax")

    def rliable_aggregates(seed: int) -> tuple[dict, dict]:
        np.random.seed(seed)  # rliable 1.2 ignores random_state
        return rly.get_interval_estimates(scores, _rliable_aggregates, reps=args.reps)

    def lamella_poi(seed: int) -> le.ImprovementEstimates:
        return le.probability_of_improvement_estimates(scores, pairs, reps=args.reps, key=seed, backend="jax")

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

    print("warm: library calls in one process, alternating; lamella's JAX backend (compiled once)")
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
