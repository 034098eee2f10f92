"""``lamella sweep``: train a grid of configs, as few compiled programs as the grid allows.

::

    lamella sweep ppo --env CartPole-v1 --grid learning_rate=1e-4,3e-4 clip_eps=0.1,0.2 --seeds 5
    lamella sweep ppo --grid learning_rate=1e-4,3e-4 num_envs=4,8 --out runs/sweep
    lamella sweep ppo --grid learning_rate=1e-4,3e-4 num_envs=4,8 --ray 10.0.0.1:6379

``register(subparsers)`` is the ``lamella.commands`` entry point. Mistakes (an unknown field,
a bad value, a config the runner refuses, Ray missing or unreachable) are one line on stderr
and exit status 2, before anything compiles. See :mod:`lamella.agents.sweep`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

__all__ = ["register", "sweep_command"]

_DESCRIPTION = """\
Train the cartesian product of a grid of config values, every config for every seed. Configs
that differ only in numbers the runner computes with (learning rates, clip ranges,
coefficients) train side by side in ONE compiled program; fields that change shapes or loop
lengths (num_envs, hidden sizes, ...) split the grid into separate programs. Each program is a
run directory under --out; `lamella eval aggregate OUT` ranks the configs by IQM with
bootstrap confidence intervals. With --ray ADDRESS the programs run as tasks on a Ray cluster
(pip install 'lamella-agents[ray]') and their results are copied back into --out.
"""

_EPILOG = """\
examples:
  lamella sweep ppo --grid learning_rate=1e-4,3e-4 clip_eps=0.1,0.2 --seeds 5
                                          4 configs x 5 seeds, one compiled program
  lamella sweep ppo --env Acrobot-v1 --grid learning_rate=1e-4,3e-4 num_envs=4,8
                                          2 programs (num_envs changes shapes), 2 configs each
  lamella sweep sac --grid "hidden_sizes=(64,64),(256,256)" tau=0.005,0.01 --dry-run
                                          show the programs and exit
  lamella sweep ppo --grid learning_rate=1e-4,3e-4 --ray 127.0.0.1:6379
  lamella sweep ppo num_envs=8 --grid learning_rate=1e-4,3e-4 --devices 4
                                          every config's envs split over 4 devices
  lamella eval aggregate runs/sweep-ppo-...   rank the configs (IQM, 95% CIs, ranking.png)
"""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "algorithm", metavar="ALGORITHM", help="algorithm name, e.g. ppo (lamella train --list)"
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides shared by every config"
    )
    parser.add_argument(
        "--grid",
        nargs="+",
        action="extend",  # a second --grid adds its items (with "store" it replaced the first's)
        required=True,
        metavar="KEY=V1,V2",
        help="values to sweep, comma separated (tuples in brackets: hidden_sizes=(64,64),(32,32))",
    )
    parser.add_argument("--env", dest="env_id", metavar="ID", help="environment id (default CartPole-v1)")
    parser.add_argument("--preset", metavar="NAME", help="named preset (default: the one named like --env)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds 0..N-1 for every config")
    parser.add_argument(
        "--out", metavar="DIR", help="the sweep's folder (default runs/sweep-<algorithm>-<env>-<time>)"
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the programs on this Ray cluster (HOST:PORT, ray://HOST:PORT or auto)",
    )
    parser.add_argument("--chunk-iterations", type=int, metavar="N", help="iterations between evaluations")
    parser.add_argument(
        "--compile", choices=("auto", "fast", "optimized"), default=None, help="XLA options (as for train)"
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="split each config's batch (its envs; ES: its population) over N devices with "
        "jax.shard_map, as for train; default 1, or the resumed sweep's (on CPU: "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N simulates N)",
    )
    parser.add_argument("--plot", action="store_true", help="each program's learning_curve.png")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the programs as JSON and exit (nothing compiles)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --out (the same command plus --resume): finished programs are kept",
    )


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` sub-command to a ``lamella`` sub-parser set (entry point ``lamella.commands``)."""
    from lamella.agents.cli import add_train_style_parser

    parser = add_train_style_parser(
        subparsers,
        "sweep",
        help="train a grid of configs (one compiled program per shape), locally or on a Ray cluster",
        description=_DESCRIPTION,
        epilog=_EPILOG,
    )
    _add_arguments(parser)
    parser.set_defaults(func=sweep_command)
    return parser


def _summary_table(scores: dict[str, list[float]]) -> str:
    import numpy as np

    rows = sorted(scores.items(), key=lambda item: -float(np.mean(item[1])))
    width = max(len(label) for label in scores)
    lines = [f"{'config':<{width}}  {'mean':>10}  {'min':>10}  {'max':>10}"]
    for label, values in rows:
        lines.append(
            f"{label:<{width}}  {np.mean(values):>10.4g}  {np.min(values):>10.4g}  {np.max(values):>10.4g}"
        )
    return "\n".join(lines)


def _check_overrides_read(config: Any, grid: dict[str, list[str]], names: list[str]) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` for a field the user set (``names``: the
    overrides and one-value grid fields) that no config of the grid reads (DQN's
    ``target_update_period`` with ``tau=0.5`` in every config), as ``lamella train`` does; one
    that some configs read (``--grid tau=0.5,1.0``) is fine."""
    import itertools

    from lamella.agents import config as config_lib

    unread: dict[str, str] | None = None
    for values in itertools.product(*grid.values()):
        try:
            combo = config_lib.apply_overrides(config, dict(zip(grid, values)))
        except config_lib.ConfigError:
            return  # a bad grid value: plan_sweep names it
        unused: dict[str, str] = getattr(combo, "unused_settings", dict)()
        here = {name: unused[name] for name in names if name in unused}
        unread = here if unread is None else {name: text for name, text in unread.items() if name in here}
        if not unread:
            return
    if unread:
        raise config_lib.ConfigError(f"{next(iter(unread.values()))} (in every config of the grid)")


def sweep_command(args: argparse.Namespace) -> int:
    """Run ``lamella sweep`` for parsed arguments; return the exit status."""
    from lamella.agents import config as config_lib
    from lamella.agents import sweep
    from lamella.agents.cli import evaluation_return

    if args.seeds < 1:
        raise config_lib.ConfigError(f"--seeds must be >= 1, got {args.seeds}.")
    if args.chunk_iterations is not None and args.chunk_iterations < 1:
        raise config_lib.ConfigError(f"--chunk-iterations must be >= 1, got {args.chunk_iterations}.")
    if args.devices is not None and args.devices < 1:  # named by its flag, not as num_devices
        raise config_lib.ConfigError(f"--devices must be >= 1, got {args.devices}.")
    grid = sweep.parse_grid(args.grid)
    config_cls, _, _ = config_lib.algorithm_spec(args.algorithm)
    overrides = config_lib.parse_overrides(args.overrides)
    overrides.update(config_lib.switch_overrides(config_cls, getattr(args, "switches", []), overrides))
    # Overrides read by some configs of the grid only (target_update_period with --grid
    # tau=0.5,1.0) are fine: each is checked against the whole grid once it is planned.
    config = config_lib.resolve_config(
        args.algorithm, args.env_id, args.preset, overrides, check_unused=False
    )
    overlap = sorted(set(grid) & set(overrides))
    if overlap:
        raise config_lib.ConfigError(f"{', '.join(overlap)} is given both as an override and in --grid.")
    _check_overrides_read(
        config, grid, [*overrides, *(name for name, values in grid.items() if len(values) == 1)]
    )
    if args.resume and not args.out:
        raise config_lib.ConfigError("--resume needs --out DIR, the sweep's folder.")
    out_dir = args.out or _default_out(args.algorithm, config.env_id)
    if args.resume and not os.path.isfile(os.path.join(out_dir, sweep.SWEEP_FILE)):
        raise config_lib.ConfigError(f"Nothing to resume: no {sweep.SWEEP_FILE} in {out_dir!r}.")
    if not args.resume and os.path.exists(os.path.join(out_dir, sweep.SWEEP_FILE)):
        raise config_lib.ConfigError(
            f"{out_dir!r} already holds a sweep; continue it with --resume or pick another --out."
        )
    # Ray before anything else that takes time: a missing package or a wrong address fails now.
    ray = sweep.connect_ray(args.ray) if args.ray and not args.dry_run else None
    try:
        plan = sweep.plan_sweep(args.algorithm, config, grid, args.seeds, num_devices=args.devices)
        if args.dry_run:
            print(json.dumps(sweep._plan_record(plan), indent=1))
            return 0
        shapes = f"{len(plan.programs)} program(s)"
        traced = f"traced: {', '.join(plan.traced) or 'none'}"
        static = f"static: {', '.join(plan.static) or 'none'}"
        print(
            f"lamella sweep {args.algorithm}: {config.env_id}, {plan.num_configs} configs x {len(plan.seeds)} seed(s) "
            f"in {shapes} ({traced}; {static}){' on Ray ' + args.ray if ray is not None else ''} -> {out_dir}",
            flush=True,
        )
        start = time.perf_counter()
        try:
            result = sweep.run_sweep(
                plan,
                out_dir,
                ray_module=ray,
                ray_address=args.ray,
                chunk_iterations=args.chunk_iterations,
                compile_mode=args.compile,
                progress=not args.no_progress,
                plot=args.plot,
                log=lambda line: print(line, flush=True),
                resume=args.resume,
            )
        except FileExistsError as error:
            raise config_lib.ConfigError(str(error)) from None
    finally:
        if ray is not None:
            ray.shutdown()
    score = "final " + evaluation_return(config).replace("return", "score", 1)
    print(f"finished in {time.perf_counter() - start:.1f} s; {score} per config (over seeds):")
    print(_summary_table(result.scores))
    print(f"  sweep       {os.path.join(out_dir, sweep.SWEEP_FILE)}")
    print(f"rank the configs (IQM, bootstrap CIs): lamella eval aggregate {out_dir}", file=sys.stdout)
    return 0


def _default_out(algorithm: str, env_id: str) -> str:
    from lamella.agents.driver import default_out_dir

    return default_out_dir(f"sweep-{algorithm}", env_id)
