"""``lamella train``: train an algorithm from the command line.

::

    lamella train ppo                                   # PPO on CartPole-v1, the defaults
    lamella train ppo --env Acrobot-v1 --seeds 4        # the Acrobot-v1 preset, 4 seeds at once
    lamella train ppo --env CartPole-v1 num_envs=8 learning_rate=1e-3
    lamella train ppo --resume runs/ppo-CartPole-v1-20260101-120000

``register(subparsers)`` is the ``lamella.commands`` entry point (the ``lamella`` console
script of lamella-envs loads it); ``python -m lamella.agents.train`` runs the same command
without it. Registering imports nothing heavy: the algorithm table, JAX and the runners load
only when the command runs, and the whole config is checked before anything compiles.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
from typing import Any

__all__ = ["build_parser", "list_algorithms", "register", "train_command"]

_DESCRIPTION = """\
Train an algorithm on an environment for one or more seeds (trained side by side in one
compiled program). The config is a preset (chosen by --preset, or named like --env) with
key=value overrides of its fields; a wrong key or value is reported, with the valid keys,
before anything compiles. The run directory gets metrics.json (marl-eval layout),
metrics.csv, config.json, checkpoints/ and learning_curve.png.
"""

_EPILOG = """\
examples:
  lamella train ppo                                  PPO on CartPole-v1 (about a minute on a CPU)
  lamella train ppo --env Acrobot-v1 --seeds 4       a named preset, 4 seeds
  lamella train ppo num_envs=8 learning_rate=1e-3    override config fields
  lamella train ppo --print-config                   show the resolved config and exit
  lamella train ppo --env Acrobot-v1 --seeds 8 --dry-run
                                                     check a long run before queueing it
  lamella train --list                               the installed algorithms and their packages
  lamella train dqn                                  DQN on CartPole-v1 (lamella-agents)
  lamella train sac --env GMazeGoalDubins-v0 --her   --NAME switches a boolean config field on
                                                     (HER needs: pip install lamella-gcrl)
  lamella train ppo --resume runs/ppo-CartPole-v1-20260101-120000
  lamella train ippo --env Foraging-8x8-2p-2f-coop-v3 --record-vault
                                                     experience to <run>/vault (flashbax Vault)
  lamella train ppo --out-dir runs/two --coordinator-address 10.0.0.1:1234 --num-processes 2 --process-id 0
                                                     one run on 2 processes: the same command with
                                                     --process-id 1 on the other; process 0 writes
"""


class _TrainParser(argparse.ArgumentParser):
    """Accepts ``key=value`` overrides anywhere on the line, also after options.

    argparse ends a ``nargs="*"`` positional at the first option, so ``--env X a=1`` would
    leave ``a=1`` unrecognised; the leftovers that look like overrides are collected here.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        overrides = [item for item in extras if "=" in item and not item.startswith("-")]
        # ``--NAME`` switches a boolean config field on (``--her`` is ``her=true``); which names
        # exist depends on the algorithm, so they are checked with the config (config.switch_overrides).
        switches = [item for item in extras if re.fullmatch(r"--[a-z][a-z0-9_-]*", item)]
        rest = [item for item in extras if item not in overrides and item not in switches]
        # ``--num-envs 8``: argparse alone would name only the value ("unrecognized arguments: 8").
        for switch, value in itertools.pairwise(extras):
            if switch in switches and value in rest:
                key = switch.lstrip("-").replace("-", "_")
                self.error(
                    f"unrecognized option {switch} {value} ({self.prog} --help lists the options; "
                    f"a config field is set as {key}={value})"
                )
        # ``--record-vault`` takes an optional folder; an override right after it is not one.
        record = getattr(parsed, "record_vault", None)
        if isinstance(record, str) and "=" in record and not os.path.isdir(record):
            overrides.append(record)
            parsed.record_vault = True
        parsed.overrides = list(getattr(parsed, "overrides", None) or []) + overrides
        parsed.switches = list(getattr(parsed, "switches", None) or []) + switches
        return parsed, rest


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "algorithm",
        metavar="ALGORITHM",
        nargs="?",
        help="algorithm name, for example ppo or dqn (see --list)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, for example num_envs=8 learning_rate=3e-4",
    )
    parser.add_argument("--env", dest="env_id", metavar="ID", help="environment id (default CartPole-v1)")
    parser.add_argument("--preset", metavar="NAME", help="named preset (default: the one named like --env)")
    parser.add_argument(
        "--seeds", type=int, metavar="N", help="number of seeds 0..N-1, trained at once (default 1)"
    )
    parser.add_argument(
        "--out-dir", metavar="DIR", help="run directory (default runs/<algorithm>-<env>-<time>)"
    )
    parser.add_argument(
        "--resume", metavar="PATH", help="continue the run in this directory (or from this checkpoint)"
    )
    parser.add_argument("--chunk-iterations", type=int, metavar="N", help="iterations between evaluations")
    parser.add_argument(
        "--eval-episodes", type=int, metavar="N", help="evaluation episodes (config field eval_episodes)"
    )
    parser.add_argument(
        "--checkpoint-every", type=int, default=1, metavar="N", help="checkpoint every N chunks"
    )
    parser.add_argument(
        "--keep-checkpoints", type=int, default=3, metavar="K", help="newest checkpoints kept"
    )
    parser.add_argument(
        "--max-chunks", type=int, metavar="N", help="stop after N chunks (continue with --resume)"
    )
    parser.add_argument(
        "--tensorboard", action="store_true", help="also log to TensorBoard (needs tensorboardX)"
    )
    parser.add_argument(
        "--compile",
        choices=("auto", "fast", "optimized"),
        default=None,
        help="XLA options on CPU: auto (fast compile for one seed), fast (short runs), optimized "
        "(long runs of one seed); default auto, or the resumed run's",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="split the runner's batch (its envs; ES: its population) over N devices with jax.shard_map; "
        "default 1 (many "
        "processes: every device of every process), or the resumed run's (on CPU: "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N simulates N)",
    )
    parser.add_argument(
        "--coordinator-address",
        metavar="HOST:PORT",
        help="many hosts: train one run on several processes (jax.distributed), each started with the same "
        "command and its own --process-id; process 0 listens at HOST:PORT and writes the run directory "
        "(default: $LAMELLA_COORDINATOR_ADDRESS)",
    )
    parser.add_argument(
        "--num-processes",
        metavar="N",
        help="many hosts: the number of processes (default: $LAMELLA_NUM_PROCESSES)",
    )
    parser.add_argument(
        "--process-id",
        metavar="I",
        help="many hosts: this process, 0..N-1 (default: $LAMELLA_PROCESS_ID)",
    )
    parser.add_argument(
        "--record-vault",
        nargs="?",
        const=True,
        default=None,
        metavar="DIR",
        help="record every env step collected to flashbax Vaults, one per seed (default DIR: <run>/vault); "
        "a resumed run goes on recording",
    )
    parser.add_argument(
        "--gif",
        action="store_true",
        help="draw one evaluation episode of seed 0's policy to <run>/episode.gif at the end "
        "(with --resume on a finished run: without training; needs lamella-envs[render])",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    parser.add_argument("--no-plot", action="store_true", help="do not write learning_curve.png")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as JSON and exit, after the config checks a run makes (nothing traces)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the run without running it: the config, the run directory, building the env and the "
        "runner, the devices, and tracing the init, chunk and evaluation programs; compiles, trains and "
        "writes nothing (seconds, where the real run starts with a minute of compiling)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the installed algorithms and the package of each, and exit"
    )


def add_train_style_parser(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Add sub-command ``name`` whose parser takes ``key=value`` overrides anywhere on the line
    and ``--NAME`` switches, as ``lamella train`` does (``kwargs`` go to ``add_parser``)."""
    # add_parser builds parsers of the class held in _parser_class; swapping it for this one
    # call is the only public-behaviour way to get a sub-parser of our own class.
    previous = getattr(subparsers, "_parser_class", None)
    try:
        if previous is not None:
            subparsers._parser_class = _TrainParser
        parser: argparse.ArgumentParser = subparsers.add_parser(
            name, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
        )
    finally:
        if previous is not None:
            subparsers._parser_class = previous
    return parser


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` sub-command to a ``lamella`` sub-parser set (entry point ``lamella.commands``)."""
    parser = add_train_style_parser(
        subparsers,
        "train",
        help="train an algorithm (PPO, ES, ...) with logs, checkpoints and a learning-curve plot",
        description=_DESCRIPTION,
        epilog=_EPILOG,
    )
    _add_arguments(parser)
    parser.set_defaults(func=train_command, _train_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """A stand-alone parser for ``python -m lamella.agents.train``."""
    parser = _TrainParser(
        prog="python -m lamella.agents.train",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(func=train_command, _train_parser=parser)
    return parser


def _resolve(args: argparse.Namespace) -> tuple[Any, list[int], dict[str, Any] | None]:
    """``(config, seeds, stored_metadata)``; raises ConfigError before anything compiles."""
    from lamella.agents import checkpoint as ckpt
    from lamella.agents import config as config_lib

    config_cls, _, _ = config_lib.algorithm_spec(args.algorithm)
    # Named by their flags here; run_experiment's ValueError would name its Python arguments.
    for flag, value, least in (
        ("--chunk-iterations", args.chunk_iterations, 1),
        ("--checkpoint-every", args.checkpoint_every, 1),
        ("--keep-checkpoints", args.keep_checkpoints, 1),
        ("--max-chunks", args.max_chunks, 0),
        ("--devices", getattr(args, "devices", None), 1),
    ):
        if value is not None and value < least:
            raise config_lib.ConfigError(f"{flag} must be >= {least}, got {value}.")
    overrides = config_lib.parse_overrides(args.overrides)
    overrides.update(config_lib.switch_overrides(config_cls, getattr(args, "switches", []), overrides))
    if args.eval_episodes is not None:
        if "eval_episodes" in overrides:
            raise config_lib.ConfigError("eval_episodes is given twice (--eval-episodes and eval_episodes=).")
        overrides["eval_episodes"] = str(args.eval_episodes)
    stored = None
    if args.resume:
        path = args.resume
        if not os.path.isfile(path):
            path = ckpt.latest_checkpoint(os.path.join(path, "checkpoints")) or ""
        if path:
            stored = ckpt.read_metadata(path)
        elif os.path.isfile(os.path.join(args.resume, "config.json")):
            # A run killed before its first checkpoint starts over with its config.json.
            with open(os.path.join(args.resume, "config.json"), encoding="utf-8") as handle:
                stored = json.load(handle)
        else:
            raise config_lib.ConfigError(
                f"Nothing to resume in {args.resume!r}: no checkpoints/checkpoint_*.msgpack and no config.json."
            )
        if stored["algorithm"] != args.algorithm:
            raise config_lib.ConfigError(
                f"{args.resume!r} is a {stored['algorithm']!r} run, not {args.algorithm!r}."
            )
    if stored is not None and args.env_id is None and args.preset is None:
        # Overrides change the run's own config (the preset's would differ from it wherever the
        # run overrode it); the driver refuses any value that differs from the stored one.
        config = config_lib.apply_overrides(
            config_lib.config_from_dict(config_cls, stored["config"]), overrides
        )
    else:
        config = config_lib.resolve_config(args.algorithm, args.env_id, args.preset, overrides)
    if args.seeds is not None:
        if args.seeds < 1:
            raise config_lib.ConfigError(f"--seeds must be >= 1, got {args.seeds}.")
        seeds = list(range(args.seeds))
    else:
        seeds = list(stored["seeds"]) if stored is not None else [0]
    return config, seeds, stored


def _check_config(algorithm: str, config: Any) -> None:
    """The config checks a run (and ``--dry-run``) makes before it traces anything: the numbers'
    ranges, then building the runner (the env, sizes that divide, ...); the same ConfigError."""
    from lamella.agents import config as config_lib
    from lamella.agents.driver import _build_runner

    config_lib.check_numbers(config)
    _build_runner(config_lib.algorithm_spec(algorithm)[1], config)


def evaluation_return(config: Any) -> str:
    """What the evaluation's return is called in a summary: ``greedy return``, or ``return (sampled
    actions)`` for a config that evaluates its policy's samples (``eval_greedy=False``: the marl
    and UED runners' default, as Mava and minimax evaluate)."""
    return "greedy return" if getattr(config, "eval_greedy", True) else "return (sampled actions)"


def list_algorithms() -> str:
    """The table ``lamella train --list`` prints: each installed algorithm and its package.

    Reads entry-point metadata only (nothing is imported); algorithms added in this process with
    ``register_algorithm`` are listed as ``(registered)``.
    """
    from lamella.agents import config as config_lib
    from lamella.agents.algorithms import GROUP, algorithm_entries

    rows = [(e.name, f"{e.package} {e.version}".strip(), e.target) for e in algorithm_entries()]
    rows += [(name, "(registered)", "") for name in config_lib.registered_algorithms()]
    if not rows:
        return f"No algorithms installed (entry-point group {GROUP!r}); pip install lamella-agents."
    rows = [("ALGORITHM", "PACKAGE", "ENTRY POINT"), *sorted(rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows)


def _resumed_algorithm(path: str) -> str | None:
    """The algorithm a run directory (its ``config.json``, else its newest checkpoint) or a
    checkpoint file names; None where neither reads (the caller asks for the algorithm)."""
    from lamella.agents import checkpoint as ckpt

    try:
        if os.path.isfile(os.path.join(path, "config.json")):
            with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
                return str(json.load(handle)["algorithm"])
        if not os.path.isfile(path):
            path = ckpt.latest_checkpoint(os.path.join(path, "checkpoints")) or ""
        return str(ckpt.read_metadata(path)["algorithm"]) if path else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def train_command(args: argparse.Namespace) -> int:
    """Run ``lamella train`` for parsed arguments; return the exit status."""
    from lamella.agents.config import ConfigError, config_to_dict

    parser: argparse.ArgumentParser = args._train_parser
    if args.list:
        print(list_algorithms())
        return 0
    if args.algorithm is None and args.resume:
        args.algorithm = _resumed_algorithm(args.resume)  # the run names it: lamella train --resume DIR
        if args.algorithm is None:
            parser.error(
                f"--resume {args.resume!r} holds no run (no config.json, no checkpoints/checkpoint_*.msgpack): "
                "give a run directory or checkpoint, or an ALGORITHM"
            )
    if args.algorithm is None:
        parser.error("give an ALGORITHM to train (lamella train --list shows the installed ones)")
    from lamella.agents import hosts

    try:
        cluster = hosts.make_cluster(args.coordinator_address, args.num_processes, args.process_id)
        if cluster is not None and cluster.num_processes > 1 and not (args.out_dir or args.resume):
            raise ConfigError(
                "A run on many processes needs --out-dir (or --resume): the processes must agree on the run "
                "directory, and a default one is named after each process's clock."
            )
        if not args.print_config:
            # Before the config is resolved: building it can start JAX, after which a process
            # can no longer join the others.
            hosts.initialize(cluster=cluster)
        config, seeds, _ = _resolve(args)
        if args.print_config:
            _check_config(args.algorithm, config)
    except (ConfigError, ValueError) as error:
        if getattr(args, "debug", False):  # lamella --debug: the traceback
            raise
        parser.error(str(error))
    if args.print_config:
        print(
            json.dumps(
                {"algorithm": args.algorithm, "config": config_to_dict(config), "seeds": seeds}, indent=2
            )
        )
        return 0

    from lamella.agents.driver import default_out_dir, run_experiment

    out_dir = args.out_dir
    if out_dir is None and not args.resume:
        out_dir = default_out_dir(args.algorithm, config.env_id)
    where = args.resume if args.resume else out_dir
    writer = cluster is None or cluster.process_id == 0
    if writer and not args.dry_run:  # process 0 of many speaks for the run
        print(
            f"lamella train {args.algorithm}: {config.env_id}, {len(seeds)} seed(s), "
            f"{config.total_timesteps:,} steps each -> {where}",
            flush=True,
        )
    start = time.perf_counter()
    try:
        result = run_experiment(
            config,
            algorithm=args.algorithm,
            seeds=seeds,
            out_dir=out_dir,
            resume=args.resume or False,
            chunk_iterations=args.chunk_iterations,
            checkpoint_every=args.checkpoint_every,
            keep_checkpoints=args.keep_checkpoints,
            progress=not args.no_progress,
            tensorboard=args.tensorboard,
            plot=not args.no_plot,
            max_chunks=args.max_chunks,
            extra_metadata={"preset": args.preset} if args.preset else None,
            compile_mode=args.compile,
            num_devices=args.devices,
            record_vault=args.record_vault,
            gif=args.gif,
            dry_run=args.dry_run,
        )
    except (ConfigError, FileExistsError, FileNotFoundError) as error:
        if getattr(args, "debug", False):
            raise
        parser.error(str(error))
    except KeyboardInterrupt:
        print(
            f"\ninterrupted; continue from the last checkpoint with: lamella train {args.algorithm} --resume {where}",
            file=sys.stderr,
        )
        return 130
    seconds = time.perf_counter() - start
    if not writer:
        return 0
    if result.dry_run:
        at = f"resuming {where} at iteration {result.iteration:,}" if args.resume else f"-> {where}"
        print(
            f"dry run: {args.algorithm} on {config.env_id}, {len(seeds)} seed(s), {config.total_timesteps:,} steps "
            f"each ({result.num_iterations:,} iterations) {at}: config, env and the 3 programs (init, chunk, "
            f"evaluation) trace and lower in {seconds:.1f} s; nothing compiled, trained or written"
        )
        return 0
    if result.already_finished:
        print(
            f"already finished: {result.out_dir} holds a finished run ({result.step_count:,} steps per seed); "
            "nothing was trained."
        )
        print(f"  run log     {result.metrics_path}")
        print(f"  checkpoint  {result.checkpoint_path}")
        if result.gif_path:
            print(f"  episode     {result.gif_path}")
        return 0
    returns = result.final_return
    status = (
        "finished" if result.finished else f"stopped at iteration {result.iteration}/{result.num_iterations}"
    )
    print(
        f"{status} in {seconds:.1f} s: {result.step_count:,} steps per seed; {evaluation_return(config)} "
        f"{returns.mean():.4g} (mean over {len(returns)} seed(s), min {returns.min():.4g}, max {returns.max():.4g})"
    )
    print(f"  run log     {result.metrics_path}")
    print(f"              {result.csv_path}")
    print(f"  config      {result.config_path}")
    print(f"  checkpoint  {result.checkpoint_path}")
    if result.plot_path:
        print(f"  plot        {result.plot_path}")
    if result.gif_path:
        print(f"  episode     {result.gif_path}")
    if not result.finished:
        print(f"continue with: lamella train {args.algorithm} --resume {result.out_dir}")
    return 0
