"""Opponent shaping on the infinite IPD: ES generations per second, and exact LOLA/NL steps per second.

    python benchmarks/shaping_infinite_ipd.py [--generations 20] [--repeats 5] [--population 64]

Lamella only (Pax's side is not run here; see the marl README for why and for what a Pax
comparison needs). Two programs, each one jitted call doing about a second of work:

* ``evolution``: :func:`lamella.marl.shaping.evolution.make_meta_es_runner` with Pax's
  ``ipd/mfos_nl`` shape: an M-FOS-style meta-agent (MLP 10 -> 16 -> 5) evolved by OpenES
  (``--population`` members) against ``--num-opps`` naive learners per member, 100 outer steps
  of the exact game per episode, discount 0.96. One call = ``--generations`` generations
  (``lax.scan`` of the runner's step). Reported: generations/s and outer steps/s (one outer
  step = one meta-agent forward pass, the exact values and one exact-gradient step of the
  opponent, per game).
* ``exact``: :func:`lamella.marl.shaping.exact.make_exact_play` LOLA vs LOLA and NL vs NL,
  ``--batch`` games of 100 steps. Reported: learner updates/s (each player's update counts one).

Every output (final ES state, all metrics; all rewards and policies) is consumed in a checksum.
Compile time (the first call) is reported separately; medians over ``--repeats`` timed calls,
the programs timed in turn.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _interleave import time_interleaved

from lamella.agents.runner import make_train
from lamella.marl.shaping import exact
from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner


def checksum(tree: object) -> jax.Array:
    leaves = [
        jnp.sum(jnp.asarray(x, jnp.float32))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.number)
    ]
    return jnp.sum(jnp.stack(leaves))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--num-opps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    config = MetaESConfig(
        strategy="Open_ES",
        population_size=args.population,
        num_opps=args.num_opps,
        num_envs=args.num_opps,
        num_outer_steps=100,
        total_timesteps=args.generations * args.population * args.num_opps * 100,
    )
    runner = make_meta_es_runner(config)

    @jax.jit
    def evolution(key: jax.Array) -> jax.Array:
        state, metrics = make_train(runner)(key)
        return checksum(state) + checksum(metrics)

    game = exact.ExactGame.prisoners_dilemma()
    lola, naive = exact.make_lola_learner(), exact.make_naive_learner()
    plays = {
        "lola_vs_lola": jax.jit(exact.make_exact_play(lola, lola, num_steps=100, batch_size=args.batch)),
        "nl_vs_nl": jax.jit(exact.make_exact_play(naive, naive, num_steps=100, batch_size=args.batch)),
    }

    def as_side(fn):
        return lambda state, key: fn(key) if state is None else checksum(fn(key, state))

    sides = {"evolution": (as_side(evolution), None)}
    for name, play in plays.items():
        sides[name] = (as_side(play), game)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
    )
    works = {
        "evolution": args.generations,
        "lola_vs_lola": 2 * 100 * args.batch,
        "nl_vs_nl": 2 * 100 * args.batch,
    }
    print(f"{'program':<14} {'compile s':>10} {'median s':>9}  rate")
    for name, side in sides.items():
        rate, compile_s, times = time_interleaved(
            {name: side}, (jax.random.key(0),), works[name], args.repeats
        )
        median = sorted(times[name])[len(times[name]) // 2]
        if name == "evolution":
            outer = args.generations * args.population * args.num_opps * 100 / median
            detail = f"{rate[name]:.2f} generations/s ({outer:.3g} outer steps/s; population {args.population}, {args.num_opps} opponents, 100 outer steps)"
        else:
            detail = f"{rate[name]:.3g} learner updates/s ({args.batch} games x 100 steps)"
        print(f"{name:<14} {compile_s[name]:>10.1f} {median:>9.3f}  {detail}")


if __name__ == "__main__":
    main()
