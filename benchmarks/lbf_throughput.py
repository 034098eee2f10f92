"""Level-Based Foraging throughput: lamella against Jumanji's LevelBasedForaging, side by side.

    hatch run bench-marl:python benchmarks/lbf_throughput.py [--num-envs 1024] [--steps 500] [--repeats 7]
        [--rules lbforaging jumanji]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
Jumanji's `AutoResetWrapper`), uniform random actions in 0..5 drawn before the timed calls (the same
array for both; actions illegal under the mask are NONE on both sides), one call =
`jit(scan(vmap(step)))`, every output consumed in a checksum (lamella: observation, reward,
terminated, truncated, `info["action_mask"]`, `info["final_observation"]`; Jumanji: agent views,
action mask, step count, reward, discount, step type), timed calls interleaved (lamella, Jumanji,
lamella, ...), medians reported, compile time separately. "bare" is lamella's dynamics alone (no
keys, no resets): the practical ceiling.

The configurations match as far as the two rule sets allow (MARL.md §1.6: Jumanji blocks moves
into agents and has its own spawn rules): grid, sight (Jumanji's fov), agents, food, force_coop,
max level 2, 50 steps per episode. `--rules jumanji` times lamella's `rules="jumanji"` (the same
rules as Jumanji, checked step by step in tests/test_lbf_jumanji.py) against it; `--rules
lbforaging jumanji` times lamella under both rule sets and Jumanji in one interleaved round.
Jumanji needs its own environment (`bench-marl`); without it the script reports lamella alone and
says so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from _interleave import time_interleaved
from _rollouts import bare_rollout, checksum, lamella_rollout

import lamella.envs as le

# lamella id -> Jumanji RandomGenerator settings of the same task.
CONFIGS = {
    "Foraging-8x8-2p-2f-coop-v3": dict(grid_size=8, fov=8, num_agents=2, num_food=2, force_coop=True),
    "Foraging-2s-8x8-2p-2f-coop-v3": dict(grid_size=8, fov=2, num_agents=2, num_food=2, force_coop=True),
    "Foraging-10x10-3p-3f-v3": dict(grid_size=10, fov=10, num_agents=3, num_food=3, force_coop=False),
    "Foraging-2s-15x15-4p-4f-v3": dict(grid_size=15, fov=2, num_agents=4, num_food=4, force_coop=False),
}
TIME_LIMIT = 50


def jumanji_side(settings: dict[str, Any], reset_keys: jax.Array) -> tuple[Callable[..., jax.Array], Any]:
    from jumanji.environments import LevelBasedForaging
    from jumanji.environments.routing.lbf.generator import RandomGenerator
    from jumanji.wrappers import AutoResetWrapper

    env = AutoResetWrapper(
        LevelBasedForaging(RandomGenerator(max_agent_level=2, **settings), time_limit=TIME_LIMIT)
    )
    state, _ = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        del keys  # Jumanji's step takes no key (resets use state.key)

        def body(carry: Any, step_actions: Any) -> Any:
            state, total = carry
            state, timestep = jax.vmap(env.step)(state, step_actions)
            consumed = (timestep.observation, timestep.reward, timestep.discount, timestep.step_type)
            return (state, total + checksum(consumed)), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), actions)
        return total + checksum(state.agents.position) + checksum(state.food_items.eaten)

    return jax.jit(rollout), state


def bench(
    env_id: str, num_envs: int, num_steps: int, repeats: int, with_jumanji: bool, rules: list[str]
) -> dict[str, Any]:
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {}
    for rule in rules:
        env, params = le.make(env_id, rules=rule, max_episode_steps=TIME_LIMIT)
        _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
        suffix = "" if rule == rules[0] else f" {rule}"
        sides["lamella" + suffix] = (lamella_rollout(env, params), lam_state)
        sides["bare" + suffix] = (bare_rollout(env, params), lam_state)
    actions = jax.random.randint(k_actions, (num_steps, num_envs, env.num_agents), 0, 6, jnp.int32)
    if with_jumanji:
        sides["jumanji"] = jumanji_side(CONFIGS[env_id], reset_keys)
    rate, compile_s, times = time_interleaved(sides, (step_keys, actions), num_envs * num_steps, repeats)
    # Paired: the median over rounds of each round's Jumanji time / lamella time (the two calls of a
    # round run back to back, so they share the machine's load).
    paired = {
        name: statistics.median(j / t for j, t in zip(times["jumanji"], times[name]))
        for name in times
        if with_jumanji and name.startswith("lamella")
    }
    return {"env": env_id, "rate": rate, "compile": compile_s, "paired": paired}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=500, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--rules",
        nargs="+",
        default=["lbforaging"],
        choices=["lbforaging", "jumanji"],
        help="lamella's rule set(s); the first is the table's lamella column, the others extra rows",
    )
    args = parser.parse_args()
    try:
        jumanji_version = importlib.metadata.version("jumanji")
    except importlib.metadata.PackageNotFoundError:
        jumanji_version = None
        print("jumanji is not installed in this environment: lamella alone (use `hatch run bench-marl:...`).")
    device = jax.devices()[0]
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {device.platform} ({device.device_kind}), jumanji {jumanji_version}, "
        f"lamella-envs {le.__version__}; {args.num_envs} envs x {args.steps} steps per call, "
        f"median of {args.repeats}"
    )
    print(
        f"| {'env':<30} | {'lamella steps/s':>15} | {'jumanji steps/s':>15} | {'ratio':>6} | {'paired':>6} "
        f"| {'bare steps/s':>12} | {'of bare':>7} | {'compile lamella/jumanji s':>25} |"
    )
    print(f"|{'-' * 32}|{'-' * 17}|{'-' * 17}|{'-' * 8}|{'-' * 8}|{'-' * 14}|{'-' * 9}|{'-' * 27}|")
    for env_id in args.envs:
        row = bench(env_id, args.num_envs, args.steps, args.repeats, jumanji_version is not None, args.rules)
        rate, compile_s = row["rate"], row["compile"]
        jumanji = rate.get("jumanji")
        jumanji_text = f"{jumanji:>15.3g}" if jumanji else f"{'n/a':>15}"
        for i, rule in enumerate(args.rules):
            suffix = "" if i == 0 else f" {rule}"
            lam, bare = rate["lamella" + suffix], rate["bare" + suffix]
            ratio = f"{lam / jumanji:5.2f}x" if jumanji else "   n/a"
            paired = f"{row['paired']['lamella' + suffix]:5.2f}x" if jumanji else "   n/a"
            compile_text = (
                f"{compile_s['lamella' + suffix]:.2f} / {compile_s.get('jumanji', float('nan')):.2f}"
            )
            label = f"{env_id} ({rule})" if len(args.rules) > 1 or rule != "lbforaging" else env_id
            print(
                f"| {label:<30} | {lam:>15.3g} | {jumanji_text} | {ratio} | {paired} | {bare:>12.3g} "
                f"| {lam / bare:>7.2f} | {compile_text:>25} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
