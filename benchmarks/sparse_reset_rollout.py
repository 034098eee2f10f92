"""Resets only where an episode ended (lamella-envs' ``sparse_reset``) against a reset on every step.

    python benchmarks/sparse_reset_rollout.py [--envs ID ...] [--num-envs 16] [--repeats 11]

For each env that sets ``sparse_reset``, IPPO's rollout (lamella-marl's collector, its network at
initialisation, (64, 64) tanh as in ``marl_ippo_throughput.py``) of 128 steps is built twice in
one process: once as the env class sets it (the batch's resets computed only on steps where some
env is done) and once with ``sparse_reset = False`` (a reset for every env on every step, then a
select). One timed call runs 16 rollouts and returns a checksum of every transition; the two programs'
transitions are compared (integers must be equal; the largest float difference is printed: XLA
may fuse float dynamics otherwise around the branch), and they are timed in turn (process CPU time by default),
the median of the paired ratios reported with the number of steps on which some env ended.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _interleave import time_interleaved

import lamella.envs
from lamella.agents.rollout import actor_critic_policy, make_rollout
from lamella.envs import wrappers
from lamella.marl import IPPOConfig
from lamella.marl.observation import MultiAgentObservation, num_actions_of
from lamella.marl.ppo import make_multi_agent_ppo

ENVS = (
    "Foraging-8x8-2p-2f-coop-v3",
    "MPE-simple_spread-v3",
    "rware-tiny-2ag-v2",
    "SMAX-3m-v0",
    "CoinGame-v0",
)
STEPS, CALLS = 128, 16


def rollouts(env_id: str, num_envs: int, sparse: bool) -> tuple[Any, Any]:
    """A call of CALLS rollouts (to be jitted) and its starting state, with the env's sparse_reset set."""
    env, params = lamella.envs.make(env_id, autoreset=False)
    env.sparse_reset = sparse  # an instance attribute: the wrappers below copy it
    config = IPPOConfig(
        env_id=env_id, num_envs=num_envs, num_steps=STEPS, hidden_sizes=(64, 64), activation="tanh"
    )
    agent, actor_critic = make_multi_agent_ppo(config, env.num_agents, num_actions_of(env, params))
    train_env = wrappers.EpisodeStatistics(wrappers.AutoReset(MultiAgentObservation(env)))
    assert train_env.sparse_reset == sparse
    rollout = make_rollout(
        train_env, STEPS, num_envs, info_keys=("returned_episode", "returned_episode_returns")
    )
    key = jax.random.key(0)
    start = rollout.init(key, params)
    train_state, _ = agent.init(key, start.obs)

    def run(start: Any, key: jax.Array) -> Any:
        def body(state: Any, key: jax.Array) -> Any:
            policy = actor_critic_policy(actor_critic, train_state.params)
            return rollout.collect(state, policy, key, params)

        return jax.lax.scan(body, start, jax.random.split(key, CALLS))[1]

    return run, start


def checksum(tree: Any) -> jax.Array:
    """Every leaf summed: no output of the rollout can be left out of the compiled program."""
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree.leaves(tree))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--clock", choices=("process", "wall"), default="process")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    print(
        f"IPPO rollouts, {args.num_envs} envs x {STEPS} steps, {CALLS} per call, {args.clock} clock, "
        f"jax {jax.__version__}, {os.cpu_count()} CPU(s)"
    )
    print(
        f"{'env':<28} {'every step (ms)':>16} {'sparse (ms)':>12} {'speed-up':>9}  {'range':>11}  "
        "steps with an end; transitions compared"
    )
    key = jax.random.key(1)
    for env_id in args.envs:
        sides = {name: rollouts(env_id, args.num_envs, name == "sparse") for name in ("every", "sparse")}
        outputs = {name: jax.jit(fn)(start, key) for name, (fn, start) in sides.items()}
        pairs = list(zip(jax.tree.leaves(outputs["every"]), jax.tree.leaves(outputs["sparse"]), strict=True))
        ints_equal = all(
            bool(jnp.array_equal(a, b)) for a, b in pairs if not jnp.issubdtype(a.dtype, jnp.floating)
        )
        float_diff = max(
            (
                float(jnp.max(jnp.abs(a - b)))
                for a, b in pairs
                if jnp.issubdtype(a.dtype, jnp.floating) and a.size
            ),
            default=0.0,
        )
        ended = int(
            jnp.sum(jnp.any(outputs["sparse"].done.reshape(CALLS * STEPS, args.num_envs, -1), axis=(1, 2)))
        )
        timed = {
            name: (jax.jit(lambda state, key, fn=fn: checksum(fn(state, key))), start)
            for name, (fn, start) in sides.items()
        }
        _, _, times = time_interleaved(timed, (key,), CALLS * STEPS, args.repeats, clock)
        ratios = [a / b for a, b in zip(times["every"], times["sparse"])]
        per_rollout = {name: statistics.median(t) / CALLS * 1e3 for name, t in times.items()}
        print(
            f"{env_id:<28} {per_rollout['every']:>16.2f} {per_rollout['sparse']:>12.2f} "
            f"{statistics.median(ratios):>8.2f}x  {min(ratios):.2f}-{max(ratios):.2f}  "
            f"{ended} of {CALLS * STEPS}; integers {'equal' if ints_equal else 'DIFFER'}, "
            f"largest float difference {float_diff:.1e}"
        )


if __name__ == "__main__":
    main()
