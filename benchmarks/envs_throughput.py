"""Environment throughput: lamella against gymnax, side by side in one process.

    hatch run bench:envs          # or: python benchmarks/envs_throughput.py [--envs ID ...] [--sizes 1 1024 8192]
    taskset -c 0 hatch run bench:python benchmarks/envs_throughput.py --clock cpu   # on a loaded machine

Protocol (../shared/BENCHMARKS.md): same env ids on both sides, auto-reset on, a fresh key per
env per step, actions and keys drawn before the timed call (the same arrays for both
libraries), timed calls interleaved (lamella, gymnax, lamella, ...), medians of the per-pair
ratios reported. Each env is measured under three consumption patterns, because XLA deletes and
re-fuses work by what the loop reads:

    a  obs + reward + terminated + truncated   (a plain training loop; ``info`` unused)
    b  a + info["final_observation"]           (a loop that bootstraps from truncated episodes)
    c  reward only

Every output a pattern reads, and the final state, goes into a checksum (a sum in float32), so
nothing it claims to consume can be deleted. "floor" is that checksum alone on an observation of
the same shape and dtype built from a cheap per-env value, once (a) or twice (b): the cost of
consuming the observation, which both libraries pay; "of floor" is a library's steps/s as a
fraction of it (median over interleaved pairs). The floor is built two ways, in the
observation's shape and flat then reshaped (XLA's CPU loop runs its innermost loop over the last
axis, a few channels in an image: the flat build was 3x faster for MinAtar's (10, 10, C) and
slower for Pong's (30, 40, 3)), and each round takes the faster. "bare" (with --bare) is
lamella's physics alone (one constant key, no resets) under pattern b. Compile time is reported
separately.
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
from _interleave import time_interleaved

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


PATTERNS = {
    "a": "obs + reward + flags",
    "b": "a + final observation",
    "c": "reward only",
}


def _checksum(tree: Any) -> jax.Array:
    return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree.leaves(tree))


def _consumed(pattern: str, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> Any:
    if pattern == "a":
        return (obs, reward, terminated, truncated)
    if pattern == "b":
        return (obs, reward, terminated, truncated, info["final_observation"])
    if pattern == "c":
        return (reward,)
    raise ValueError(f"unknown pattern {pattern!r}; use one of {sorted(PATTERNS)}")


def make_rollout(step: Callable[..., Any], params: Any, pattern: str) -> Callable[..., jax.Array]:
    """A jitted scan of ``vmap(step)`` over pre-drawn keys and actions, returning a checksum of
    what ``pattern`` reads (and of the final state)."""

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            obs, state, reward, terminated, truncated, info = jax.vmap(step, in_axes=(0, 0, 0, None))(
                step_keys, state, step_actions, params
            )
            total = total + _checksum(_consumed(pattern, obs, reward, terminated, truncated, info))
            return (state, total), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + _checksum(state)

    return jax.jit(rollout)


def make_floor(obs_example: Any, copies: int, flat: bool = False) -> Callable[..., jax.Array]:
    """The checksum of ``copies`` observations per step, each built from one int per env and a
    constant (one add, one compare per element): what consuming the observation costs. ``flat``:
    each env's cells built as one run and reshaped to the observation's shape."""
    leaves = jax.tree.leaves(obs_example)
    cells = [
        np.arange(np.prod(leaf.shape[1:]), dtype=np.int32).reshape((-1,) if flat else leaf.shape[1:])
        for leaf in leaves
    ]

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        del state, keys

        def body(carry: Any, step_actions: Any) -> Any:
            seed, total = carry
            seed = seed * 3 + step_actions.astype(jnp.int32)
            for copy in range(copies):
                for leaf, cell in zip(leaves, cells):
                    value = (((seed.reshape((-1,) + (1,) * cell.ndim) + copy + cell) & 1) != 0).reshape(
                        leaf.shape
                    )
                    total = total + jnp.sum(value.astype(leaf.dtype).astype(jnp.float32))
            return (seed, total), None

        seed0 = jnp.zeros(actions.shape[1], jnp.int32)
        first_actions = actions.reshape((*actions.shape[:2], -1))[..., 0]
        (_, total), _ = jax.lax.scan(body, (seed0, jnp.zeros((), jnp.float32)), first_actions)
        return total

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


def bench_env(
    env_id: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    patterns: str,
    bare: bool,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
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

    lam_obs, lam_state = jax.vmap(lam_env.reset, in_axes=(0, None))(reset_keys, lam_params)
    _, gym_state = jax.vmap(gym_env.reset, in_axes=(0, None))(reset_keys, gym_params)

    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {}
    for p in patterns:
        sides[f"lamella {p}"] = (make_rollout(lam_env.step, lam_params, p), lam_state)
        sides[f"gymnax {p}"] = (make_rollout(gym_env.step, gym_params, p), gym_state)
        if p in "ab":
            sides[f"floor {p}"] = (make_floor(lam_obs, 1 if p == "a" else 2), lam_state)
            sides[f"flat floor {p}"] = (make_floor(lam_obs, 1 if p == "a" else 2, flat=True), lam_state)
    if bare:
        _, bare_state = jax.vmap(lam_env.unwrapped.reset, in_axes=(0, None))(reset_keys, lam_params)
        sides["bare"] = (make_bare_rollout(lam_env, lam_params), bare_state)
    rate, compile_s, times = time_interleaved(
        sides, (step_keys, actions), num_envs * num_steps, repeats, clock
    )
    row: dict[str, Any] = {"env": env_id, "num_envs": num_envs, "rate": rate}
    for p in patterns:
        # The ratio of each interleaved pair, then the median: robust to drift on a shared machine.
        pairs = [gym / lam for lam, gym in zip(times[f"lamella {p}"], times[f"gymnax {p}"])]
        row[f"ratio {p}"] = statistics.median(pairs)
        row[f"compile {p}"] = (compile_s[f"lamella {p}"], compile_s[f"gymnax {p}"])
        if f"floor {p}" in times:
            # Each round's floor: the faster of its two builds.
            floors = [min(a, b) for a, b in zip(times[f"floor {p}"], times.pop(f"flat floor {p}"))]
            times[f"floor {p}"] = floors
            rate[f"floor {p}"] = num_envs * num_steps / statistics.median(floors)
            for side in ("lamella", "gymnax"):
                fractions = [f / x for f, x in zip(floors, times[f"{side} {p}"])]
                row[f"{side} of floor {p}"] = statistics.median(fractions)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--envs", nargs="*", help="lamella ids (default: every registered id gymnax also has)"
    )
    parser.add_argument("--sizes", nargs="*", type=int, default=[1024])
    parser.add_argument("--patterns", default="abc", help="which consumption patterns (default: abc)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply the steps per timed call")
    parser.add_argument("--bare", action="store_true", help="also time lamella's bare physics")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time calls by wall clock (default) or by the process's CPU time (all threads; steadier "
        "on a loaded machine, and it charges a side for the extra threads XLA runs it on)",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.patterns) - set(PATTERNS))
    if unknown:
        parser.error(f"unknown pattern(s) {unknown}; use letters of {''.join(PATTERNS)}")

    env_ids = args.envs or [i for i in SHARED if i in le.registered()]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, gymnax {importlib.metadata.version('gymnax')}, "
        f"lamella-envs {le.__version__}, clock {args.clock}, CPUs usable {len(os.sched_getaffinity(0))}"
    )
    for p in args.patterns:
        print(f"pattern {p}: {PATTERNS[p]}")
    columns = ["env", "envs", "steps"]
    for p in args.patterns:
        columns += [f"{p} lamella/s", f"{p} gymnax/s", f"{p} ratio"]
        if p in "ab":
            columns += [f"{p} floor/s", f"{p} lam of floor", f"{p} gym of floor"]
    if args.bare:
        columns += ["bare/s"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    rows = []
    for env_id in env_ids:
        for size in args.sizes:
            steps = max(10, int(DEFAULT_STEPS.get(size, max(10, 500_000 // size)) * args.steps_scale))
            row = bench_env(env_id, size, steps, args.repeats, args.patterns, args.bare, clock)
            rows.append(row)
            rate = row["rate"]
            cells = [env_id, str(size), str(steps)]
            for p in args.patterns:
                cells += [
                    f"{rate[f'lamella {p}']:.3g}",
                    f"{rate[f'gymnax {p}']:.3g}",
                    f"**{row[f'ratio {p}']:.2f}x**",
                ]
                if p in "ab":
                    floor = rate[f"floor {p}"]
                    cells += [
                        f"{floor:.3g}",
                        f"{row[f'lamella of floor {p}']:.2f}",
                        f"{row[f'gymnax of floor {p}']:.2f}",
                    ]
            if args.bare:
                cells += [f"{rate['bare']:.3g}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    for size in args.sizes:
        for p in args.patterns:
            ratios = [r[f"ratio {p}"] for r in rows if r["num_envs"] == size]
            if ratios:
                print(
                    f"pattern {p} at {size} envs: median lamella/gymnax {np.median(ratios):.2f}x "
                    f"(min {min(ratios):.2f}x, {rows[int(np.argmin(ratios))]['env']})"
                )


if __name__ == "__main__":
    main()
