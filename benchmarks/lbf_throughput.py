"""Level-Based Foraging throughput: lamella against Jumanji's LevelBasedForaging, side by side.

    hatch run bench-marl:python benchmarks/lbf_throughput.py [--num-envs 1024] [--steps 500] [--repeats 7]

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
max level 2, 50 steps per episode. Jumanji needs its own environment (`bench-marl`); without it
the script reports lamella alone and says so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
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


def bench(env_id: str, num_envs: int, num_steps: int, repeats: int, with_jumanji: bool) -> dict[str, Any]:
    env, params = le.make(env_id)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    actions = jax.random.randint(k_actions, (num_steps, num_envs, env.num_agents), 0, 6, jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {
        "lamella": (lamella_rollout(env, params), lam_state),
        "bare": (bare_rollout(env, params), lam_state),
    }
    if with_jumanji:
        sides["jumanji"] = jumanji_side(CONFIGS[env_id], reset_keys)
    rate, compile_s, _ = time_interleaved(sides, (step_keys, actions), num_envs * num_steps, repeats)
    return {"env": env_id, "rate": rate, "compile": compile_s}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=500, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=7)
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
        f"| {'env':<30} | {'lamella steps/s':>15} | {'jumanji steps/s':>15} | {'ratio':>6} | {'bare steps/s':>12} "
        f"| {'of bare':>7} | {'compile lamella/jumanji s':>25} |"
    )
    print(f"|{'-' * 32}|{'-' * 17}|{'-' * 17}|{'-' * 8}|{'-' * 14}|{'-' * 9}|{'-' * 27}|")
    for env_id in args.envs:
        row = bench(env_id, args.num_envs, args.steps, args.repeats, jumanji_version is not None)
        rate, compile_s = row["rate"], row["compile"]
        jumanji = rate.get("jumanji")
        ratio = f"{rate['lamella'] / jumanji:5.2f}x" if jumanji else "   n/a"
        jumanji_text = f"{jumanji:>15.3g}" if jumanji else f"{'n/a':>15}"
        compile_text = f"{compile_s['lamella']:.2f} / {compile_s.get('jumanji', float('nan')):.2f}"
        print(
            f"| {env_id:<30} | {rate['lamella']:>15.3g} | {jumanji_text} | {ratio} | {rate['bare']:>12.3g} "
            f"| {rate['lamella'] / rate['bare']:>7.2f} | {compile_text:>25} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
