"""MPE throughput: lamella against JaxMARL's MPE, side by side in one process.

    hatch run bench-jaxmarl:python benchmarks/mpe_throughput.py [--envs ID ...] [--continuous]
        [--num-envs 1024] [--steps 500] [--repeats 7] [--patterns abc] [--clock cpu] [--bare]
        (bench-marl holds the same jaxmarl 0.2.0; `--envs all` times all nine scenarios)

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

mpe2's own scenarios that JaxMARL does not have (`MPE-simple_formation-v1`, `MPE-simple_line-v1`,
`MPE-collect_treasure-v1`) have no JAX peer: lamella's patterns are timed alone and set beside
mpe2 1.1.1's parallel env (`--mpe2`, in an env that has mpe2: `hatch -e hatch-test.py3.11-envs run
python benchmarks/mpe_throughput.py --mpe2 ...`):
one env stepped from Python with uniform random actions and reset when its episode ends, steps/s
by the same clock over `--mpe2-steps` steps (numpy on one core: the rate a user gets from the
reference implementation, not a like-for-like batch).

Both sides run the same scenario with discrete actions, or with `--continuous` continuous ones
(JaxMARL's `action_type` is set explicitly: its simple_world_comm defaults to continuous):
mpe2's physics and rewards (JaxMARL's MPE matches mpe2 step by step, MARL.md §3.6), except the
episode length (JaxMARL: 26 steps, lamella and mpe2: 25). Actions go to the agent of the same
name on both sides (simple_crypto lists its agents in another order in JaxMARL); discrete ones
are uniform over each agent's own ids, continuous ones uniform in [0, 1] with JaxMARL taking each
agent's first `d_i` entries (lamella's padding is ignored there). JaxMARL needs its own environment (`bench-jaxmarl`, jaxmarl 0.2.0 on
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

# lamella id -> JaxMARL id of the same scenario (the first three are the default set).
CONFIGS = {
    "MPE-simple_spread-v3": "MPE_simple_spread_v3",
    "MPE-simple_tag-v3": "MPE_simple_tag_v3",
    "MPE-simple_speaker_listener-v4": "MPE_simple_speaker_listener_v4",
    "MPE-simple-v3": "MPE_simple_v3",
    "MPE-simple_adversary-v3": "MPE_simple_adversary_v3",
    "MPE-simple_reference-v3": "MPE_simple_reference_v3",
    "MPE-simple_push-v3": "MPE_simple_push_v3",
    "MPE-simple_crypto-v3": "MPE_simple_crypto_v3",
    "MPE-simple_world_comm-v3": "MPE_simple_world_comm_v3",
}
DEFAULT_ENVS = list(CONFIGS)[:3]
# mpe2's scenarios that JaxMARL lacks: lamella alone, beside mpe2 itself (--mpe2).
MPE2_ONLY = {
    "MPE-simple_formation-v1": "simple_formation_v1",
    "MPE-simple_line-v1": "simple_line_v1",
    "MPE-collect_treasure-v1": "collect_treasure_v1",
}


def mpe2_rate(env_id: str, num_steps: int, clock: Callable[[], float]) -> float:
    """mpe2's parallel env of ``env_id``'s scenario: env steps per second of one env stepped from
    Python with uniform random actions, reset at every episode end (the reset not timed apart)."""
    import importlib

    import numpy as np

    module = importlib.import_module(f"mpe2.{MPE2_ONLY[env_id]}")
    env = module.parallel_env()
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    start = clock()
    for _ in range(num_steps):
        if not env.agents:
            env.reset(seed=int(rng.integers(1 << 30)))
        env.step({agent: int(rng.integers(env.action_space(agent).n)) for agent in env.agents})
    return num_steps / (clock() - start)


def jaxmarl_side(
    env_id: str, agent_names: tuple[str, ...], continuous: bool, reset_keys: jax.Array, pattern: str
) -> tuple[Callable[..., jax.Array], Any]:
    import jaxmarl

    env = jaxmarl.make(env_id, action_type="Continuous" if continuous else "Discrete")
    _, state = jax.vmap(env.reset)(reset_keys)
    # lamella's agent index of each JaxMARL agent, and JaxMARL's own continuous action size.
    index = {agent: agent_names.index(agent) for agent in env.agents}
    sizes = {agent: env.action_space(agent).shape[0] if continuous else None for agent in env.agents}

    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        if len(agent_names) == 1:  # lamella's single-agent actions have no agent axis
            actions = actions[:, :, None]

        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            step_keys, step_actions = inputs
            joint = {
                agent: step_actions[:, index[agent], : sizes[agent]]
                if continuous
                else step_actions[:, index[agent]]
                for agent in env.agents
            }
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
    continuous: bool = False,
) -> dict[str, Any]:
    env, params = le.make(env_id, continuous_actions=continuous)
    k_reset, k_actions, k_steps = jax.random.split(jax.random.key(7), 3)
    reset_keys = jax.random.split(k_reset, num_envs)
    step_keys = jax.random.split(k_steps, (num_steps, num_envs))
    if continuous:
        # Box(0, 1) of shape (n, D) (no agent axis for one agent); entries past an agent's size are padding.
        shape = (num_steps, num_envs, *env.action_space(params).shape)
        actions = jax.random.uniform(k_actions, shape)
    else:
        # Each agent's own action count (the speaker has 3): legal actions on both sides.
        counts = jnp.asarray(env.unwrapped.num_actions_per_agent)
        u = jax.random.uniform(k_actions, (num_steps, num_envs, len(counts)))
        actions = (
            jnp.floor(u * counts)
            .astype(jnp.int32)
            .reshape((num_steps, num_envs, *env.action_space(params).shape))
        )
    _, lam_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    lamella = {"lamella": lambda p: (lamella_rollout(env, params, p), lam_state)}
    names = tuple(env.unwrapped.agent_names)
    peers = (
        {"jaxmarl": lambda p: jaxmarl_side(CONFIGS[env_id], names, continuous, reset_keys, p)}
        if with_jaxmarl and env_id in CONFIGS
        else {}
    )
    extra = {"bare": (bare_rollout(env, params), lam_state)} if bare else {}
    return time_patterns(
        lamella, peers, patterns, (step_keys, actions), num_envs * num_steps, repeats, clock, extra
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="*", default=DEFAULT_ENVS, choices=[*CONFIGS, *MPE2_ONLY, "all"])
    parser.add_argument("--mpe2", action="store_true", help="time mpe2's own env beside mpe2-only scenarios")
    parser.add_argument("--mpe2-steps", type=int, default=5000, help="mpe2 env steps timed per scenario")
    parser.add_argument("--continuous", action="store_true", help="continuous actions on both sides")
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
    for env_id in list(CONFIGS) if "all" in args.envs else args.envs:
        row = bench(
            env_id,
            args.num_envs,
            args.steps,
            args.repeats,
            jaxmarl_version is not None,
            patterns,
            clock,
            args.bare,
            args.continuous,
        )
        label = f"{env_id} continuous" if args.continuous else env_id
        print_rows(
            label, row, ["lamella"], "jaxmarl" if jaxmarl_version and env_id in CONFIGS else None, patterns
        )
        if args.bare:
            print(f"| {label} bare (every output) | | {row['rate']['bare']:.3g} | | | |", flush=True)
        if args.mpe2 and env_id in MPE2_ONLY:
            rate = mpe2_rate(env_id, args.mpe2_steps, clock)
            ratios = ", ".join(f"{p} {row['rate'][f'lamella {p}'] / rate:.3g}x" for p in patterns)
            print(
                f"| {label}: mpe2 (one env, Python) | {rate:.3g} steps/s | lamella / mpe2: {ratios} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
