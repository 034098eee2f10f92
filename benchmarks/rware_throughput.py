"""Multi-Robot Warehouse throughput: lamella against Jumanji's RobotWarehouse, side by side.

    hatch run bench-marl:python benchmarks/rware_throughput.py [--num-envs 1024] [--steps 200] [--repeats 7]
        [--patterns abc] [--clock cpu] [--bare]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
Jumanji's `AutoResetWrapper`), uniform random actions in 0..4 drawn before the timed calls (the same
array for both; Jumanji turns its masked actions into NOOP, lamella's cancels the same moves), one
call = `jit(scan(vmap(step)))`, timed calls interleaved (lamella, Jumanji, lamella, ...), the ratio
(lamella / Jumanji) the median over rounds of the two calls' time ratio, compile time separately.
Each consumption pattern of benchmarks/envs_throughput.py is timed (every output a pattern reads,
and the final state, go into a checksum):

    a  obs + reward + flags        lamella: observation, reward, terminated, truncated;
                                   Jumanji: agent views, reward, discount, step type
    b  a + final observation       lamella: a + info["final_observation"]; Jumanji has none: as a
    c  reward only

"bare" (`--bare`) is lamella's dynamics alone (no keys, no resets, the request draws fixed, every
output read): the practical ceiling.

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
from _patterns import add_arguments, parse, print_header, print_rows, time_patterns
from _rollouts import bare_rollout, checksum, lamella_rollout, peer_consumed

import lamella.envs as le

TASKS = ["rware-tiny-2ag-v2", "rware-tiny-4ag-v2", "rware-small-4ag-v2", "rware-medium-6ag-v2"]


def rware_bare_rollout(env: Any, params: Any) -> Callable[..., jax.Array]:
    """lamella's step alone with fixed draws (RWARE's step takes its random draws as an argument)."""
    draws = jnp.full((2,), 0.5, jnp.float32)
    return bare_rollout(
        env, params, lambda state, action: env.unwrapped.step_with_draws(state, action, params, draws)
    )


def jumanji_side(env_id: str, reset_keys: jax.Array, pattern: str) -> tuple[Callable[..., jax.Array], Any]:
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
            read = peer_consumed(
                pattern,
                timestep.observation.agents_view,
                timestep.reward,
                (timestep.discount, timestep.step_type),
            )
            return (state, total + checksum(read)), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), actions)
        return total + checksum((state.grid, state.request_queue))

    return jax.jit(rollout), state


def bench(
    env_id: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    with_jumanji: bool,
    patterns: list[str],
    clock: Callable[[], float],
    bare: bool,
) -> dict[str, Any]:
    env, params = le.make(env_id)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    actions = jax.random.randint(k_actions, (num_steps, num_envs, env.num_agents), 0, 5, jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    lamella = {"lamella": lambda p: (lamella_rollout(env, params, p), lam_state)}
    peers = {"jumanji": lambda p: jumanji_side(env_id, reset_keys, p)} if with_jumanji else {}
    extra = {"bare": (rware_bare_rollout(env, params), lam_state)} if bare else {}
    return time_patterns(
        lamella, peers, patterns, (step_keys, actions), num_envs * num_steps, repeats, clock, extra
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="*", default=TASKS)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bare", action="store_true", help="also time lamella's bare dynamics")
    add_arguments(parser)
    args, patterns, clock = parse(parser)
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
        f"median of {args.repeats}, clock {args.clock}"
    )
    print_header("jumanji", patterns)
    for env_id in args.envs:
        row = bench(
            env_id,
            args.num_envs,
            args.steps,
            args.repeats,
            jumanji_version is not None,
            patterns,
            clock,
            args.bare,
        )
        print_rows(env_id, row, ["lamella"], "jumanji" if jumanji_version else None, patterns)
        if args.bare:
            print(f"| {env_id} bare (every output) | | {row['rate']['bare']:.3g} | | | |", flush=True)


if __name__ == "__main__":
    main()
