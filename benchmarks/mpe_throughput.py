"""MPE throughput: lamella against JaxMARL's MPE, side by side in one process.

    hatch run bench-jaxmarl:python benchmarks/mpe_throughput.py [--num-envs 1024] [--steps 500] [--repeats 7]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make`
default; JaxMARL's `step`, which resets inside), uniform random actions drawn before the timed
calls (the same array for both sides), one call = `jit(scan(vmap(step)))`, every output consumed
in a checksum (lamella: observation, reward, terminated, truncated, `info["final_observation"]`
and the final state; JaxMARL: observations, rewards, dones, the final state), timed calls
interleaved (lamella, JaxMARL, lamella, ...), medians reported, compile time separately. "bare"
is lamella's dynamics alone (no keys, no resets): the practical ceiling.

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
from _interleave import time_interleaved
from _rollouts import bare_rollout, checksum, lamella_rollout

import lamella.envs as le

# lamella id -> JaxMARL id of the same scenario.
CONFIGS = {
    "MPE-simple_spread-v3": "MPE_simple_spread_v3",
    "MPE-simple_tag-v3": "MPE_simple_tag_v3",
    "MPE-simple_speaker_listener-v4": "MPE_simple_speaker_listener_v4",
}


def jaxmarl_side(env_id: str, reset_keys: jax.Array) -> tuple[Callable[..., jax.Array], Any]:
    import jaxmarl

    env = jaxmarl.make(env_id)
    _, state = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            joint = {agent: step_actions[:, i] for i, agent in enumerate(env.agents)}
            obs, state, reward, dones, _ = jax.vmap(env.step)(step_keys, state, joint)
            return (state, total + checksum((obs, reward, dones))), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + checksum(state)

    return jax.jit(rollout), state


def bench(env_id: str, num_envs: int, num_steps: int, repeats: int, with_jaxmarl: bool) -> dict[str, Any]:
    env, params = le.make(env_id)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    # Each agent's own action count (the speaker has 3): legal actions on both sides.
    counts = jnp.asarray(env.unwrapped.num_actions_per_agent)
    u = jax.random.uniform(k_actions, (num_steps, num_envs, env.num_agents))
    actions = jnp.floor(u * counts).astype(jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    sides: dict[str, tuple[Callable[..., jax.Array], Any]] = {
        "lamella": (lamella_rollout(env, params), lam_state),
        "bare": (bare_rollout(env, params), lam_state),
    }
    if with_jaxmarl:
        sides["jaxmarl"] = jaxmarl_side(CONFIGS[env_id], reset_keys)
    rate, compile_s, times = time_interleaved(sides, (step_keys, actions), num_envs * num_steps, repeats)
    paired = None
    if with_jaxmarl:
        ratios = sorted(j / lam for lam, j in zip(times["lamella"], times["jaxmarl"]))
        paired = (ratios[0], ratios[len(ratios) // 2], ratios[-1])
    return {"env": env_id, "rate": rate, "compile": compile_s, "paired": paired}


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
        f"median of {args.repeats}"
    )
    print(
        f"| {'env':<30} | {'lamella steps/s':>15} | {'jaxmarl steps/s':>15} | {'ratio':>6} "
        f"| {'paired min/med/max':>18} | {'bare steps/s':>12} | {'of bare':>7} | {'compile lamella/jaxmarl s':>25} |"
    )
    print(f"|{'-' * 32}|{'-' * 17}|{'-' * 17}|{'-' * 8}|{'-' * 20}|{'-' * 14}|{'-' * 9}|{'-' * 27}|")
    for env_id in args.envs:
        row = bench(env_id, args.num_envs, args.steps, args.repeats, jaxmarl_version is not None)
        rate, compile_s, paired = row["rate"], row["compile"], row["paired"]
        jaxmarl = rate.get("jaxmarl")
        ratio = f"{rate['lamella'] / jaxmarl:5.2f}x" if jaxmarl else "   n/a"
        paired_text = f"{paired[0]:.2f}/{paired[1]:.2f}/{paired[2]:.2f}" if paired else "n/a"
        jaxmarl_text = f"{jaxmarl:>15.3g}" if jaxmarl else f"{'n/a':>15}"
        compile_text = f"{compile_s['lamella']:.2f} / {compile_s.get('jaxmarl', float('nan')):.2f}"
        print(
            f"| {env_id:<30} | {rate['lamella']:>15.3g} | {jaxmarl_text} | {ratio} | {paired_text:>18} "
            f"| {rate['bare']:>12.3g} | {rate['lamella'] / rate['bare']:>7.2f} | {compile_text:>25} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
