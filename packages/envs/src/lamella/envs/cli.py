"""The ``lamella`` command.

``lamella demo`` (this package) rolls out every registered environment with
random actions, prints a throughput table and writes a GIF of one episode.
Packages higher in the stack add their own sub-commands (``lamella train``,
``lamella eval``) through the ``lamella.commands`` entry-point group: each entry
point names a function ``register(subparsers)`` that adds a sub-parser whose
``func`` default receives the parsed arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.metadata import entry_points
from typing import Any

__all__ = ["demo", "main"]


def demo(
    num_envs: int = 256,
    num_steps: int = 200,
    gif_env: str = "CartPole-v1",
    out_dir: str = "runs/demo",
    env_ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Roll out every registered env (or ``env_ids``); return one row per env and write a GIF of ``gif_env``."""
    import jax
    import numpy as np

    import lamella.envs as le

    rows = []
    for env_id in env_ids or le.registered():
        env, params = le.make(env_id)
        action_space = env.action_space(params)

        def rollout(
            key: jax.Array, env: Any = env, params: Any = params, action_space: Any = action_space
        ) -> Any:
            reset_keys = jax.random.split(key, num_envs)
            obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)

            def body(carry: Any, step_key: jax.Array) -> Any:
                state, total, episodes = carry
                keys = jax.random.split(step_key, (2, num_envs))
                actions = jax.vmap(action_space.sample)(keys[0])
                out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys[1], state, actions, params)
                done = jax.vmap(le.episode_done)(out[3], out[4])
                return (out[1], total + out[2].sum(), episodes + done.sum()), None

            (state, total, episodes), _ = jax.lax.scan(
                body, (state, 0.0, 0), jax.random.split(key, num_steps)
            )
            return total, episodes

        run = jax.jit(rollout)
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(0)))
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        total, episodes = jax.block_until_ready(run(jax.random.key(1)))
        seconds = time.perf_counter() - start
        rows.append(
            {
                "env": env_id,
                "steps_per_s": num_envs * num_steps / seconds,
                "compile_s": compile_s,
                "episodes": int(episodes),
                "mean_reward": float(np.asarray(total)) / (num_envs * num_steps * max(env.num_agents, 1)),
            }
        )
        print(
            f"{env_id:<34} {rows[-1]['steps_per_s']:>12.3g} steps/s  compile {compile_s:5.1f} s"
            f"  episodes {rows[-1]['episodes']:>6}  mean reward {rows[-1]['mean_reward']:+.3f}",
            flush=True,
        )

    env, params = le.make(gif_env)
    gif_path = os.path.join(out_dir, f"{gif_env}.gif")
    os.makedirs(out_dir, exist_ok=True)
    states = episode_states(env, params, jax.random.key(0))
    le.animate(env, params, states, gif_path, fps=30)
    print(f"wrote one episode of {gif_env} to {gif_path}")
    return rows


def episode_states(env: Any, params: Any, key: Any, max_steps: int = 500) -> Any:
    """States of one random-action episode (time axis leading), stopping at the first episode end."""
    import jax
    import jax.numpy as jnp

    import lamella.envs as le

    bare = env.unwrapped
    key, reset_key = jax.random.split(key)
    _, state = bare.reset(reset_key, params)

    def body(carry: Any, step_key: Any) -> Any:
        state, ended = carry
        k_action, k_step = jax.random.split(step_key)
        action = bare.action_space(params).sample(k_action)
        _, next_state, _, terminated, truncated, _ = bare.step(k_step, state, action, params)
        next_state = jax.tree.map(lambda new, old: jnp.where(ended, old, new), next_state, state)
        return (next_state, ended | le.episode_done(terminated, truncated)), (state, ended)

    _, (states, ended) = jax.jit(
        lambda k: jax.lax.scan(body, (state, jnp.asarray(False)), jax.random.split(k, max_steps))
    )(key)
    length = int(max(1, (~ended).sum()))
    return jax.tree.map(lambda x: x[:length], states)


def env_family(env: Any) -> str:
    """The lamella.envs sub-package that defines ``env`` (``classic_control``, ``bsuite``, ...)."""
    module = type(env.unwrapped).__module__
    parts = module.split(".")
    if parts[:2] == ["lamella", "envs"] and len(parts) > 2:
        return parts[2]
    return "custom"


def animate_envs(env_ids: list[str] | None = None, out_dir: str = "runs/gifs", seed: int = 0) -> list[str]:
    """Write a GIF of one random-action episode per env; with no ids, one env of each family."""
    import jax

    import lamella.envs as le

    if not env_ids:
        first_of_family: dict[str, str] = {}
        for env_id in le.registered():
            env, _ = le.make(env_id, autoreset=False)
            first_of_family.setdefault(env_family(env), env_id)
        env_ids = sorted(first_of_family.values())
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for env_id in env_ids:
        env, params = le.make(env_id, autoreset=False)
        states = episode_states(env, params, jax.random.key(seed))
        path = le.animate(env, params, states, os.path.join(out_dir, f"{env_id}.gif"), fps=15)
        print(f"{env_family(env):<16} {env_id:<34} -> {path}", flush=True)
        paths.append(path)
    return paths


def _register_animate(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "animate", help="write a GIF of one random-action episode per env (default: one env per family)"
    )
    parser.add_argument(
        "env_ids", nargs="*", help="registered ids (default: the first id of every env family)"
    )
    parser.add_argument("--all", action="store_true", help="every registered env")
    parser.add_argument("--out-dir", default="runs/gifs")
    parser.add_argument("--seed", type=int, default=0)

    def run(args: Any) -> None:
        import lamella.envs as le

        animate_envs(le.registered() if args.all else args.env_ids, args.out_dir, args.seed)

    parser.set_defaults(func=run)


def _register_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="roll out every registered env, print throughput, write a GIF"
    )
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--gif-env", default="CartPole-v1")
    parser.add_argument("--out-dir", default="runs/demo")
    parser.add_argument("--envs", nargs="*", help="only these ids (default: every registered env)")
    parser.set_defaults(func=lambda a: demo(a.num_envs, a.num_steps, a.gif_env, a.out_dir, a.envs) and None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lamella", description="lamella: reinforcement learning in JAX")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _register_demo(subparsers)
    _register_animate(subparsers)
    for entry in sorted(entry_points(group="lamella.commands"), key=lambda e: e.name):
        try:
            register_command = entry.load()
        except Exception as error:  # a broken plug-in must not take the other commands down
            print(f"lamella: skipping the '{entry.name}' command ({entry.value}): {error}", file=sys.stderr)
            continue
        register_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
