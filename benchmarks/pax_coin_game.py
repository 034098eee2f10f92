"""Pax's own CoinGame throughput, for benchmarks/coin_game_throughput.py's table (a separate process).

Pax pins jax 0.4.31, so it cannot share lamella's process: this script runs in its own virtual
environment with Pax's pinned versions (../shared/BENCHMARKS.md) and Pax's source on the path
(its setup.py does not package the envs usefully):

    uv venv /tmp/pax && uv pip install --python /tmp/pax/bin/python "jax==0.4.31" "jaxlib==0.4.31" \\
        "numpy<2" "chex==0.1.86" "flax==0.8.5" "gymnax==0.0.6" six
    PAX_ENVS=/path/to/pax/pax/envs /tmp/pax/bin/python benchmarks/pax_coin_game.py [--patterns abc] [--clock cpu]

Same protocol as coin_game_throughput.py's `outer600` row (1024 envs, 500 steps per call, Pax's
16 x 600 trial, egocentric flat observations, pre-drawn actions and keys, every output in a
checksum, median of the timed calls). Run it alternately with the lamella script (A B A B) and
compare medians: a cross-process ratio, noisier than the in-process ones.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.environ["PAX_ENVS"])

import jax
import jax.numpy as jnp
from coin_game import CoinGame, EnvParams  # Pax's module

NUM_ENVS, NUM_STEPS, REPEATS = 1024, 500, 5
# Consumption patterns (benchmarks/envs_throughput.py): a and b read observations, rewards and
# dones (Pax has no final observation), c rewards only. `--clock cpu` times by process CPU time.
PATTERNS = sys.argv[sys.argv.index("--patterns") + 1] if "--patterns" in sys.argv else "a"
CLOCK = time.process_time if "cpu" in sys.argv[1:] else time.perf_counter


def checksum(tree):
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree_util.tree_leaves(tree))


def main() -> None:
    for pattern in PATTERNS:
        run(pattern)


def run(pattern: str) -> None:
    env = CoinGame(num_inner_steps=16, num_outer_steps=600, cnn=False, egocentric=True)
    params = EnvParams(payoff_matrix=jnp.array([[1, 1, -2], [1, 1, -2]], jnp.float32))
    k_reset, k_actions, k_steps = jax.random.split(jax.random.PRNGKey(7), 3)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, NUM_ENVS), params)
    actions = jax.random.randint(k_actions, (NUM_STEPS, NUM_ENVS, 2), 0, 5)
    keys = jax.random.split(k_steps, NUM_STEPS * NUM_ENVS).reshape(NUM_STEPS, NUM_ENVS, 2)

    @jax.jit
    def rollout(state, keys, actions):
        def body(carry, inputs):
            state, total = carry
            step_keys, joint = inputs
            obs, state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, (0, 0), None))(
                step_keys, state, (joint[:, 0], joint[:, 1]), params
            )
            read = (reward,) if pattern == "c" else (obs, reward, done)
            return (state, total + checksum(read)), None

        (state, total), _ = jax.lax.scan(body, (state, 0.0), (keys, actions))
        return total + checksum((state.red_pos, state.blue_pos, state.red_coin_pos, state.blue_coin_pos))

    rollout(state, keys, actions).block_until_ready()
    times = []
    for _ in range(REPEATS):
        start = CLOCK()
        rollout(state, keys, actions).block_until_ready()
        times.append(CLOCK() - start)
    print(
        f"Pax CoinGame (jax {jax.__version__}), 16 x 600, pattern {pattern}, clock {CLOCK.__name__}: "
        f"{NUM_ENVS * NUM_STEPS / statistics.median(times):.3g} steps/s"
    )


if __name__ == "__main__":
    main()
