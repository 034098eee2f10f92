"""MPE throughput: lamella against JaxMARL's MPE, side by side in one process.

    hatch run bench-jaxmarl:python benchmarks/mpe_throughput.py [--num-envs 1024] [--steps 500] [--repeats 7]
        [--patterns abc] [--clock cpu] [--bare]      (bench-marl holds the same jaxmarl 0.2.0)

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make`
default; JaxMARL's `step`, which resets inside), uniform random actions drawn before the timed
calls (the same array for both sides), one call = `jit(scan(vmap(step)))`, timed calls
interleaved (lamella, JaxMARL, lamella, ...), the ratio the median over rounds of the two calls'
time ratio, compile time separately. Each consumption pattern of benchmarks/envs_throughput.py is
timed (every output a pattern reads, and the final state, go into a checksum):

    a  obs + reward + flags        lamella: observation, reward, terminated, truncated;
                                   JaxMARL: observations, rewards, dones
    b  a + final observation       lamella: a + info["final_observation"]; JaxMARL has none (its
                                   step returns the reset's observation): it reads what a reads
    c  reward only

"bare" (`--bare`) is lamella's dynamics alone (no keys, no resets, every output read): the
practical ceiling.

Both sides run the same scenario with discrete actions: mpe2's physics and rewards (JaxMARL's
MPE matches mpe2 step by step, MARL.md §3.6), except the episode length (JaxMARL: 26 steps,
lamella and mpe2: 25). JaxMARL needs its own environment (`bench-jaxmarl`, jaxmarl 0.2.0 on
lamella's jax); without it the script reports lamella alone and says so.
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

# lamella id -> JaxMARL id of the same scenario.
CONFIGS = {
    "MPE-simple_spread-v3": "MPE_simple_spread_v3",
    "MPE-simple_tag-v3": "MPE_simple_tag_v3",
    "MPE-simple_speaker_listener-v4": "MPE_simple_speaker_listener_v4",
}


def jaxmarl_side(env_id: str, reset_keys: jax.Array, pattern: str) -> tuple[Callable[..., jax.Array], Any]:
    import jaxmarl

    env = jaxmarl.make(env_id)
    _, state = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            joint = {agent: step_actions[:, i] for i, agent in enumerate(env.agents)}
            obs, state, reward, dones, _ = jax.vmap(env.step)(step_keys, state, joint)
            return (state, total + checksum(peer_consumed(pattern, obs, reward, dones))), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + checksum(state)

    return jax.jit(rollout), state


def bench(
    env_id: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    with_jaxmarl: bool,
    patterns: list[str],
    clock: Callable[[], float],
    bare: bool,
) -> dict[str, Any]:
    env, params = le.make(env_id)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    # Each agent's own action count (the speaker has 3): legal actions on both sides.
    counts = jnp.asarray(env.unwrapped.num_actions_per_agent)
    u = jax.random.uniform(k_actions, (num_steps, num_envs, env.num_agents))
    actions = jnp.floor(u * counts).astype(jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    lamella = {"lamella": lambda p: (lamella_rollout(env, params, p), lam_state)}
    peers = {"jaxmarl": lambda p: jaxmarl_side(CONFIGS[env_id], reset_keys, p)} if with_jaxmarl else {}
    extra = {"bare": (bare_rollout(env, params), lam_state)} if bare else {}
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
    parser.add_argument("--bare", action="store_true", help="also time lamella's bare dynamics")
    add_arguments(parser)
    args, patterns, clock = parse(parser)
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
    print_header("jaxmarl", patterns)
    for env_id in args.envs:
        row = bench(
            env_id,
            args.num_envs,
            args.steps,
            args.repeats,
            jaxmarl_version is not None,
            patterns,
            clock,
            args.bare,
        )
        print_rows(env_id, row, ["lamella"], "jaxmarl" if jaxmarl_version else None, patterns)
        if args.bare:
            print(f"| {env_id} bare (every output) | | {row['rate']['bare']:.3g} | | | |", flush=True)


if __name__ == "__main__":
    main()
