"""Pax's own ``evo`` runner (meta-learning with ES) or ``rl`` runner timed, for the tables of
benchmarks/shaping_meta_ipd.py and benchmarks/shaping_mfos_rl.py.

Runs in Pax's virtual environment (Pax pins jax 0.4.31; a separate process), with Pax's source on
the path. ``benchmarks/shaping_meta_ipd.py --pax-python`` starts it; by hand:

    uv venv /tmp/pax_meta && uv pip install --python /tmp/pax_meta/bin/python "jax==0.4.31" \\
        "jaxlib==0.4.31" "numpy<2" "chex==0.1.86" "flax==0.8.5" "gymnax==0.0.6" "optax==0.2.3" six \\
        "evosax==0.1.6" "dm-haiku==0.0.12" "distrax==0.1.5" "tensorflow-probability==0.24.0" \\
        hydra-core omegaconf dm-tree tqdm
    git clone https://github.com/ucl-dark/pax /tmp/pax_src   # read at 6ae3d07
    PAX_SRC=/tmp/pax_src /tmp/pax_meta/bin/python benchmarks/pax_meta.py \\
        --experiment ipd/shaper_v_ppo --generations 3 popsize=16

Pax's own ``pax.experiment`` functions build the env, the agents and the ``EvoRunner`` from Pax's
hydra config (the named experiment yaml plus the ``key=value`` overrides; wandb logging off, and
a stand-in ``wandb`` module when it is not installed), and ``EvoRunner.run_loop`` runs
``--warmup + --repeats * --generations`` generations (an ``rl`` runner's iteration, a rollout and the
meta-agent's update, counts as a generation). The harness only wraps the runner's compiled rollout
to take a timestamp (wall and process CPU time) at the start of each block of ``--generations``
generations, after the previous block's outputs are ready: the ``--warmup`` generations (1: the
compile; the ``rl`` runner compiles its rollout again on its second call) are left out, the rest
are Pax's loop as it runs (ask, rollout, tell, its host-side bookkeeping). With
``--paired`` it prints ``PAX_READY`` before each block and waits for a line on stdin, so that
``shaping_meta_ipd.py`` can alternate lamella's timed calls with Pax's blocks (the waiting is not
timed). Pax's ``cg/*.yaml`` at 6ae3d07 lack ``es.mean_reduce``, which ``EvoRunner`` reads: pass
``+es.mean_reduce=False`` with them. ``ipd/inf_mfos_v_nl`` (M-FOS's RL variant against an exact
naive learner) does not run at 6ae3d07 as it is: pass ``+num_steps=100 +num_inner_steps=1`` (its
yaml lacks them), and the harness works around three mismatches inside Pax without changing what
is computed: ``make_hyper`` is called without its ``num_iterations`` (used only by a learning-rate
schedule the yaml turns off; the harness passes ``num_iters``), the runner calls the naive
learner's ``update`` with four arguments where it takes six (it is a no-op: the learner takes its
gradient step in its policy), and the runner saves ``state.params`` at iteration 0, which the naive
learner's state lacks (the harness gives that state a ``params`` field holding ``None``). Prints a ``PAX_BLOCK`` JSON line per block (wall and CPU
seconds) and a last JSON line: generations/s and env steps/s (``popsize * num_opps * num_envs *
num_inner_steps * num_outer_steps`` per generation) by wall and by CPU time, over the median block.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import sys
import tempfile
import time
import types
from typing import Any, NamedTuple

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.environ["PAX_SRC"])

try:
    import wandb  # noqa: F401
except ImportError:  # Pax imports it at module level; logging is off, so a stand-in will do.
    stand_in = types.ModuleType("wandb")
    for name in ("init", "log", "save", "finish", "define_metric"):
        setattr(stand_in, name, lambda *args, **kwargs: None)
    stand_in.Settings = lambda *args, **kwargs: None
    sys.modules["wandb"] = stand_in

import jax
import pax.experiment as pax_experiment  # Pax's module
from hydra import compose, initialize_config_dir


class _NaiveExactState(NamedTuple):
    """Pax's ``naive_exact.TrainingState`` with the ``params`` that its ``rl`` runner saves."""

    timesteps: Any
    num_episodes: Any
    params: Any = None


def work_around_inf_mfos(config: Any) -> None:
    """The mismatches inside Pax at 6ae3d07 that stop ``ipd/inf_mfos_v_nl`` (module docs)."""
    import pax.agents.naive_exact as naive_exact  # Pax's module

    naive_exact.TrainingState = _NaiveExactState
    make_hyper = pax_experiment.make_hyper
    if "num_iterations" in inspect.signature(make_hyper).parameters:

        def hyper(*args: Any, num_iterations: int | None = None, **kwargs: Any) -> Any:
            iterations = int(config.num_iters) if num_iterations is None else num_iterations
            return make_hyper(*args, num_iterations=iterations, **kwargs)

        pax_experiment.make_hyper = hyper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="ipd/shaper_v_ppo", help="a yaml under pax/conf/experiment")
    parser.add_argument("--generations", type=int, default=3, help="timed generations (after one to compile)")
    parser.add_argument("--repeats", type=int, default=1, help="timed blocks of --generations generations")
    parser.add_argument("--warmup", type=int, default=1, help="untimed generations first (compiling)")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="before each timed block, print a line and wait for one on stdin (shaping_meta_ipd.py "
        "alternates lamella's calls with Pax's blocks this way)",
    )
    parser.add_argument("overrides", nargs="*", help="Pax config overrides, key=value")
    args = parser.parse_args()
    save_dir = tempfile.mkdtemp(prefix="pax_meta_")
    overrides = [
        "+experiment/{}={}".format(*args.experiment.rsplit("/", 1)),
        "wandb.log=False",
        "save=False",
        f"num_iters={args.warmup + args.repeats * args.generations}",
        *args.overrides,
    ]
    with initialize_config_dir(config_dir=os.path.join(os.environ["PAX_SRC"], "pax/conf"), version_base=None):
        config = compose("config", overrides=overrides)
    logger = logging.getLogger()
    work_around_inf_mfos(config)
    env, env_params = pax_experiment.env_setup(config, logger)
    agents = pax_experiment.agent_setup(config, env, env_params, logger)
    for agent in agents if isinstance(agents, (tuple, list)) else ():
        if type(agent).__name__ == "NaiveExact":  # its update is a no-op; the runner passes 4 arguments
            agent.update = lambda traj, obs, state, mem: (state, mem, {})
    runner = pax_experiment.runner_setup(config, env, agents, save_dir, logger)
    steps = (
        config.get("popsize", 1)  # the rl runner has no population
        * config.get("num_devices", 1)
        * config.num_opps
        * config.num_envs
        * config.num_inner_steps
        * config.num_outer_steps
    )

    # Block boundaries: (wall, CPU) at the start of generation 1 (after the compiling one), at the
    # start of each later block's first generation, and after the loop.
    stamps: list[tuple[float, float]] = []
    start: list[float] = []  # wall time at the first generation's start (it compiles)
    blocks: list[dict] = []
    calls = 0
    last: list[object] = []
    rollout = runner.rollout

    def end_block() -> None:
        jax.block_until_ready(last)  # the block's work is done before its clock stops
        stamps.append((time.perf_counter(), time.process_time()))
        if len(stamps) == 1:
            return
        (wall0, cpu0), (wall1, cpu1) = stamps[-2], stamps[-1]
        blocks.append({"wall_s": wall1 - wall0, "cpu_s": cpu1 - cpu0})
        print("PAX_BLOCK " + json.dumps(blocks[-1]), flush=True)

    def timed_rollout(*rollout_args, **kwargs):
        nonlocal calls
        if calls == 0:
            start.append(time.perf_counter())
        if calls >= args.warmup and (calls - args.warmup) % args.generations == 0:
            end_block()
            if args.paired:
                print("PAX_READY", flush=True)
                sys.stdin.readline()
                stamps[-1] = (time.perf_counter(), time.process_time())
        calls += 1
        out = rollout(*rollout_args, **kwargs)
        last[:] = [out]
        return out

    runner.rollout = timed_rollout
    runner.run_loop(env_params, agents, args.warmup + args.repeats * args.generations, False)
    end_block()
    wall = sorted(block["wall_s"] for block in blocks)[len(blocks) // 2]
    cpu = sorted(block["cpu_s"] for block in blocks)[len(blocks) // 2]
    print(
        json.dumps(
            {
                "program": f"Pax {args.experiment} {' '.join(args.overrides)}",
                "jax": jax.__version__,
                "compile_s": stamps[0][0] - start[0],  # the warm-up generations, with the compile
                "generations": args.generations,
                "blocks": blocks,
                "generations_per_s": args.generations / wall,
                "steps_per_s": args.generations * steps / wall,
                "generations_per_cpu_s": args.generations / cpu,
                "steps_per_cpu_s": args.generations * steps / cpu,
            }
        )
    )


if __name__ == "__main__":
    main()
