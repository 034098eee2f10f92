"""SMAX throughput: lamella against JaxMARL's HeuristicEnemySMAX, side by side in one process.

    hatch run bench-jaxmarl:python benchmarks/smax_throughput.py [--scenarios 2s3z 3s5z] [--patterns abcd]
        [--num-envs 1024] [--steps 50] [--repeats 7] [--clock cpu]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
JaxMARL's `step`, which resets inside), the same episode length on both sides (JaxMARL's
`max_steps=100` runs 101 steps, so lamella runs with `max_episode_steps=101`), one call =
`jit(scan(vmap(step)))`, timed calls interleaved (lamella, JaxMARL, lamella, ...), medians of
the per-pair ratios reported, compile time separately.

Actions are random and legal: one uniform per agent per step is drawn before the timed calls
(the same array for both sides), and each side turns it into a legal action with its own mask
of the state it acts in (the `ceil(u * count)`-th legal action): lamella's
`info["action_mask"]` of the previous step, JaxMARL's `get_avail_actions(state)`, which is what
a masked policy reads on each side.

Consumption patterns (what the loop reads; every output read and the final state go into a
checksum, so XLA cannot drop the work):

    a  obs + reward + flags                      (JaxMARL: the allies' obs, rewards, dones)
    b  a + info["final_observation"]             (JaxMARL has none: it reads what a reads)
    c  reward only
    d  a + the global state                      (lamella: env.global_state of the returned
                                                  state; JaxMARL: obs["world_state"])

"bare" is lamella's dynamics alone (the bare env's step, one constant key, no resets) under
pattern a: the practical ceiling. JaxMARL needs its own environment (`bench-jaxmarl`, jaxmarl
0.2.0 on lamella's jax); without it the script reports lamella alone and says so.
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
from _interleave import time_interleaved
from _rollouts import checksum

import lamella.envs as le

PATTERNS = {
    "a": "obs + reward + flags",
    "b": "a + final observation",
    "c": "reward only",
    "d": "a + global state",
}


def legal_action(mask: jax.Array, u: jax.Array) -> jax.Array:
    """Per agent, the ``ceil(u * count)``-th legal action of ``mask`` (``(n, K)``), for ``u`` in [0, 1)."""
    count = jnp.sum(mask, -1).astype(jnp.float32)
    cumulative = jnp.cumsum(mask, -1).astype(jnp.float32)
    return jnp.argmax(mask & (cumulative > (u * count)[:, None]), -1).astype(jnp.int32)


def lamella_side(env: Any, params: Any, pattern: str, bare: bool = False) -> Callable[..., jax.Array]:
    inner = env.unwrapped
    key = jax.random.key(0)

    def one(step_key: jax.Array, state: Any, mask: jax.Array, u: jax.Array) -> Any:
        action = legal_action(mask, u)
        if bare:
            obs, state, reward, terminated, truncated, info = inner.step_env(key, state, action, params)
        else:
            obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        read: tuple[Any, ...] = (reward,)
        if pattern in "abd":
            read += (obs, terminated, truncated)
        if pattern == "b":
            read += (info["final_observation"],)
        if pattern == "d":
            read += (inner.global_state(env.unwrapped_state(state), params),)
        return state, info["action_mask"], checksum(read)

    step = jax.vmap(one)

    def rollout(start: Any, keys: jax.Array, uniforms: jax.Array) -> jax.Array:
        state, mask = start

        def body(carry: Any, inputs: Any) -> Any:
            state, mask, total = carry
            state, mask, value = step(inputs[0], state, mask, inputs[1])
            return (state, mask, total + jnp.sum(value)), None

        (state, mask, total), _ = jax.lax.scan(
            body, (state, mask, jnp.zeros((), jnp.float32)), (keys, uniforms)
        )
        return total + checksum((state, mask))

    return jax.jit(rollout)


def jaxmarl_side(scenario: str, pattern: str) -> tuple[Callable[..., jax.Array], Any]:
    import jaxmarl
    from jaxmarl.environments.smax import map_name_to_scenario

    env = jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(scenario))

    def one(step_key: jax.Array, state: Any, u: jax.Array) -> Any:
        avail = env.get_avail_actions(state)
        mask = jnp.stack([avail[name] for name in env.agents]).astype(bool)
        action = legal_action(mask, u)
        obs, state, reward, dones, _ = env.step(
            step_key, state, {name: action[i] for i, name in enumerate(env.agents)}
        )
        read: tuple[Any, ...] = (reward,)
        if pattern in "abd":
            read += ([obs[name] for name in env.agents], dones)
        if pattern == "d":
            read += (obs["world_state"],)
        return state, checksum(read)

    step = jax.vmap(one)

    def rollout(state: Any, keys: jax.Array, uniforms: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            state, value = step(inputs[0], state, inputs[1])
            return (state, total + jnp.sum(value)), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, uniforms))
        return total + checksum(state)

    return jax.jit(rollout), env


def bench(
    scenario: str,
    patterns: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    with_jaxmarl: bool,
    bare: bool,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    env, params = le.make(f"SMAX-{scenario}-v0", max_episode_steps=101)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    uniforms = jax.random.uniform(k_actions, (num_steps, num_envs, env.num_agents))
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    lam_start = (lam_state, jax.vmap(env.unwrapped.action_mask, in_axes=(0, None))(lam_state, params))
    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {}
    for p in patterns:
        sides[f"lamella {p}"] = (lamella_side(env, params, p), lam_start)
        if with_jaxmarl:
            rollout, jm_env = jaxmarl_side(scenario, p)
            _, jm_state = jax.vmap(jm_env.reset)(reset_keys)
            sides[f"jaxmarl {p}"] = (rollout, jm_state)
    if bare:
        sides["bare"] = (lamella_side(env, params, "a", bare=True), lam_start)
    rate, compile_s, times = time_interleaved(
        sides, (step_keys, uniforms), num_envs * num_steps, repeats, clock
    )
    row: dict[str, Any] = {"rate": rate, "compile": compile_s}
    for p in patterns:
        if with_jaxmarl:
            pairs = [j / lam for lam, j in zip(times[f"lamella {p}"], times[f"jaxmarl {p}"])]
            row[f"ratio {p}"] = statistics.median(pairs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="*", default=["2s3z"])
    parser.add_argument("--patterns", default="abcd", help="which consumption patterns (default: abcd)")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bare", action="store_true", help="also time lamella's bare dynamics")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time calls by wall clock (default) or by the process's CPU time (all threads)",
    )
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    unknown = sorted(set(args.patterns) - set(PATTERNS))
    if unknown:
        parser.error(f"unknown pattern(s) {unknown}; use letters of {''.join(PATTERNS)}")
    try:
        jaxmarl_version = importlib.metadata.version("jaxmarl")
    except importlib.metadata.PackageNotFoundError:
        jaxmarl_version = None
        print(
            "jaxmarl is not installed in this environment: lamella alone (use `hatch run bench-jaxmarl:...`)."
        )
    device = jax.devices()[0]
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {device.platform} ({device.device_kind}), jaxmarl {jaxmarl_version}, "
        f"lamella-envs {le.__version__}; {args.num_envs} envs x {args.steps} steps per call, "
        f"median of {args.repeats}, clock {args.clock}"
    )
    for p in args.patterns:
        print(f"pattern {p}: {PATTERNS[p]}")
    columns = [
        "scenario",
        "pattern",
        "lamella steps/s",
        "jaxmarl steps/s",
        "ratio (median of pairs)",
        "compile lamella/jaxmarl s",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    for scenario in args.scenarios:
        row = bench(
            scenario,
            args.patterns,
            args.num_envs,
            args.steps,
            args.repeats,
            jaxmarl_version is not None,
            args.bare,
            clock,
        )
        rate, compile_s = row["rate"], row["compile"]
        for p in args.patterns:
            jm = rate.get(f"jaxmarl {p}")
            cells = [
                scenario,
                p,
                f"{rate[f'lamella {p}']:.3g}",
                f"{jm:.3g}" if jm else "n/a",
                f"**{row[f'ratio {p}']:.2f}x**" if jm else "n/a",
                f"{compile_s[f'lamella {p}']:.1f} / {compile_s.get(f'jaxmarl {p}', float('nan')):.1f}",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)
        if args.bare:
            print(
                f"| {scenario} | bare (a) | {rate['bare']:.3g} | | of bare: {rate['lamella a'] / rate['bare']:.2f} | "
                f"{compile_s['bare']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
