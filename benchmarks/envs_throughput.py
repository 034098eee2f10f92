"""Environment throughput: lamella against gymnax, side by side in one process.

    hatch run bench:envs          # or: python benchmarks/envs_throughput.py [--envs ID ...] [--sizes 1 1024 8192]

Protocol (../shared/BENCHMARKS.md): same env ids on both sides, auto-reset on, a fresh key per
env per step, actions and keys drawn before the timed call (the same arrays for both
libraries), every output (observation, reward, both flags, final observation, final state)
consumed in a checksum, timed calls interleaved (lamella, gymnax, bare, lamella, ...), medians
reported. "bare" is the practical ceiling: lamella's physics alone (no keys, no resets), and
"of bare" is lamella's steps/s as a fraction of it (it can exceed 1: the bare rollout reads the
bare env's flags in several places, which XLA on CPU recomputes, while AutoReset computes its
`done` once). Compile time is reported separately.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

import lamella.envs as le

# lamella id -> gymnax id, for every env both libraries have.
SHARED = {
    "CartPole-v1": "CartPole-v1",
    "Pendulum-v1": "Pendulum-v1",
    "Acrobot-v1": "Acrobot-v1",
    "MountainCar-v0": "MountainCar-v0",
    "MountainCarContinuous-v0": "MountainCarContinuous-v0",
    "Catch-bsuite": "Catch-bsuite",
    "DeepSea-bsuite": "DeepSea-bsuite",
    "MemoryChain-bsuite": "MemoryChain-bsuite",
    "UmbrellaChain-bsuite": "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite": "DiscountingChain-bsuite",
    "SimpleBandit-bsuite": "SimpleBandit-bsuite",
    "Asterix-MinAtar": "Asterix-MinAtar",
    "Breakout-MinAtar": "Breakout-MinAtar",
    "Freeway-MinAtar": "Freeway-MinAtar",
    "Seaquest-MinAtar": "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar": "SpaceInvaders-MinAtar",
    "FourRooms-misc": "FourRooms-misc",
    "MetaMaze-misc": "MetaMaze-misc",
    "PointRobot-misc": "PointRobot-misc",
    "BernoulliBandit-misc": "BernoulliBandit-misc",
    "GaussianBandit-misc": "GaussianBandit-misc",
    "Reacher-misc": "Reacher-misc",
    "Swimmer-misc": "Swimmer-misc",
    "Pong-misc": "Pong-misc",
}

# Steps per timed call for each batch size: about a second of work on 2 CPU cores.
DEFAULT_STEPS = {1: 20_000, 1024: 2000, 8192: 250}


def _checksum(tree: Any) -> jax.Array:
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree.leaves(tree))


def make_rollout(step: Callable[..., Any], state0: Any, params: Any) -> Callable[..., jax.Array]:
    """A jitted scan of ``vmap(step)`` over pre-drawn keys and actions, returning a checksum."""

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            obs, state, reward, terminated, truncated, info = jax.vmap(step, in_axes=(0, 0, 0, None))(
                step_keys, state, step_actions, params
            )
            total = total + _checksum(
                (obs, reward, terminated, truncated, info.get("final_observation", 0.0))
            )
            return (state, total), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + _checksum(state)

    return jax.jit(rollout)


def make_bare_rollout(env: Any, params: Any) -> Callable[..., jax.Array]:
    """The practical ceiling: the bare dynamics, one constant key, no resets."""
    bare = env.unwrapped
    key = jax.random.key(0)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        del keys

        def body(carry: Any, step_actions: Any) -> Any:
            state, total = carry
            obs, state, reward, terminated, truncated, _ = jax.vmap(
                bare.step_env, in_axes=(None, 0, 0, None)
            )(key, state, step_actions, params)
            return (state, total + _checksum((obs, reward, terminated, truncated))), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), actions)
        return total + _checksum(state)

    return jax.jit(rollout)


def bench_env(env_id: str, num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    import gymnax

    lam_env, lam_params = le.make(env_id)
    gym_env, gym_params = gymnax.make(SHARED[env_id])
    key = jax.random.key(42)
    k_reset, k_actions, k_steps = jax.random.split(key, 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    # Same pre-drawn inputs for both sides: a fresh key per env per step, and random actions.
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    space = lam_env.action_space(lam_params)
    actions = jax.vmap(jax.vmap(space.sample))(jax.random.split(k_actions, (num_steps, num_envs)))

    _, lam_state = jax.vmap(lam_env.reset, in_axes=(0, None))(reset_keys, lam_params)
    _, gym_state = jax.vmap(gym_env.reset, in_axes=(0, None))(reset_keys, gym_params)
    _, bare_state = jax.vmap(lam_env.unwrapped.reset, in_axes=(0, None))(reset_keys, lam_params)

    sides = {
        "lamella": (make_rollout(lam_env.step, lam_state, lam_params), lam_state),
        "gymnax": (make_rollout(gym_env.step, gym_state, gym_params), gym_state),
        "bare": (make_bare_rollout(lam_env, lam_params), bare_state),
    }
    compile_s = {}
    for name, (fn, state) in sides.items():
        start = time.perf_counter()
        fn(state, step_keys, actions).block_until_ready()
        compile_s[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, (fn, state) in sides.items():
            start = time.perf_counter()
            fn(state, step_keys, actions).block_until_ready()
            times[name].append(time.perf_counter() - start)
    rate = {name: num_envs * num_steps / statistics.median(t) for name, t in times.items()}
    return {
        "env": env_id,
        "num_envs": num_envs,
        "lamella": rate["lamella"],
        "gymnax": rate["gymnax"],
        "ratio": rate["lamella"] / rate["gymnax"],
        "bare": rate["bare"],
        "of_bare": rate["lamella"] / rate["bare"],
        "gymnax_of_bare": rate["gymnax"] / rate["bare"],
        "compile_lamella": compile_s["lamella"],
        "compile_gymnax": compile_s["gymnax"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--envs", nargs="*", help="lamella ids (default: every registered id gymnax also has)"
    )
    parser.add_argument("--sizes", nargs="*", type=int, default=[1, 1024, 8192])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply the steps per timed call")
    args = parser.parse_args()

    env_ids = args.envs or [i for i in SHARED if i in le.registered()]
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, gymnax {importlib.metadata.version('gymnax')}, "
        f"lamella-envs {le.__version__}"
    )
    header = (
        f"| {'env':<26} | {'envs':>5} | {'lamella steps/s':>15} | {'gymnax steps/s':>14} | {'ratio':>6} "
        f"| {'bare steps/s':>12} | {'of bare':>7} | {'gymnax of bare':>14} | {'compile lamella/gymnax s':>24} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    rows = []
    for env_id in env_ids:
        for size in args.sizes:
            steps = max(10, int(DEFAULT_STEPS.get(size, max(10, 500_000 // size)) * args.steps_scale))
            row = bench_env(env_id, size, steps, args.repeats)
            rows.append(row)
            print(
                f"| {env_id:<26} | {size:>5} | {row['lamella']:>15.3g} | {row['gymnax']:>14.3g} | {row['ratio']:>5.2f}x "
                f"| {row['bare']:>12.3g} | {row['of_bare']:>7.2f} | {row['gymnax_of_bare']:>14.2f} "
                f"| {row['compile_lamella']:>11.2f} / {row['compile_gymnax']:<10.2f} |",
                flush=True,
            )
    ratios = [r["ratio"] for r in rows if r["num_envs"] == 1024]
    if ratios:
        print(
            f"\nmedian lamella/gymnax ratio at 1024 envs: {np.median(ratios):.2f}x (min {min(ratios):.2f}x)"
        )


if __name__ == "__main__":
    main()
