"""Meta-learning on CoinGame: does an evolved meta-agent shape a learning PPO co-player's coin-taking?

    python benchmarks/shaping_meta_coin_game.py [--generations 48] [--outer 48] [--seeds 3]

Pax's CoinGame (3 x 3 torus, payoff ``[[1, 1, -2], [1, 1, -2]]``: every coin pays its taker +1,
and its owner -2 when the other player takes it; 16-step inner episodes), the setup of Pax's
``cg/train_gs.yaml`` / ``cg/train_shaper.yaml`` at a small budget: a meta-agent (player 0)
searched by an evosax strategy over its parameters for its own mean reward per step, against
fresh PPO co-players (two per member, each on half the envs) that update once per inner episode
over ``--outer`` inner episodes (:func:`lamella.marl.shaping.meta.make_meta_runner`).

The baseline is two naive PPO learners with the co-player's settings
(:func:`lamella.marl.shaping.runner.make_shaping_runner` with two learners). Printed: each agent's
own-coin share (of the coins it took, the fraction of its own colour; Pax's ``coop`` over
``coop + defect``) and mean reward per step, for the naive pair over the same outer episode, and
for the evolved population (first and last quarter of the generations) and the search's centre
(fresh co-players). All seeds run in one vmapped program.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np

import lamella.envs
from lamella.agents.runner import make_train
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.runner import LEARNER, make_shaping_runner


def config_for(args: argparse.Namespace) -> MetaConfig:
    config = MetaConfig(
        env_id="CoinGame-v0",
        num_inner_steps=16,
        num_outer_steps=args.outer,
        num_envs=16,
        num_opponents=2,
        hidden_sizes=(),
        learning_rate=0.1,
        num_epochs=4,
        num_minibatches=2,
        ent_coef=0.0,
        strategy=args.strategy,
        population_size=16,
        sigma_init=0.5,
        meta_hidden_sizes=(),
        eval_episodes=2,
    )
    return dataclasses.replace(config, total_timesteps=args.generations * config.steps_per_iteration)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=48)
    parser.add_argument("--outer", type=int, default=48, help="inner episodes per outer episode")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--strategy", default="CMA_ES")
    args = parser.parse_args()
    config = config_for(args)
    np.set_printoptions(precision=2, suppress=True)

    env, env_params = lamella.envs.make(
        config.env_id, autoreset=False, num_inner_steps=config.num_inner_steps
    )
    pair = make_shaping_runner(config.co_player_config(), env, env_params, agents=[LEARNER, LEARNER])

    def naive(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        _, metrics = jax.lax.scan(
            lambda s, _: pair.step(s), pair.init(key), None, length=config.num_outer_steps
        )
        return metrics["own_coin_share"], metrics["reward"].mean(0)

    start = time.perf_counter()
    share, reward = jax.jit(jax.vmap(naive))(jax.random.split(jax.random.key(0), args.seeds))
    share = np.asarray(share)  # (seeds, inner episodes, 2)
    last = max(config.num_outer_steps // 4, 1)
    print(f"naive PPO pair ({time.perf_counter() - start:.0f} s), per seed, over the outer episode:")
    print(f"  own-coin share, player 0 {share[:, :, 0].mean(1)}, player 1 {share[:, :, 1].mean(1)}")
    print(f"  player 1's own-coin share, last quarter of the inner episodes {share[:, -last:, 1].mean(1)}")
    print(f"  reward per step, player 0 {np.asarray(reward[:, 0])}, player 1 {np.asarray(reward[:, 1])}")

    runner = make_meta_runner(config)

    def train(key: jax.Array) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        state, metrics = make_train(runner)(key)
        return metrics, runner.evaluate(state, jax.random.fold_in(key, 1))

    start = time.perf_counter()
    metrics, centre = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(1), args.seeds))
    quarter = max(args.generations // 4, 1)
    print(
        f"evolved meta-agent, {args.strategy}, {args.generations} generations ({time.perf_counter() - start:.0f} s):"
    )
    for name in (
        "episode_return",
        "co_player_return",
        "meta_cooperation",
        "co_player_cooperation",
        "co_player_cooperation_last",
    ):
        series = np.asarray(metrics[name])
        print(
            f"  {name:<22} first quarter {series[:, :quarter].mean(1)}, last quarter {series[:, -quarter:].mean(1)}"
        )
    print(
        f"  centre vs fresh co-players: meta {np.asarray(centre['episode_return']).mean(1)}, "
        f"co-player's last own-coin share {np.asarray(centre['co_player_cooperation_last']).mean(1)}"
    )


if __name__ == "__main__":
    main()
