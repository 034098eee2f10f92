"""Mava's own ``ff_ippo`` learner timed, for benchmarks/marl_ippo_vs_mava.py's table.

Runs in Mava's virtual environment (Mava pins jax 0.4.30; a separate process), with Mava's source
on the path. ``benchmarks/marl_ippo_vs_mava.py --mava-python`` starts it; by hand (see the marl
README for the venv lines):

    MAVA_SRC=/tmp/mava_src /tmp/mava-venv/bin/python benchmarks/mava_ippo.py --task lbf \\
        --updates 8 --repeats 3

Mava's hydra config ``mava/configs/default/ff_ippo.yaml`` is composed as Mava's entry point
composes it, with the overrides of ``--task`` (``lbf``: ``env=lbf env/scenario=8x8-2p-2f-coop``,
Jumanji's Level-Based Foraging from Mava's jumanji fork, Mava's LBF wrapper; ``mpe``: ``env=mpe
env/scenario=simple_spread_3ag env.kwargs.action_type=Discrete``, JaxMARL's MPE behind Mava's
``MPEWrapper``, which Mava has on its ``feat/mpe_wrapper`` branch only), then
``arch.num_envs``, ``system.rollout_length``, ``system.ppo_epochs``, ``system.num_minibatches``
from the command line and ``system.update_batch_size=1`` (Mava's default 2 trains two independent
learners side by side, each on its own ``num_envs`` envs; one learner is what lamella's side
runs), plus any ``key=value`` overrides. Mava's own ``make_env.make`` and ``ff_ippo.learner_setup``
build the envs, networks, optimisers and the ``pmap``-ped learner; its ``num_updates_per_eval``
(the updates one call of the learner runs, as between two of Mava's evaluations) is
``--updates``. Evaluation, logging and checkpointing (Mava's loop around the learner) are not
run: only the learner, whose output state is fed to the next call as Mava's loop does.

The first call compiles and is not timed; then ``--repeats`` blocks of one learner call each are
timed (wall and process CPU time, after the outputs are ready). With ``--paired`` it prints
``MAVA_READY`` before each block and waits for a line on stdin, so that
``marl_ippo_vs_mava.py`` can alternate lamella's timed calls with Mava's blocks (the waiting is
not timed). Prints a ``MAVA_BLOCK`` JSON line per block and a last JSON line with env steps per
block (``devices x update_batch_size x num_envs x rollout_length x updates``: steps of one env,
all agents together) and env steps/s by wall and CPU time over the median block.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.abspath(os.environ["MAVA_SRC"]))

import jax
from hydra import compose, initialize_config_dir
from mava.systems.ppo.anakin import ff_ippo  # Mava's module
from mava.utils import make_env
from omegaconf import OmegaConf

#: Mava's config overrides of each task.
TASKS = {
    "lbf": ["env=lbf", "env/scenario=8x8-2p-2f-coop"],
    "mpe": ["env=mpe", "env/scenario=simple_spread_3ag", "env.kwargs.action_type=Discrete"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="lbf")
    parser.add_argument("--updates", type=int, default=8, help="PPO updates per learner call")
    parser.add_argument("--repeats", type=int, default=3, help="timed learner calls (blocks)")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=2)
    parser.add_argument(
        "--paired",
        action="store_true",
        help="before each timed block, print a line and wait for one on stdin (marl_ippo_vs_mava.py "
        "alternates lamella's calls with Mava's blocks this way)",
    )
    parser.add_argument("overrides", nargs="*", help="further Mava config overrides, key=value")
    args = parser.parse_args()
    mava_src = os.path.abspath(os.environ["MAVA_SRC"])
    overrides = [
        *TASKS[args.task],
        f"arch.num_envs={args.num_envs}",
        f"system.rollout_length={args.rollout_length}",
        f"system.ppo_epochs={args.epochs}",
        f"system.num_minibatches={args.minibatches}",
        "system.update_batch_size=1",
        *args.overrides,
    ]
    # Mava's default config finds its groups through ``hydra.searchpath: file://mava/configs``,
    # a path relative to the working directory.
    os.chdir(mava_src)
    with initialize_config_dir(config_dir=os.path.join(mava_src, "mava/configs/default"), version_base="1.2"):
        config = compose("ff_ippo", overrides=overrides)
    OmegaConf.set_struct(config, False)  # as Mava's entry point: dynamic attributes allowed
    config.logger.system_name = "ff_ippo"
    config = copy.deepcopy(config)
    config.system.num_updates_per_eval = args.updates
    env, _ = make_env.make(config)
    keys = jax.random.split(jax.random.PRNGKey(config.system.seed), 3)
    learn, _, learner_state = ff_ippo.learner_setup(env, keys, config)
    steps = (
        len(jax.devices())
        * config.system.update_batch_size
        * config.arch.num_envs
        * config.system.rollout_length
        * args.updates
    )

    start = time.perf_counter()
    output = jax.block_until_ready(learn(learner_state))  # compiles
    compile_s = time.perf_counter() - start
    learner_state = output.learner_state
    blocks = []
    for _ in range(args.repeats):
        if args.paired:
            print("MAVA_READY", flush=True)
            sys.stdin.readline()
        wall, cpu = time.perf_counter(), time.process_time()
        output = jax.block_until_ready(learn(learner_state))
        blocks.append({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu})
        learner_state = output.learner_state
        print("MAVA_BLOCK " + json.dumps(blocks[-1]), flush=True)
    wall = sorted(block["wall_s"] for block in blocks)[len(blocks) // 2]
    cpu = sorted(block["cpu_s"] for block in blocks)[len(blocks) // 2]
    print(
        json.dumps(
            {
                "program": f"Mava ff_ippo {' '.join(overrides)}",
                "jax": jax.__version__,
                "num_agents": int(env.num_agents),
                # Each agent's observation as the networks read it (agent ids included).
                "observation_shape": list(env.observation_spec().agents_view.shape),
                "compile_s": compile_s,
                "steps_per_block": steps,
                "blocks": blocks,
                "steps_per_s": steps / wall,
                "steps_per_cpu_s": steps / cpu,
            }
        )
    )


if __name__ == "__main__":
    main()
