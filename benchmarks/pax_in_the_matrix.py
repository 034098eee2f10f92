"""Pax's own InTheMatrix (IPD in the Matrix) throughput, beside coin_game_throughput.py's `storm` row
(a separate process).

Pax pins jax 0.4.31, so it cannot share lamella's process: this script runs in its own virtual
environment with Pax's pinned versions and Pax's source on the path, as benchmarks/pax_coin_game.py:

    uv venv /tmp/pax && uv pip install --python /tmp/pax/bin/python "jax==0.4.31" "jaxlib==0.4.31" \\
        "numpy<2" "chex==0.1.86" "flax==0.8.5" "gymnax==0.0.6" six
    PAX_ENVS=/path/to/pax/pax/envs /tmp/pax/bin/python benchmarks/pax_in_the_matrix.py \\
        [--steps 300] [--repeats 5] [--patterns abc] [--clock cpu]

Same protocol as coin_game_throughput.py's `storm` row: Pax's ipditm settings (8x8 grid, six coins
of each colour, fixed coin layouts, freeze 5, 152-step inner episodes, payoff
[[[3, 0], [5, 1]], [[3, 5], [0, 1]]]), 1024 envs, uniform random actions in 0..4 and one key per
env and step drawn before the timed calls, one call = `jit(scan(vmap(step)))`, every output a
pattern reads and the final state in a checksum, median of the timed calls. Patterns: a and b
read both agents' observation dicts (5x5 view and inventory), rewards and the done flag (Pax has
no final observation, so b reads what a reads), c the rewards only. Pax resets the players and
coins itself at every inner end (its `outer_t` only counts), which is what lamella's
`num_outer_steps=1` episodes do. Run it alternately with the lamella script (A B A B) and compare
medians: a cross-process ratio, noisier than the in-process ones.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Pax's in_the_matrix imports `pax.envs.rendering`: the folder holding `pax/` goes on the path too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(os.environ["PAX_ENVS"]))))
sys.path.insert(0, os.environ["PAX_ENVS"])

import jax
import jax.numpy as jnp
from in_the_matrix import EnvParams, InTheMatrix  # Pax's module

NUM_ENVS, INNER = 1024, 152
PAYOFF = [[[3, 0], [5, 1]], [[3, 5], [0, 1]]]


def checksum(tree):
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree_util.tree_leaves(tree))


def run(pattern: str, num_steps: int, repeats: int, clock) -> float:
    env = InTheMatrix(num_inner_steps=INNER, num_outer_steps=1, fixed_coin_location=True)
    params = EnvParams(payoff_matrix=jnp.array(PAYOFF, jnp.float32), freeze_penalty=5)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.PRNGKey(7), 3)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, NUM_ENVS), params)
    actions = jax.random.randint(k_actions, (num_steps, NUM_ENVS, 2), 0, 5)
    keys = jax.random.split(k_steps, num_steps * NUM_ENVS).reshape(num_steps, NUM_ENVS, 2)

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
        return total + checksum((state.red_pos, state.blue_pos, state.grid, state.freeze))

    start = time.perf_counter()
    rollout(state, keys, actions).block_until_ready()
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = clock()
        rollout(state, keys, actions).block_until_ready()
        times.append(clock() - start)
    rate = NUM_ENVS * num_steps / statistics.median(times)
    shapes = jax.tree_util.tree_map(lambda x: tuple(x.shape[1:]), obs)
    print(
        f"Pax InTheMatrix (ipditm, {INNER}-step inner episodes), pattern {pattern}, clock {clock.__name__}: "
        f"{rate:.3g} steps/s (compile + first call {compile_s:.1f} s wall; per-agent observation {shapes})",
        flush=True,
    )
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--patterns", default="abc")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, jax {jax.__version__} on "
        f"{jax.devices()[0].platform}; {NUM_ENVS} envs x {args.steps} steps per call, "
        f"median of {args.repeats}, clock {args.clock}",
        flush=True,
    )
    for pattern in args.patterns:
        run(pattern, args.steps, args.repeats, clock)


if __name__ == "__main__":
    main()
