"""How rare are linear policies that balance Brax's inverted pendulum? (Why ES at a CI budget does
not learn it: lamella-agents README, "Brax bodies".)

    python benchmarks/brax_pendulum_linear_gains.py [--samples 4096] [--seed 3] [--backend spring]

Draws ``--samples`` gain vectors ``K`` (normal, per-observation scales 2, 20, 2, 5: cart position,
pole angle, their velocities), plays ``clip(K . observation, low, high)`` for one 1000-step episode
from one reset of ``brax:inverted_pendulum@<backend>`` each (vmapped, one compiled program), and
prints how many balance the whole episode and the best gains. Needs lamella-envs[brax].
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

from lamella.envs import make

STEPS = 1000
SCALES = (2.0, 20.0, 2.0, 5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--backend", default="spring")
    args = parser.parse_args()
    env, params = make(f"brax:inverted_pendulum@{args.backend}")
    space = env.action_space(params)
    low, high = jnp.asarray(space.low), jnp.asarray(space.high)

    def episode_return(gains: jax.Array, key: jax.Array) -> jax.Array:
        obs, state = env.reset(key, params)

        def step(carry: tuple, _: None) -> tuple:
            obs, state, alive, total = carry
            action = jnp.clip(jnp.reshape(obs @ gains, space.shape), low, high)
            obs, state, reward, terminated, truncated, _ = env.step(key, state, action, params)
            total = total + reward * alive
            alive = alive * (1.0 - terminated) * (1.0 - truncated)
            return (obs, state, alive, total), None

        (_, _, _, total), _ = jax.lax.scan(step, (obs, state, 1.0, 0.0), None, STEPS)
        return total

    gains = jax.random.normal(jax.random.key(args.seed), (args.samples, 4)) * jnp.asarray(SCALES)
    returns = jax.jit(jax.vmap(episode_return, in_axes=(0, None)))(gains, jax.random.key(1))
    zero = jax.jit(episode_return)(jnp.zeros(4), jax.random.key(1))
    print(f"brax:inverted_pendulum@{args.backend}, {args.samples} random linear gains, {STEPS}-step episodes")
    print(f"zero gains: {float(zero):.0f}; median {float(jnp.median(returns)):.0f}")
    for bar in (1000, 900, 500, 200):
        count = int((returns >= bar).sum())
        print(f"return >= {bar}: {count} ({100 * count / args.samples:.2f} %)")
    for i in jnp.argsort(-returns)[:5]:
        print(f"  gains {[round(float(g), 2) for g in gains[i]]}: {float(returns[i]):.0f}")


if __name__ == "__main__":
    main()
