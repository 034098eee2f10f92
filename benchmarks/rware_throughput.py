"""Multi-Robot Warehouse throughput: lamella against Jumanji's RobotWarehouse, side by side.

    hatch run bench-marl:python benchmarks/rware_throughput.py [--num-envs 1024] [--steps 200] [--repeats 7]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
Jumanji's `AutoResetWrapper`), uniform random actions in 0..4 drawn before the timed calls (the same
array for both; Jumanji turns its masked actions into NOOP, lamella's cancels the same moves), one
call = `jit(scan(vmap(step)))`, every output consumed in a checksum (lamella: observation, reward,
terminated, truncated, `info["final_observation"]`; Jumanji: agent views, action mask, step count,
reward, discount, step type), timed calls interleaved (lamella, Jumanji, lamella, ...), medians
reported, compile time separately. "bare" is lamella's dynamics alone (no keys, no resets, the
request draws fixed): the practical ceiling. The ratio column is lamella / Jumanji.

The tasks match: layout (shelf rows, columns, column height), agents, sensor range, request queue
and the 500-step limit. The rules differ where the two envs differ (MARL.md §2.5): Jumanji moves
agents one by one and ends the episode at the first collision, rware (and lamella) resolves
conflicts, so lamella's episodes last the full 500 steps while Jumanji's random-policy episodes
end early (more resets for Jumanji; a reset costs about as much as a step on both sides).
Jumanji needs its own environment (`bench-marl`); without it the script reports lamella alone.
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

TASKS = ["rware-tiny-2ag-v2", "rware-tiny-4ag-v2", "rware-small-4ag-v2", "rware-medium-6ag-v2"]


def rware_bare_rollout(env: Any, params: Any) -> Callable[..., jax.Array]:
    """lamella's step alone with fixed draws (RWARE's step takes its random draws as an argument)."""
    draws = jnp.full((2,), 0.5, jnp.float32)
    return bare_rollout(
        env, params, lambda state, action: env.unwrapped.step_with_draws(state, action, params, draws)
    )


def jumanji_side(env_id: str, reset_keys: jax.Array) -> tuple[Callable[..., jax.Array], Any]:
    from jumanji.environments import RobotWarehouse
    from jumanji.environments.routing.robot_warehouse.generator import RandomGenerator
    from jumanji.wrappers import AutoResetWrapper

    lamella_env = le.make(env_id, autoreset=False)[0]
    generator = RandomGenerator(
        shelf_rows=lamella_env.shelf_rows,
        shelf_columns=lamella_env.shelf_columns,
        column_height=lamella_env.column_height,
        num_agents=lamella_env.num_agents,
        sensor_range=lamella_env.sensor_range,
        request_queue_size=lamella_env.request_queue_size,
    )
    env = AutoResetWrapper(RobotWarehouse(generator, time_limit=500))
    state, _ = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        del keys  # Jumanji's step takes no key (its state carries one)

        def body(carry: Any, step_actions: Any) -> Any:
            state, total = carry
            state, timestep = jax.vmap(env.step)(state, step_actions)
            consumed = (timestep.observation, timestep.reward, timestep.discount, timestep.step_type)
            return (state, total + checksum(consumed)), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), actions)
        return total + checksum((state.grid, state.request_queue))

    return jax.jit(rollout), state


def bench(env_id: str, num_envs: int, num_steps: int, repeats: int, with_jumanji: bool) -> dict[str, Any]:
    env, params = le.make(env_id)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    actions = jax.random.randint(k_actions, (num_steps, num_envs, env.num_agents), 0, 5, jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {
        "lamella": (lamella_rollout(env, params), lam_state),
        "bare": (rware_bare_rollout(env, params), lam_state),
    }
    if with_jumanji:
        sides["jumanji"] = jumanji_side(env_id, reset_keys)
    rate, compile_s, times = time_interleaved(sides, (step_keys, actions), num_envs * num_steps, repeats)
    paired = None
    if with_jumanji:
        ratios = sorted(j / lam for lam, j in zip(times["lamella"], times["jumanji"]))
        paired = ratios[len(ratios) // 2]
    return {"env": env_id, "rate": rate, "compile": compile_s, "paired": paired}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="*", default=TASKS)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200, help="env steps per timed call (per env)")
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
        f"| {'env':<22} | {'lamella steps/s':>15} | {'jumanji steps/s':>15} | {'ratio':>6} | {'paired':>6} "
        f"| {'bare steps/s':>12} | {'of bare':>7} | {'compile lamella/jumanji s':>25} |"
    )
    print(f"|{'-' * 24}|{'-' * 17}|{'-' * 17}|{'-' * 8}|{'-' * 8}|{'-' * 14}|{'-' * 9}|{'-' * 27}|")
    for env_id in args.envs:
        row = bench(env_id, args.num_envs, args.steps, args.repeats, jumanji_version is not None)
        rate, compile_s = row["rate"], row["compile"]
        jumanji = rate.get("jumanji")
        ratio = f"{rate['lamella'] / jumanji:5.1f}x" if jumanji else "   n/a"
        paired = f"{row['paired']:5.1f}x" if row["paired"] else "   n/a"
        jumanji_text = f"{jumanji:>15.3g}" if jumanji else f"{'n/a':>15}"
        compile_text = f"{compile_s['lamella']:.2f} / {compile_s.get('jumanji', float('nan')):.2f}"
        print(
            f"| {env_id:<22} | {rate['lamella']:>15.3g} | {jumanji_text} | {ratio} | {paired} "
            f"| {rate['bare']:>12.3g} | {rate['lamella'] / rate['bare']:>7.2f} | {compile_text:>25} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
