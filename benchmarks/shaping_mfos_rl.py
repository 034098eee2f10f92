"""M-FOS with reinforcement learning on the infinite IPD: lamella side by side with Pax.

    python benchmarks/shaping_mfos_rl.py [--num-envs 4000] [--updates 2] [--repeats 3] \
        [--pax-python /tmp/pax_meta/bin/python --pax-src /tmp/pax_src]

lamella's side: :func:`lamella.marl.shaping.mfos.make_mfos_runner` on the sizes of Pax's
``ipd/inf_mfos_v_nl`` (the ``rl`` runner: a ``Hyper`` PPO meta-agent against an exact naive
learner, ``NaiveEx``, learning rate 1): ``--num-envs`` games (Pax: 4,000) of 100 outer steps, each
the meta-agent's memory-one policy for the next step and the learner's exact gradient step
against it; then PPO, 4 epochs of one minibatch of all the outer steps, Adam 4e-3, gamma 0.96,
GAE lambda 0.99, clip 0.2 (value clipping too), value coefficient 0.5, entropy 0.01, gradient
norm 0.5, and a 256-unit tanh layer for the actor and one for the critic (Pax's ``Hyper``
network). One jitted call of ``--updates`` updates (``make_train``: init and a ``lax.scan`` of
the runner's step), its outputs consumed in a checksum. What differs: Pax's Gaussian takes its
scale from the network (softplus), lamella's from a learned log-std; Pax puts its sample through
a sigmoid inside the game, lamella squashes it with tanh into ``Box(0, 1)``; lamella's call also
initialises its state (once per call, small beside the updates).

With ``--pax-python``, Pax runs the same sizes from its source (``benchmarks/pax_meta.py`` in
Pax's own virtual environment, a subprocess: Pax pins jax 0.4.31; its module docs say how to make
that environment and which of Pax's mismatches at 6ae3d07 it works around), its iterations timed
in blocks of ``--updates`` after two warm-up iterations (its runner compiles on the first two).
The sides alternate (lamella's call, one block of Pax's), so each pair ran under the same load;
the rows give both sides' medians, their ratios and every pair's ratio, by wall clock and by CPU
time (process CPU time of all threads). Env steps are outer steps: envs x 100 per update.
"""

from __future__ import annotations

import argparse
import os
import platform

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
from _peer import pax_starter, time_with_peer
from shaping_meta_ipd import checksum

from lamella.agents.runner import make_train
from lamella.marl.shaping.mfos import MFOSConfig, make_mfos_runner

#: Pax's ``ipd/inf_mfos_v_nl`` (its yaml lacks the env's episode length and the inner steps).
PAX_EXPERIMENT = ("ipd/inf_mfos_v_nl", ["+num_steps=100", "+num_inner_steps=1"])
OUTER_STEPS = 100


def pax_sized_config(num_envs: int, updates: int) -> MFOSConfig:
    """lamella's M-FOS (RL) on the sizes and PPO settings of Pax's ``ipd/inf_mfos_v_nl``."""
    return MFOSConfig(
        num_envs=num_envs,
        num_steps=OUTER_STEPS,
        num_outer_steps=OUTER_STEPS,
        total_timesteps=updates * num_envs * OUTER_STEPS,
        num_epochs=4,
        num_minibatches=1,
        learning_rate=4e-3,
        anneal_lr=False,
        gamma=0.96,
        gae_lambda=0.99,
        clip_eps=0.2,
        clip_value=True,
        vf_coef=0.5,
        ent_coef=0.01,
        max_grad_norm=0.5,
        hidden_sizes=(256,),
        activation="tanh",
        opponent="naive",
        opponent_lr=1.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4000, help="games per update (Pax's num_envs: 4000)")
    parser.add_argument("--updates", type=int, default=2, help="updates per timed call (a block of Pax's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pax-python", help="the Python of Pax's virtual environment (see pax_meta.py)")
    parser.add_argument("--pax-src", default=os.environ.get("PAX_SRC"), help="Pax's source tree")
    args = parser.parse_args()
    if args.pax_python and not args.pax_src:
        parser.error("--pax-python needs --pax-src (or PAX_SRC): the folder holding Pax's pax/ package")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
    )
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'program':<14} {'compile s':>10} {'median s':>9}  rate (wall; CPU)")
    runner = make_mfos_runner(pax_sized_config(args.num_envs, args.updates))

    @jax.jit
    def train(key: jax.Array) -> jax.Array:
        state, metrics = make_train(runner)(key)
        return checksum(state) + checksum(metrics)

    experiment, overrides = PAX_EXPERIMENT
    # Pax's runner compiles on its first two iterations.
    start_pax = pax_starter(
        args.pax_python,
        args.pax_src,
        experiment,
        args.updates,
        args.repeats,
        [f"num_envs={args.num_envs}", *overrides],
        warmup=2,
    )
    key = jax.random.key(0)
    time_with_peer(
        f"mfos_rl {args.num_envs}",
        lambda: train(key),
        runner.steps_per_iteration,
        args.updates,
        args.repeats,
        start_pax,
        "updates",
    )


if __name__ == "__main__":
    main()
