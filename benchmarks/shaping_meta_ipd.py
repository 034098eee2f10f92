"""Meta-learning on the finite IPD (inner and outer episodes): ES generations and env steps per second.

    python benchmarks/shaping_meta_ipd.py [--generations 4] [--repeats 3]

Lamella only (Pax's ``evo`` runner is not run side by side here; see the marl README). Two
programs of :func:`lamella.marl.shaping.meta.make_meta_runner`, each one jitted call of
``--generations`` generations (``lax.scan`` of the runner's step), outputs consumed in a checksum:

* ``default``: ``MetaConfig()`` (the tested setup: CMA-ES with 16 members, 4 envs, two tabular PPO
  co-players, 20-round inner episodes, 48 per outer episode);
* ``pax_shape``: Pax's ``ipd/shaper_v_ppo`` episode shape (100-round inner episodes, 100 per outer
  episode, 10 co-players on 10 envs, PPO co-players with a 16-unit layer, 2 epochs x 4 minibatches)
  with a GRU meta-agent and OpenES, but 16 members instead of Pax's 1000.

Reported: compile time (the first call), generations/s and env steps/s (members x envs x rounds x
inner episodes per generation, over the median of ``--repeats`` timed calls).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner


def checksum(tree: object) -> jax.Array:
    leaves = [
        jnp.sum(jnp.asarray(x, jnp.float32))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.number)
    ]
    return jnp.sum(jnp.stack(leaves))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    configs = {
        "default": MetaConfig(),
        "pax_shape": MetaConfig(
            strategy="Open_ES",
            population_size=16,
            num_inner_steps=100,
            num_outer_steps=100,
            num_envs=10,
            num_opponents=10,
            meta_recurrent=True,
            meta_hidden_sizes=(16,),
            hidden_sizes=(16,),
            num_epochs=2,
            num_minibatches=4,
            learning_rate=0.01,
        ),
    }
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
    )
    print(f"{'program':<10} {'compile s':>10} {'median s':>9}  rate")
    for name, config in configs.items():
        config = dataclasses.replace(config, total_timesteps=args.generations * config.steps_per_iteration)
        runner = make_meta_runner(config)

        @jax.jit
        def train(key: jax.Array, runner=runner) -> jax.Array:
            state, metrics = make_train(runner)(key)
            return checksum(state) + checksum(metrics)

        rate, compile_s, times = time_interleaved(
            {name: (lambda state, key, train=train: train(key), None)},
            (jax.random.key(0),),
            args.generations,
            args.repeats,
        )
        median = sorted(times[name])[len(times[name]) // 2]
        steps = args.generations * config.steps_per_iteration / median
        print(
            f"{name:<10} {compile_s[name]:>10.1f} {median:>9.3f}  {rate[name]:.3g} generations/s, "
            f"{steps:.3g} env steps/s"
        )


if __name__ == "__main__":
    main()
