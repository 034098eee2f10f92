"""AMaze throughput: lamella against JaxUED's and minimax's maze, side by side; PerfectMazeXL evaluation.

    hatch run bench-amaze:python benchmarks/amaze_throughput.py \
        [--minimax-python "$(hatch env find bench-amaze-minimax)/bin/python"] \
        [--num-envs 1024] [--steps 128] [--repeats 5] [--xl-episodes 500]

Protocol (../shared/BENCHMARKS.md): 1024 envs on 13x13 mazes, uniform random actions in 0..6 and
per-env keys drawn before the timed calls (the same arrays for every side), one call =
`jit(scan(vmap(step)))`, every output consumed in a checksum (image, direction, reward, done
flags), timed calls interleaved, medians reported, compile time separately. Every side starts
from its random levels with the episode clocks spread evenly over the horizon (env ``i`` at
``time = i * 250 // num_envs``), the steady state of a long run: about ``num_envs / 250`` episodes
end on the time limit per step besides those that reach the goal (from clocks all at 0 none would
in 128 steps, and a reset that costs only when an episode ends would look cheaper than it is).
Three ways an episode can end, each run on every library that has it:

* ``dr``: auto-reset to a new random level (minimax's training setting: 60 walls drawn with
  replacement, 250 steps). lamella: `AutoReset(AMaze)` (`make("AMaze-13x13-v0")`); JaxUED:
  `AutoResetWrapper(Maze, make_level_generator(13, 13, 60))`; minimax: `Maze.step` (it resets
  on done itself).
* ``dr-every-env``: lamella's DR step as it was before `AMaze.reset_where`: `AutoReset` draws a
  level for every env on every step and selects (the before/after of that change; the same
  states bit for bit).
* ``dr-pool``: lamella's `OptimisticReset(AMaze, 1024, reset_ratio=16)`: 64 fresh random levels
  per step, handed to the envs that finished (two envs finishing together may share a level).
* ``replay``: restart the episode's own level (PLR/ACCEL rollouts). lamella: `AutoReplay`;
  JaxUED: `AutoReplayWrapper`.
* ``bare``: the step alone, no reset (the practical ceiling). lamella: `AMaze.step`; JaxUED:
  `Maze.step_env`.

JaxUED (jaxued 0.0.1, which still calls `jax.tree_map`: aliased to `jax.tree_util.tree_map`)
runs in this process. minimax-lib 0.2.0 pins jax 0.4.31, so it runs in its own environment
(`bench-amaze-minimax`) as a worker process that this script starts with `--minimax-python`
and asks for one timed call per round, in turn with the others. A side whose library is missing
is left out, and the script says so.

PerfectMazeXL (101x101, horizon 21218): the time to generate ``--xl-episodes`` mazes and to run
one full episode on each with random actions (a random policy almost never reaches the goal, so
every episode runs to the horizon: the worst case), without resets, as an evaluation loop does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

HEIGHT = WIDTH = 13
N_WALLS = 60
MAX_STEPS = 250


def _checksum(obs_image: Any, obs_dir: Any, reward: Any, done: Any) -> jax.Array:
    return (
        jnp.sum(obs_image.astype(jnp.float32))
        + jnp.sum(obs_dir.astype(jnp.float32))
        + jnp.sum(reward.astype(jnp.float32))
        + jnp.sum(done.astype(jnp.float32))
    )


def _inputs(num_envs: int, steps: int, seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    actions = jnp.asarray(rng.integers(0, 7, size=(steps, num_envs)), jnp.int32)
    keys = jnp.asarray(rng.integers(0, 2**32, size=(steps, num_envs, 2), dtype=np.uint64).astype(np.uint32))
    reset_keys = jnp.asarray(rng.integers(0, 2**32, size=(num_envs, 2), dtype=np.uint64).astype(np.uint32))
    return reset_keys, keys, actions


def _spread_clocks(state: Any, horizon: int = MAX_STEPS) -> Any:
    """``state`` (a batch; wrapped states by their ``env_state``) with env ``i``'s clock at
    ``i * horizon // num_envs``."""
    if hasattr(state, "env_state"):
        return state.replace(env_state=_spread_clocks(state.env_state, horizon))
    num_envs = state.time.shape[0]
    clocks = (np.arange(num_envs) * horizon) // num_envs
    return state.replace(time=jnp.asarray(clocks, state.time.dtype))


def _scan(step: Any) -> Any:
    """``jit(state, keys, actions) -> checksum`` of ``step(keys_t, state, actions_t) -> (state, checksum)``."""

    @jax.jit
    def rollout(state: Any, keys: jax.Array, actions: jax.Array) -> jax.Array:
        def body(carry: Any, inputs: Any) -> Any:
            state, total = carry
            state, check = step(inputs[0], state, inputs[1])
            return (state, total + check), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), (keys, actions))
        return total + jnp.sum(jnp.asarray(jax.tree.leaves(state)[0], jnp.float32))

    return rollout


# lamella -------------------------------------------------------------------------------------


def lamella_sides(reset_keys: jax.Array) -> dict[str, tuple[Any, Any]]:
    import lamella.envs as le
    from lamella.envs import maze

    env, params = le.make("AMaze-13x13-v0")  # AutoReset
    bare = maze.AMaze()
    replay = maze.AutoReplay(bare)
    state = _spread_clocks(jax.jit(jax.vmap(lambda k: env.reset(k, params)))(reset_keys)[1])
    sides = {}
    for name, wrapped in (("dr", env), ("replay", replay), ("bare", bare)):

        def step(keys: jax.Array, state: Any, actions: jax.Array, wrapped: Any = wrapped) -> Any:
            obs, state, reward, terminated, truncated, info = jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))(
                keys, state, actions, params
            )
            check = _checksum(obs["image"], obs["agent_dir"], reward, terminated | truncated)
            if "final_observation" in info:
                check = check + jnp.sum(info["final_observation"]["image"][:, 0, 0, 0].astype(jnp.float32))
            return state, check

        sides[f"lamella {name}"] = (_scan(step), state)

    # OptimisticReset: each step draws num_envs / 16 fresh levels for the envs that finished.
    optimistic = le.wrappers.OptimisticReset(bare, reset_keys.shape[0], reset_ratio=16)

    def step_optimistic(keys: jax.Array, state: Any, actions: jax.Array) -> Any:
        obs, state, reward, terminated, truncated, info = optimistic.step(keys[0], state, actions, params)
        check = _checksum(obs["image"], obs["agent_dir"], reward, terminated | truncated)
        return state, check + jnp.sum(info["final_observation"]["image"][:, 0, 0, 0].astype(jnp.float32))

    sides["lamella dr-pool"] = (_scan(step_optimistic), state)

    # The DR step as it was before AMaze.reset_where: AutoReset finds no reset_where, so every env
    # draws a level on every step and the state is selected (the same states bit for bit).
    from lamella.envs.wrappers import AutoReset

    class EveryEnvReset(maze.AMaze):
        reset_where = None  # type: ignore[assignment]

    settings = {"height": HEIGHT, "width": WIDTH, "n_walls": N_WALLS, "replace_wall_pos": True}
    before = AutoReset(EveryEnvReset(**settings))

    def step_before(keys: jax.Array, state: Any, actions: jax.Array) -> Any:
        obs, state, reward, terminated, truncated, info = jax.vmap(before.step, in_axes=(0, 0, 0, None))(
            keys, state, actions, params
        )
        check = _checksum(obs["image"], obs["agent_dir"], reward, terminated | truncated)
        return state, check + jnp.sum(info["final_observation"]["image"][:, 0, 0, 0].astype(jnp.float32))

    sides["lamella dr-every-env"] = (_scan(step_before), state)
    return sides


# JaxUED --------------------------------------------------------------------------------------


def jaxued_sides(reset_keys: jax.Array) -> dict[str, tuple[Any, Any]]:
    jax.tree_map = jax.tree_util.tree_map  # type: ignore[attr-defined]  # jaxued 0.0.1 calls it
    from jaxued.environments.maze import Maze, make_level_generator
    from jaxued.wrappers import AutoReplayWrapper, AutoResetWrapper

    base = Maze(max_height=HEIGHT, max_width=WIDTH, agent_view_size=5, normalize_obs=False)
    params = base.default_params.replace(max_steps_in_episode=MAX_STEPS)
    sample_level = make_level_generator(HEIGHT, WIDTH, N_WALLS)
    levels = jax.jit(jax.vmap(sample_level))(reset_keys)
    sides = {}
    envs = {
        "dr": AutoResetWrapper(base, sample_level),
        "replay": AutoReplayWrapper(base),
        "bare": base,
    }
    for name, env in envs.items():
        state = jax.jit(jax.vmap(env.reset_to_level, in_axes=(0, 0, None)))(reset_keys, levels, params)[1]
        state = _spread_clocks(state)
        step_fn = env.step_env if name == "bare" else env.step

        def step(keys: jax.Array, state: Any, actions: jax.Array, step_fn: Any = step_fn) -> Any:
            obs, state, reward, done, _ = jax.vmap(step_fn, in_axes=(0, 0, 0, None))(
                keys, state, actions, params
            )
            return state, _checksum(obs.image, obs.agent_dir, reward, done)

        sides[f"JaxUED {name}"] = (_scan(step), state)
    return sides


# minimax (worker process in its own environment) ---------------------------------------------


def minimax_worker(num_envs: int, steps: int, clock: Any = time.perf_counter) -> None:
    """Build minimax's side, then answer each line on stdin with one timed call's seconds."""
    jax.tree_map = getattr(jax, "tree_map", jax.tree_util.tree_map)  # type: ignore[attr-defined]
    from minimax.envs.maze.maze import Maze

    env = Maze(
        height=HEIGHT,
        width=WIDTH,
        n_walls=N_WALLS,
        replace_wall_pos=True,
        agent_view_size=5,
        max_episode_steps=MAX_STEPS,
        normalize_obs=False,
    )
    reset_keys, keys, actions = _inputs(num_envs, steps)
    state = _spread_clocks(jax.jit(jax.vmap(env.reset))(reset_keys)[1])

    def step(keys: jax.Array, state: Any, actions: jax.Array) -> Any:
        obs, state, reward, done, _ = jax.vmap(env.step)(keys, state, actions)
        return state, _checksum(obs["image"], obs["agent_dir"], reward, done)

    rollout = _scan(step)
    start = time.perf_counter()
    rollout(state, keys, actions).block_until_ready()
    print(json.dumps({"compile_s": time.perf_counter() - start, "jax": jax.__version__}), flush=True)
    for _ in sys.stdin:
        start = clock()
        rollout(state, keys, actions).block_until_ready()
        print(json.dumps({"seconds": clock() - start}), flush=True)


class MinimaxSide:
    def __init__(self, python: str, num_envs: int, steps: int, clock: str):
        self.process = subprocess.Popen(
            [
                *(python, __file__, "--worker", "minimax", "--num-envs", str(num_envs)),
                *("--steps", str(steps), "--clock", clock),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("the minimax worker exited before it was ready (see its stderr above)")
        ready = json.loads(line)
        self.compile_s, self.jax_version = ready["compile_s"], ready["jax"]

    def time_call(self) -> float:
        self.process.stdin.write("time\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return float(json.loads(self.process.stdout.readline())["seconds"])  # type: ignore[union-attr]

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=60)


# PerfectMazeXL evaluation ---------------------------------------------------------------------


def perfect_maze_xl(episodes: int) -> dict[str, float]:
    from lamella.envs import maze

    sample, params = maze.named_maze_sampler("PerfectMazeXL")
    env = maze.AMaze()
    keys = jax.random.split(jax.random.key(0), episodes)
    generate = jax.jit(jax.vmap(sample))
    start = time.perf_counter()
    levels = jax.block_until_ready(generate(keys))
    generate_first_s = time.perf_counter() - start
    start = time.perf_counter()
    levels = jax.block_until_ready(generate(jax.random.split(jax.random.key(1), episodes)))
    generate_s = time.perf_counter() - start

    @jax.jit
    def evaluate(levels: Any) -> tuple[jax.Array, jax.Array]:
        _, state = jax.vmap(env.reset_to_level, in_axes=(None, 0, None))(jax.random.key(0), levels, params)
        index = jnp.arange(episodes, dtype=jnp.uint32)

        def body(carry: Any, t: jax.Array) -> Any:
            state, returns, lengths, alive, seen = carry
            # A cheap per-(step, env) hash for random actions (no key splitting in the loop); the
            # last observation enters it, so it is computed, as a policy would need it.
            h = (index * np.uint32(0x9E3779B9)) ^ (t.astype(jnp.uint32) * np.uint32(0x85EBCA6B)) ^ seen
            h = (h ^ (h >> 15)) * np.uint32(0x2C1B3C6D)
            actions = ((h >> 7) % 7).astype(jnp.int32)
            obs, state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(None, 0, 0, None))(
                jax.random.key(0), state, actions, params
            )
            returns = returns + reward * alive
            lengths = lengths + alive
            alive = alive * (1 - (terminated | truncated).astype(jnp.float32))
            seen = jnp.sum(obs["image"].astype(jnp.uint32), axis=(1, 2, 3)) + obs["agent_dir"].astype(
                jnp.uint32
            )
            return (state, returns, lengths, alive, seen), None

        ones = jnp.ones((episodes,), jnp.float32)
        seen = jnp.zeros((episodes,), jnp.uint32)
        (state, returns, lengths, alive, seen), _ = jax.lax.scan(
            body, (state, 0 * ones, 0 * ones, ones, seen), jnp.arange(params.max_episode_steps)
        )
        return returns, lengths

    start = time.perf_counter()
    returns, lengths = jax.block_until_ready(evaluate(levels))
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    returns, lengths = jax.block_until_ready(evaluate(levels))
    eval_s = time.perf_counter() - start
    return {
        "episodes": episodes,
        "generate_first_s": generate_first_s,
        "generate_s": generate_s,
        "evaluate_first_s": first_s,
        "evaluate_s": eval_s,
        "steps": float(np.sum(np.asarray(lengths))),
        "solved": float(np.mean(np.asarray(returns) > 0)),
    }


# Main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--minimax-python", default=None, help="python of an env with minimax-lib 0.2.0")
    parser.add_argument("--xl-episodes", type=int, default=500, help="0 skips the PerfectMazeXL evaluation")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time calls by wall clock (default) or by the CPU time of the process running them "
        "(steadier on a loaded machine; minimax's worker times itself the same way)",
    )
    parser.add_argument("--worker", choices=["minimax"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.worker == "minimax":
        minimax_worker(args.num_envs, args.steps, clock)
        return

    reset_keys, keys, actions = _inputs(args.num_envs, args.steps)
    sides = lamella_sides(reset_keys)
    missing = []
    try:
        sides.update(jaxued_sides(reset_keys))
    except ImportError as error:
        missing.append(f"JaxUED ({error}; run in the bench-amaze env)")
    minimax = None
    if args.minimax_python:
        minimax = MinimaxSide(args.minimax_python, args.num_envs, args.steps, args.clock)
    else:
        missing.append("minimax (pass --minimax-python from the bench-amaze-minimax env)")

    compile_s = {}
    for name, (fn, state) in sides.items():
        start = time.perf_counter()
        fn(state, keys, actions).block_until_ready()
        compile_s[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in sides}
    if minimax is not None:
        times["minimax dr"] = []
        compile_s["minimax dr"] = minimax.compile_s
    for _ in range(args.repeats):
        for name, (fn, state) in sides.items():
            start = clock()
            fn(state, keys, actions).block_until_ready()
            times[name].append(clock() - start)
        if minimax is not None:
            times["minimax dr"].append(minimax.time_call())
    if minimax is not None:
        minimax.close()

    work = args.num_envs * args.steps
    rate = {name: work / statistics.median(t) for name, t in times.items()}
    print(
        f"AMaze 13x13, {N_WALLS} walls (with replacement), {args.num_envs} envs x {args.steps} steps, "
        f"random actions, median of {args.repeats} interleaved calls, {args.clock} clock"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}"
        + (f"; minimax on jax {minimax.jax_version}" if minimax else "")
    )
    print(f"{'side':<20} {'steps/s':>12} {'compile s':>10}")
    for name in times:
        print(f"{name:<20} {rate[name]:>12.3g} {compile_s[name]:>10.1f}")
    for mode in ("dr", "replay", "bare"):
        ours = rate.get(f"lamella {mode}")
        for peer in ("JaxUED", "minimax"):
            theirs = rate.get(f"{peer} {mode}")
            if ours and theirs:
                paired = [b / a for a, b in zip(times[f"lamella {mode}"], times[f"{peer} {mode}"])]
                print(
                    f"lamella / {peer} ({mode}): {ours / theirs:.1f}x "
                    f"(paired per round: {min(paired):.1f}-{max(paired):.1f}x)"
                )
    if rate.get("lamella dr-every-env"):
        paired = [b / a for a, b in zip(times["lamella dr"], times["lamella dr-every-env"])]
        print(
            f"lamella dr / dr-every-env (a level drawn for every env on every step): "
            f"{rate['lamella dr'] / rate['lamella dr-every-env']:.2f}x "
            f"(paired per round: {min(paired):.2f}-{max(paired):.2f}x)"
        )
    if rate.get("lamella bare"):
        for mode in ("dr", "replay"):
            print(f"lamella {mode}: {rate[f'lamella {mode}'] / rate['lamella bare']:.0%} of the bare step")
    for note in missing:
        print(f"left out: {note}")

    if args.xl_episodes:
        xl = perfect_maze_xl(args.xl_episodes)
        print(
            f"PerfectMazeXL, {xl['episodes']} episodes of random actions ({xl['steps']:.3g} steps, "
            f"solved {xl['solved']:.1%}): generate {xl['generate_s']:.2f} s "
            f"(first call {xl['generate_first_s']:.1f} s with compile), evaluate {xl['evaluate_s']:.1f} s "
            f"(first call {xl['evaluate_first_s']:.1f} s with compile), "
            f"{xl['steps'] / xl['evaluate_s']:.3g} steps/s"
        )


if __name__ == "__main__":
    main()
