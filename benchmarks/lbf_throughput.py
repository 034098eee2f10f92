"""Level-Based Foraging throughput: lamella against Jumanji's LevelBasedForaging, side by side.

    hatch run bench-marl:python benchmarks/lbf_throughput.py [--num-envs 1024] [--steps 500] [--repeats 7]
        [--rules lbforaging jumanji] [--patterns abc] [--clock cpu] [--bare]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
Jumanji's `AutoResetWrapper`), uniform random actions in 0..5 drawn before the timed calls (the same
array for both; actions illegal under the mask are NONE on both sides), one call =
`jit(scan(vmap(step)))`, timed calls interleaved (lamella, Jumanji, lamella, ...), the ratio the
median over rounds of the two calls' time ratio, compile time separately. Each consumption pattern
of benchmarks/envs_throughput.py is timed (every output a pattern reads, and the final state, go
into a checksum):

    a  obs + reward + flags        lamella: observation, reward, terminated, truncated;
                                   Jumanji: agent views, reward, discount, step type
    b  a + final observation       lamella: a + info["final_observation"]; Jumanji has none (its
                                   auto-reset returns the reset's observation): it reads what a reads
    c  reward only

Neither side's action mask is read (a masked policy would read lamella's `info["action_mask"]`
and Jumanji's `observation.action_mask`). "bare" (`--bare`) is lamella's dynamics alone (no keys,
no resets, every output read): the practical ceiling.

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
import functools
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

# lamella id -> Jumanji RandomGenerator settings of the same task.
CONFIGS = {
    "Foraging-8x8-2p-2f-coop-v3": dict(grid_size=8, fov=8, num_agents=2, num_food=2, force_coop=True),
    "Foraging-2s-8x8-2p-2f-coop-v3": dict(grid_size=8, fov=2, num_agents=2, num_food=2, force_coop=True),
    "Foraging-10x10-3p-3f-v3": dict(grid_size=10, fov=10, num_agents=3, num_food=3, force_coop=False),
    "Foraging-2s-15x15-4p-4f-v3": dict(grid_size=15, fov=2, num_agents=4, num_food=4, force_coop=False),
}
TIME_LIMIT = 50


def jumanji_side(
    settings: dict[str, Any], reset_keys: jax.Array, pattern: str
) -> tuple[Callable[..., jax.Array], Any]:
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
            read = peer_consumed(
                pattern,
                timestep.observation.agents_view,
                timestep.reward,
                (timestep.discount, timestep.step_type),
            )
            return (state, total + checksum(read)), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), actions)
        return total + checksum(state.agents.position) + checksum(state.food_items.eaten)

    return jax.jit(rollout), state


def bench(
    env_id: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    with_jumanji: bool,
    rules: list[str],
    patterns: list[str],
    clock: Callable[[], float],
    bare: bool,
) -> dict[str, Any]:
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    lamella: dict[str, Callable[[str], Any]] = {}
    extra: dict[str, Any] = {}
    for rule in rules:
        env, params = le.make(env_id, rules=rule, max_episode_steps=TIME_LIMIT)
        _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
        suffix = "" if len(rules) == 1 else f" {rule}"
        lamella["lamella" + suffix] = functools.partial(
            lambda p, env, params, state: (lamella_rollout(env, params, p), state),
            env=env,
            params=params,
            state=lam_state,
        )
        if bare:
            extra["bare" + suffix] = (bare_rollout(env, params), lam_state)
    actions = jax.random.randint(k_actions, (num_steps, num_envs, env.num_agents), 0, 6, jnp.int32)
    peers = {"jumanji": lambda p: jumanji_side(CONFIGS[env_id], reset_keys, p)} if with_jumanji else {}
    return time_patterns(
        lamella, peers, patterns, (step_keys, actions), num_envs * num_steps, repeats, clock, extra
    )


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
        help="lamella's rule set(s), each timed against Jumanji in the same rounds",
    )
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
    names = ["lamella"] if len(args.rules) == 1 else [f"lamella {rule}" for rule in args.rules]
    for env_id in args.envs:
        row = bench(
            env_id,
            args.num_envs,
            args.steps,
            args.repeats,
            jumanji_version is not None,
            args.rules,
            patterns,
            clock,
            args.bare,
        )
        label = env_id if len(args.rules) > 1 or args.rules == ["lbforaging"] else f"{env_id} (jumanji)"
        print_rows(label, row, names, "jumanji" if jumanji_version else None, patterns)
        for name in row["rate"]:
            if name.startswith("bare"):
                print(f"| {env_id} {name} (every output) | | {row['rate'][name]:.3g} | | | |", flush=True)


if __name__ == "__main__":
    main()
