"""CoinGame and STORM throughput: lamella's CoinGame-v0 and IPDInTheMatrix-v0 against JaxMARL's
coin_game and storm_2p (its port of Pax's InTheMatrix), side by side.

    hatch run bench-marl:python benchmarks/coin_game_throughput.py [--num-envs 1024] [--steps 1000] [--repeats 7]
        [--patterns abc] [--clock cpu] [--bare]

Protocol (../shared/BENCHMARKS.md): 1024 envs, auto-reset on both sides (lamella's `make` default;
JaxMARL's `step`), uniform random actions in 0..4 and one key per env and step drawn before the
timed calls (the same arrays for both), one call = `jit(scan(vmap(step)))`, timed calls
interleaved (lamella, JaxMARL, lamella, ...), the ratio the median over rounds of the two calls'
time ratio, compile time separately. Each consumption pattern of benchmarks/envs_throughput.py is
timed (every output a pattern reads, and the final state, go into a checksum):

    a  obs + reward + flags        lamella: observation, reward, terminated, truncated;
                                   JaxMARL: observations, rewards, dones
    b  a + final observation       lamella: a + info["final_observation"]; JaxMARL has none (its
                                   step returns the reset's observation): it reads what a reads
    c  reward only

Neither side's `info` (per-agent coin statistics) is read. "bare" (`--bare`) is lamella's dynamics
alone (no keys, no resets, no respawns, every output read): the practical ceiling.

Both sides play Pax's CoinGame: egocentric flat observations, payoff [[1, 1, -2], [1, 1, -2]],
16-step inner episodes. Configurations: `outer600` is Pax's coin-game trial (600 inner episodes
per episode; JaxMARL then keeps Pax's per-outer-step statistics arrays of length 600 in its
state), `outer1` ends the episode at every inner end (JaxMARL with `num_outer_steps=1`).
`storm`: IPD in the Matrix with Pax's ipditm settings (152-step inner episodes, freeze 5, fixed
coins, one inner episode per episode), lamella with `pax_quirks=True` so both play one rule set.
JaxMARL needs its own environment (`bench-marl`); without it the script reports lamella alone and
says so.
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

CONFIGS = {"outer600": 600, "outer1": 1, "storm": 1}
INNER = 16
STORM_INNER = 152


def jaxmarl_side(num_outer: int, reset_keys: jax.Array, pattern: str) -> tuple[Callable[..., jax.Array], Any]:
    from jaxmarl.environments.coin_game.coin_game import CoinGame

    env = CoinGame(num_inner_steps=INNER, num_outer_steps=num_outer, egocentric=True)
    _, state = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            joint = {"0": step_actions[:, 0], "1": step_actions[:, 1]}
            obs, state, reward, done, _ = jax.vmap(env.step)(step_keys, state, joint)
            return (state, total + checksum(peer_consumed(pattern, obs, reward, done))), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + checksum((state.red_pos, state.blue_pos, state.red_coin_pos, state.blue_coin_pos))

    return jax.jit(rollout), state


def storm_side(reset_keys: jax.Array, pattern: str) -> tuple[Callable[..., jax.Array], Any]:
    from jaxmarl.environments.storm.storm_2p import InTheGrid_2p

    env = InTheGrid_2p(num_inner_steps=STORM_INNER, num_outer_steps=1, fixed_coin_location=True)
    _, state = jax.vmap(env.reset)(reset_keys)

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            # storm_2p unpacks the joint action as a pair: one (2,) array per env.
            obs, state, reward, done, _ = jax.vmap(env.step)(step_keys, state, step_actions)
            return (state, total + checksum(peer_consumed(pattern, obs, reward, done))), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + checksum((state.red_pos, state.blue_pos, state.grid, state.freeze))

    return jax.jit(rollout), state


def bench(
    config: str,
    num_envs: int,
    num_steps: int,
    repeats: int,
    with_jaxmarl: bool,
    patterns: list[str],
    clock: Callable[[], float],
    bare: bool,
) -> dict[str, Any]:
    num_outer = CONFIGS[config]
    if config == "storm":
        env, params = le.make("IPDInTheMatrix-v0", num_inner_steps=STORM_INNER, pax_quirks=True)
    else:
        env, params = le.make("CoinGame-v0", num_inner_steps=INNER, num_outer_steps=num_outer)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    actions = jax.random.randint(k_actions, (num_steps, num_envs, 2), 0, 5, jnp.int32)
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    lamella = {"lamella": lambda p: (lamella_rollout(env, params, p), lam_state)}
    peers: dict[str, Callable[[str], Any]] = {}
    if with_jaxmarl:
        peers["jaxmarl"] = (
            (lambda p: storm_side(reset_keys, p))
            if config == "storm"
            else (lambda p: jaxmarl_side(num_outer, reset_keys, p))
        )
    extra = {"bare": (bare_rollout(env, params), lam_state)} if bare else {}
    return time_patterns(
        lamella, peers, patterns, (step_keys, actions), num_envs * num_steps, repeats, clock, extra
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1000, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bare", action="store_true", help="also time lamella's bare dynamics")
    add_arguments(parser)
    args, patterns, clock = parse(parser)
    try:
        jaxmarl_version = importlib.metadata.version("jaxmarl")
    except importlib.metadata.PackageNotFoundError:
        jaxmarl_version = None
        print("jaxmarl is not installed in this environment: lamella alone (use `hatch run bench-marl:...`).")
    device = jax.devices()[0]
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
        f"jax {jax.__version__} on {device.platform} ({device.device_kind}), jaxmarl {jaxmarl_version}, "
        f"lamella-envs {le.__version__}; {args.num_envs} envs x {args.steps} steps per call, "
        f"median of {args.repeats}, clock {args.clock}"
    )
    print_header("jaxmarl", patterns)
    for config in args.configs:
        row = bench(
            config,
            args.num_envs,
            args.steps,
            args.repeats,
            jaxmarl_version is not None,
            patterns,
            clock,
            args.bare,
        )
        print_rows(config, row, ["lamella"], "jaxmarl" if jaxmarl_version else None, patterns)
        if args.bare:
            print(f"| {config} bare (every output) | | {row['rate']['bare']:.3g} | | | |", flush=True)


if __name__ == "__main__":
    main()
