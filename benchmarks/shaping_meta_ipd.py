"""Meta-learning (inner and outer episodes, ES over a meta-agent): lamella side by side with Pax.

    python benchmarks/shaping_meta_ipd.py [--generations 4] [--repeats 3] \
        [--pax-python /tmp/pax_meta/bin/python --pax-src /tmp/pax_src] [--programs default,pax_ipd,pax_coin_game]

Programs of :func:`lamella.marl.shaping.meta.make_meta_runner`, each one jitted call of
``--generations`` generations (``lax.scan`` of the runner's step), outputs consumed in a checksum:

* ``default``: ``MetaConfig()`` (the tested setup: CMA-ES with 16 members, 4 envs, two tabular PPO
  co-players, 20-round inner episodes, 48 per outer episode); lamella only;
* ``pax_ipd``: Pax's ``ipd/shaper_v_ppo`` (100-round inner episodes, 100 per outer episode, 10
  PPO co-players with a 16-unit layer each on 2 envs, 2 epochs x 4 minibatches, a GRU meta-agent,
  OpenES) with 16 members instead of Pax's 1000;
* ``pax_coin_game``: Pax's ``cg/train_gs`` on CoinGame (Good Shepherd: a feed-forward PPO network
  as the meta-agent, 100 envs, one co-player, 16-step inner episodes, 8 minibatches x 2 epochs)
  with 16 members, 60 inner episodes per outer episode instead of 600, and a feed-forward PPO
  co-player (Pax's yaml has ``PPO_memory``);
* ``pax_coin_game_memory``: the same with Pax's yaml's ``PPO_memory`` co-player (a 16-unit layer,
  a 16-unit GRU, the heads on its output; lamella: ``co_player_recurrent=True,
  co_player_post_core_layers=False``) updated as Pax updates it, each round
  recomputed from the GRU state stored when it acted (``co_player_recurrent_update=
  "stored_memory"``), on Pax's 100 envs;
* ``pax_coin_game_memory_bptt``: the same co-player updated with lamella's default BPTT (whole
  inner episodes, gradients through their rounds) on 96 envs instead of 100 on both sides (its 8
  minibatches split whole envs).

With ``--pax-python``, each ``pax_*`` program also runs in Pax from its source
(``benchmarks/pax_meta.py`` in Pax's own virtual environment, a subprocess: Pax pins jax 0.4.31)
with the same sizes, and the table adds Pax's rates and lamella / Pax ratios by CPU time (process
CPU time of all threads, steadier than wall time on a shared machine). The two sides are paired:
after both have compiled, each of lamella's ``--repeats`` timed calls is followed by one block of
``--generations`` of Pax's generations (its process waits between blocks), so each pair ran under
the same load; the ratio of every pair is printed beside the medians' ratio.

Reported: compile time (the first call), generations/s and env steps/s (members x envs x rounds x
inner episodes per generation) over the median of ``--repeats`` timed calls, by wall and CPU time,
and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _peer import pax_starter, time_with_peer

from lamella.agents.runner import make_train
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner


def checksum(tree: object) -> jax.Array:
    leaves = [
        jnp.sum(jnp.asarray(x, jnp.float32))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.number)
    ]
    return jnp.sum(jnp.stack(leaves))


#: Each Pax-shaped program's Pax counterpart: (experiment yaml, overrides).
PAX = {
    "pax_ipd": ("ipd/shaper_v_ppo", ["popsize=16"]),
    "pax_coin_game": (
        "cg/train_gs",
        [
            "popsize=16",
            "num_devices=1",
            "num_outer_steps=60",
            "agent2=PPO",
            "ppo2.with_memory=False",
            "+es.mean_reduce=False",
        ],
    ),
    # Pax's yaml as it is (agent2=PPO_memory).
    "pax_coin_game_memory": (
        "cg/train_gs",
        ["popsize=16", "num_devices=1", "num_outer_steps=60", "+es.mean_reduce=False"],
    ),
    # The same on 96 envs instead of 100 on both sides: lamella's BPTT co-player splits its
    # minibatches over whole envs, which 8 must divide.
    "pax_coin_game_memory_bptt": (
        "cg/train_gs",
        ["popsize=16", "num_devices=1", "num_outer_steps=60", "num_envs=96", "+es.mean_reduce=False"],
    ),
}


def programs() -> dict[str, MetaConfig]:
    configs = {
        "default": MetaConfig(),
        "pax_ipd": MetaConfig(
            strategy="Open_ES",
            population_size=16,
            sigma_init=0.04,
            num_inner_steps=100,
            num_outer_steps=100,
            num_envs=20,  # Pax: num_opps 10 x num_envs 2
            num_opponents=10,
            meta_recurrent=True,
            meta_hidden_sizes=(16,),
            hidden_sizes=(16,),
            num_epochs=2,
            num_minibatches=4,
            learning_rate=1.0,
            ent_coef=0.02,
        ),
        "pax_coin_game": MetaConfig(
            env_id="CoinGame-v0",
            strategy="Open_ES",
            population_size=16,
            sigma_init=0.04,
            num_inner_steps=16,
            num_outer_steps=60,
            num_envs=100,
            num_opponents=1,
            meta_hidden_sizes=(16,),
            hidden_sizes=(16,),
            num_epochs=2,
            num_minibatches=8,
            learning_rate=0.005,
            ent_coef=0.1,
        ),
    }
    # The same with Pax's PPO_memory co-player: a 16-unit layer, then a 16-unit GRU whose state
    # starts afresh every inner episode, updated as Pax's is (each round from its stored state).
    # Its policy and value heads read the GRU's output as Pax's do (no dense layer of its own for
    # the actor and the critic after the GRU, lamella's default).
    configs["pax_coin_game_memory"] = dataclasses.replace(
        configs["pax_coin_game"],
        co_player_recurrent=True,
        co_player_rnn_hidden_size=16,
        co_player_recurrent_update="stored_memory",
        co_player_post_core_layers=False,
    )
    # ... and with lamella's default BPTT update (minibatches of whole envs: 96 of them).
    configs["pax_coin_game_memory_bptt"] = dataclasses.replace(
        configs["pax_coin_game_memory"], num_envs=96, co_player_recurrent_update="bptt"
    )
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--programs", default="default,pax_ipd,pax_coin_game")
    parser.add_argument("--pax-python", help="the Python of Pax's virtual environment (see pax_meta.py)")
    parser.add_argument("--pax-src", default=os.environ.get("PAX_SRC"), help="Pax's source tree")
    args = parser.parse_args()
    if args.pax_python and not args.pax_src:
        parser.error("--pax-python needs --pax-src (or PAX_SRC): the folder holding Pax's pax/ package")
    configs = {name: config for name, config in programs().items() if name in args.programs.split(",")}
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
    )
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'program':<14} {'compile s':>10} {'median s':>9}  rate (wall; CPU)")
    for name, config in configs.items():
        config = dataclasses.replace(config, total_timesteps=args.generations * config.steps_per_iteration)
        runner = make_meta_runner(config)

        @jax.jit
        def train(key: jax.Array, runner=runner) -> jax.Array:
            state, metrics = make_train(runner)(key)
            return checksum(state) + checksum(metrics)

        start_pax = None
        if name in PAX:
            experiment, overrides = PAX[name]
            start_pax = pax_starter(
                args.pax_python, args.pax_src, experiment, args.generations, args.repeats, overrides
            )
        key = jax.random.key(0)
        time_with_peer(
            name,
            lambda train=train: train(key),
            config.steps_per_iteration,
            args.generations,
            args.repeats,
            start_pax,
            "generations",
        )


if __name__ == "__main__":
    main()
