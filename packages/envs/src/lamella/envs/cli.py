"""The ``lamella`` command.

``lamella demo`` (this package) rolls out every registered environment with
random actions, prints a throughput table and writes a GIF of one episode.
Packages higher in the stack add their own sub-commands (``lamella train``,
``lamella eval``) through the ``lamella.commands`` entry-point group: each entry
point names a function ``register(subparsers)`` that adds a sub-parser whose
``func`` default receives the parsed arguments. An entry point named after a
command (``eval``) or ``<command>_<anything>`` (``train_offpolicy``, which extends
``train``) is loaded only when that command runs, so a command pays only for the
plug-ins it uses; ``lamella --help`` loads them all.

Errors: a :class:`~lamella.envs.errors.UserError` (or a class marked as one) raised by
a command is printed as one line, ``lamella <command>: error: <message>``, on stderr,
and the command exits with status 2; ``lamella --debug ...`` shows the traceback
instead. Argument errors (argparse's own, and those a command reports through its
parser, as ``lamella train`` does for a wrong ``key=value``) print the usage line and the
message and exit with status 2 too; with ``--debug`` a command re-raises them (the parsed
arguments carry ``debug``). Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.metadata import entry_points
from typing import Any

from lamella.envs.errors import UserError, is_user_error

__all__ = ["build_parser", "demo", "load_plugins", "main"]

_BUILTIN_COMMANDS = ("demo", "animate")


def _check_env_ids(env_ids: list[str] | None) -> None:
    """Unknown ids, refused before anything compiles."""
    import difflib

    import lamella.envs as le
    from lamella.envs.registry import adapter_prefix

    known = le.registered()
    for env_id in env_ids or ():
        if env_id not in known and adapter_prefix(env_id) is None:  # brax:... is checked by its adapter
            close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UserError(
                f"Unknown environment id {env_id!r}.{hint} List the ids with: "
                "python -c 'import lamella.envs; print(lamella.envs.registered())'."
            )


def _check_out_dir(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"--out-dir {out_dir!r} is a file, not a directory; pass another --out-dir.")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"--out-dir {out_dir!r} cannot be made ({error.strerror}); pass a directory in a writable place."
        ) from None


def _check_render_extra() -> None:
    import importlib.util

    if importlib.util.find_spec("imageio") is None:
        raise UserError("Writing GIFs needs imageio; install it with: pip install 'lamella-envs[render]'.")


def demo(
    num_envs: int = 256,
    num_steps: int = 200,
    gif_env: str = "CartPole-v1",
    out_dir: str = "runs/demo",
    env_ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Roll out every registered env (or ``env_ids``); return one row per env and write a GIF of ``gif_env``.

    Raises:
        UserError: an unknown env id, ``num_envs`` or ``num_steps`` below 1, an ``out_dir``
            that is a file or cannot be made, or imageio missing; all before anything compiles.
    """
    for name, value in (("num_envs", num_envs), ("num_steps", num_steps)):
        if value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
    _check_env_ids([*(env_ids or ()), gif_env])
    _check_out_dir(out_dir)
    _check_render_extra()

    import jax
    import numpy as np

    import lamella.envs as le

    rows = []
    for env_id in env_ids or le.registered(variants=False):
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


def animate_envs(env_ids: list[str] | None = None, out_dir: str = "runs/gifs", seed: int = 0) -> list[str]:
    """Write a GIF of one random-action episode per env; with no ids, one env of each family.

    Raises:
        UserError: an unknown env id, an ``out_dir`` that is a file or cannot be made, or imageio
            missing; all before anything compiles.
    """
    _check_env_ids(env_ids)
    _check_out_dir(out_dir)
    _check_render_extra()

    import jax

    import lamella.envs as le
    from lamella.envs.registry import env_family

    if not env_ids:
        first_of_family: dict[str, str] = {}
        for env_id in le.registered(variants=False):
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
    # `lamella demo` and `lamella eval checkpoints` take their ids after --envs: so does this.
    parser.add_argument("--envs", nargs="+", default=[], metavar="ID", help="the same as the ids above")
    parser.add_argument(
        "--all",
        action="store_true",
        help="every registered env but the option variants (LBF and RWARE sizes)",
    )
    parser.add_argument("--out-dir", default="runs/gifs")
    parser.add_argument("--seed", type=int, default=0)

    def run(args: Any) -> None:
        import lamella.envs as le

        env_ids = le.registered(variants=False) if args.all else [*args.env_ids, *args.envs]
        animate_envs(env_ids, args.out_dir, args.seed)

    parser.set_defaults(func=run)


def _register_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="roll out every registered env but the option variants, print throughput, write a GIF"
    )
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--gif-env", default="CartPole-v1")
    parser.add_argument("--out-dir", default="runs/demo")
    parser.add_argument(
        "--envs", nargs="*", help="only these ids (default: every registered env but the option variants)"
    )
    parser.set_defaults(func=lambda a: demo(a.num_envs, a.num_steps, a.gif_env, a.out_dir, a.envs) and None)


def _entry_points() -> list[Any]:
    return sorted(entry_points(group="lamella.commands"), key=lambda e: e.name)


def _wanted(entry_name: str, command: str | None) -> bool:
    return command is None or entry_name == command or entry_name.startswith(f"{command}_")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``lamella`` parser with the plug-ins of ``command`` (every plug-in when None)."""
    parser = argparse.ArgumentParser(
        prog="lamella",
        description="lamella: reinforcement learning in JAX",
        epilog="A user error prints one line and exits with status 2; --debug shows its traceback.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _register_demo(subparsers)
    _register_animate(subparsers)
    for entry in _entry_points():
        if not _wanted(entry.name, command):
            continue
        try:
            register_command = entry.load()
        except Exception as error:  # a broken plug-in must not take the other commands down
            print(f"lamella: skipping the '{entry.name}' command ({entry.value}): {error}", file=sys.stderr)
            continue
        register_command(subparsers)
    return parser


def load_plugins() -> None:
    """Load every ``lamella.commands`` plug-in (idempotent registration side effects included).

    For commands that need what other packages register, such as ``lamella eval checkpoints``,
    which evaluates checkpoints of any algorithm a plug-in adds to lamella-agents' table.
    """
    build_parser()


def _command_of(argv: list[str]) -> str | None:
    """The sub-command named in ``argv`` when it is a plug-in's (None: load every plug-in)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None or first in _BUILTIN_COMMANDS:
        return first
    names = {e.name for e in _entry_points()}
    if first in names or any(n.startswith(f"{first}_") for n in names):
        return first
    return None  # unknown: argparse lists every command


def main(argv: list[str] | None = None) -> int:
    """Run ``lamella ARGV``; return the exit status (2 for user errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is global; accept it anywhere before a "--", since users add it at the end.
    cut = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:cut]
    argv = [a for a in argv[:cut] if a != "--debug"] + argv[cut:]
    command = _command_of(argv)
    args = build_parser(command).parse_args(argv)
    args.debug = debug  # commands that report argument errors through argparse re-raise instead
    try:
        result = args.func(args)
    except Exception as error:
        if debug or not is_user_error(error):
            raise
        # "lamella eval aggregate": the command and its own sub-command, where it has one.
        name = " ".join(filter(None, (args.command, getattr(args, f"{args.command}_command", None))))
        print(f"lamella {name}: error: {error}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
