"""IPPO training throughput: lamella-marl against Mava's own ``ff_ippo``, paired, same config.

    python benchmarks/marl_ippo_vs_mava.py --mava-python /tmp/mava-venv/bin/python --mava-src /tmp/mava_src \\
        [--tasks lbf,mpe] [--updates 8] [--repeats 5]

Mava pins jax 0.4.30, so its side runs in its own virtual environment as a subprocess
(``benchmarks/mava_ippo.py``, which builds Mava's ``ff_ippo`` learner from Mava's hydra config
and times it; the marl README has the venv lines). Without ``--mava-python`` only lamella's side
runs.

The same config on both sides, Mava's ``ff_ippo`` defaults: 16 envs x 128 steps per update,
4 epochs, 2 minibatches, lr 2.5e-4 (Mava: actor and critic) without decay, clip 0.2 (ratio and
value), entropy 0.01, value 0.5, gradient norm 0.5, advantages standardised per minibatch,
actor and critic MLP torsos of (128, 128) ReLU, one set of parameters shared by all agents, a
one-hot agent id appended to each agent's observation (Mava's ``add_agent_id``), the critic on
the same per-agent input (independent critics: IPPO), action masks applied (Mava's LBF
wrapper gives them; its MPE wrapper gives all-true masks). Mava's ``update_batch_size`` is set to
1 (its default 2 trains two independent learners, each on its own 16 envs).

Tasks (each side its own implementation of the env, as its users run it):

* ``lbf``: lamella ``Foraging-8x8-2p-2f-coop-v3`` against Mava's ``lbf`` ``8x8-2p-2f-coop``
  (Jumanji's LBF in Mava's jumanji fork: 8x8, 2 agents, 2 food, full view, forced
  cooperation). Both train on the team reward (Mava's ``use_individual_rewards=False``).
  Not matched: lamella's episodes end after 50 steps (lbforaging v3), Mava's after 100.
* ``mpe``: lamella ``MPE-simple_spread-v3`` (3 agents, discrete actions) against JaxMARL's
  ``MPE_simple_spread_v3`` behind Mava's ``MPEWrapper`` (``env.kwargs.action_type=Discrete``),
  both 25-step episodes; each agent trains on its own reward as Mava's wrapper gives it
  (``team_reward=False`` on lamella's side).

Not matched by construction: Mava keeps two optimisers (actor and critic, each with its own
gradient-norm clip); lamella one over both networks. Mava's learner is ``pmap``-ped over the
devices (one CPU device here) and ``vmap``-ped over its update batch (of 1).

Timing: each side compiles first (not timed). lamella's timed call is one jitted
``lax.scan`` of ``--updates`` runner steps from the previous call's state (as Mava's learner
call runs ``num_updates_per_eval`` updates from its previous state); its outputs (state and
metrics) are ready before the clock stops. Then Mava runs one block of the same ``--updates``
updates, and so on, ``--repeats`` pairs: each pair ran under the same load. Reported: env steps
(one env's step, all agents together) per CPU-second of each process (all threads), the
medians' ratio and the median of the paired ratios, wall-clock figures beside them, the load
average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
from _peer import PeerProcess

import lamella.envs
from lamella.marl import IPPOConfig, make_ippo_runner

#: lamella's side of each task.
TASKS = {
    "lbf": IPPOConfig(env_id="Foraging-8x8-2p-2f-coop-v3", team_reward=True),
    "mpe": IPPOConfig(env_id="MPE-simple_spread-v3", team_reward=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="lbf,mpe", help="comma-separated: lbf, mpe")
    parser.add_argument("--updates", type=int, default=8, help="PPO updates per timed call (both sides)")
    parser.add_argument("--repeats", type=int, default=5, help="timed pairs per task")
    parser.add_argument("--mava-python", help="the Python of Mava's virtual environment (see mava_ippo.py)")
    parser.add_argument("--mava-src", default=os.environ.get("MAVA_SRC"), help="Mava's source tree")
    args = parser.parse_args()
    if args.mava_python and not args.mava_src:
        parser.error("--mava-python needs --mava-src (or MAVA_SRC): the folder holding Mava's mava/ package")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
    )
    for task in args.tasks.split(","):
        config = TASKS[task]
        config = dataclasses.replace(config, total_timesteps=args.updates * config.steps_per_iteration)
        runner = make_ippo_runner(config)
        env, params = lamella.envs.make(config.env_id)
        steps = args.updates * config.steps_per_iteration

        @jax.jit
        def train(state: Any, runner: Any = runner) -> Any:
            return jax.lax.scan(lambda s, _: runner.step(s), state, None, length=args.updates)

        state = jax.jit(runner.init)(jax.random.key(0))
        start = time.perf_counter()
        state, _ = jax.block_until_ready(train(state))  # compiles
        compile_s = time.perf_counter() - start
        mava = None
        if args.mava_python:
            mava = PeerProcess(
                args.mava_python,
                "mava_ippo.py",
                ["--task", task, "--updates", str(args.updates), "--repeats", str(args.repeats)],
                {"MAVA_SRC": args.mava_src},
                "MAVA",
            )
        lamella_blocks, mava_blocks = [], []
        # lamella, Mava, lamella, Mava, ...: each pair shares the machine's load of the moment.
        for _ in range(args.repeats):
            if mava is not None:
                mava.ready()  # not timed: Mava's compile, or the end of its previous block
            wall, cpu = time.perf_counter(), time.process_time()
            state, _ = jax.block_until_ready(train(state))
            lamella_blocks.append({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu})
            if mava is not None:
                mava_blocks.append(mava.block())
        cpu = statistics.median(block["cpu_s"] for block in lamella_blocks)
        wall = statistics.median(block["wall_s"] for block in lamella_blocks)
        print(
            f"{task}: lamella {config.env_id} ({env.num_agents} agents, observation "
            f"{env.observation_space(params).shape[1:]} + agent id), {config.num_envs} envs x "
            f"{config.num_steps} steps, {args.updates} updates per call; compile {compile_s:.1f} s"
        )
        print(f"  lamella  {steps / cpu:>9.4g} env steps per CPU-s, {steps / wall:>9.4g} per wall-s")
        if mava is not None:
            summary = mava.summary()
            mava_cpu = statistics.median(block["cpu_s"] for block in mava_blocks)
            mava_wall = statistics.median(block["wall_s"] for block in mava_blocks)
            ratios = [
                (b["cpu_s"] / summary["steps_per_block"]) / (a["cpu_s"] / steps)
                for a, b in zip(lamella_blocks, mava_blocks, strict=True)
            ]
            mava_steps = summary["steps_per_block"]
            print(
                f"  Mava     {mava_steps / mava_cpu:>9.4g} env steps per CPU-s, {mava_steps / mava_wall:>9.4g} per "
                f"wall-s (jax {summary['jax']}, {summary['num_agents']} agents, observation with agent id "
                f"{tuple(summary['observation_shape'][1:])}; compile {summary['compile_s']:.1f} s)"
            )
            print(
                f"  lamella / Mava by CPU: medians {(steps / cpu) / (mava_steps / mava_cpu):.2f}x; paired "
                f"median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
                f"by wall: medians {(steps / wall) / (mava_steps / mava_wall):.2f}x"
            )
        print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
