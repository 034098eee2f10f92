"""SAC + HER in the Dubins maze (``GMazeGoalDubinsWalls-v0``): the ``lamella train sac`` preset
with one or more settings changed, for screening what might lift its success (issue 12).

Seeds train side by side in one compiled program (``lamella.agents.testing.learning_curves``:
keys ``jax.random.split(jax.random.key(0), seeds)``); after every iteration of 2 000 env steps
the greedy policy plays ``--eval-episodes`` episodes of the env's own goals inside the same
program, so every variant is scored on the same goals. Prints one JSON line: the last
evaluation, the mean of the last 3, the best, every curve and the process CPU time. A learning
measurement for lamella-gcrl's docs/maze-rounds.md ("Third round"), not a speed benchmark.

    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py              # the preset
    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py --algo tqc
    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py --heading cos-sin
    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py --frontier 0.5
    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py gamma=0.95 learning_starts=10000

``key=value`` arguments replace fields of the preset's config (tuples as ``256,256,256``).
``--heading cos-sin`` shows the networks (x, y, cos, sin of the heading) instead of gym-gmazes'
(x, y, heading / pi), whose heading jumps from 1 to -1 when the car faces west.
``--frontier P`` trains on goals drawn, with probability P, in a rarely visited cell of a 20 x 20
grid over the square (cells weighted by 1 / visits among the visited ones: the frontier of what
the car has reached), else uniform as the env draws them; evaluation keeps the env's goals. It is
lamella-gcrl's ``frontier`` goal setter, the same as ``goal_setter=frontier frontier_probability=P``.
``--chunk N`` compiles N iterations per call and prints a line after each chunk (the same curves
as one call), with the greedy success of ``--corridor-episodes`` episodes of one fixed set of goals
split by the corridor the goal lies in (0: the start's, 3: the far one).

    hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_dubins_maze.py --frontier 0.8 --seeds 3 --steps 200000 --chunk 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.offpolicy.configs import TQCTrainConfig
from lamella.agents.testing import learning_curves
from lamella.envs import spaces
from lamella.envs.goal.gmaze import DEFAULT_WALLS, GMazeGoalDubins, GMazeParams
from lamella.gcrl import PRESETS, make_offpolicy_runner

ENV_ID = "GMazeGoalDubinsWalls-v0"


class CosSinHeadingMaze(GMazeGoalDubins):
    """The maze with ``observation`` = (x, y, cos(pi h), sin(pi h)), float32 (4,)."""

    def _obs(self, state: Any) -> dict[str, jax.Array]:
        obs = super()._obs(state)
        x, y, heading = state.position
        obs["observation"] = jnp.stack([x, y, jnp.cos(jnp.pi * heading), jnp.sin(jnp.pi * heading)])
        return obs

    def observation_space(self, params: GMazeParams | None = None) -> spaces.Dict:
        box = lambda n: spaces.Box(-1.0, 1.0, (n,), jnp.float32)  # noqa: E731
        return spaces.Dict({"observation": box(4), "achieved_goal": box(2), "desired_goal": box(2)})


def goal_corridor(goal: jax.Array) -> jax.Array:
    """The corridor of a goal, int32: 0 (the start's, x < -0.5) to 3 (the far one, x > 0.5).

    The maze's three walls (x = -0.5, 0, 0.5) cut the square into four corridors the car visits
    in order: down the first, under the wall at x = -0.5, up the second, over x = 0, down the
    third, under x = 0.5 and up the fourth."""
    return jnp.clip(jnp.floor((goal[..., 0] + 1.0) / 0.5), 0, 3).astype(jnp.int32)


def train_in_chunks(
    runner: Any, wide_runner: Any, env: Any, params: Any, seeds: int, chunk: int, wide_episodes: int
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``learning_curves``' curves (same keys, same evaluations), compiled as ``chunk`` iterations
    per call so that every chunk prints a line; after each chunk ``wide_runner`` (the same runner,
    ``wide_episodes`` evaluation episodes) plays one fixed set of goals and the success is split
    by the goal's corridor."""
    if runner.num_iterations % chunk:
        raise SystemExit(f"--chunk {chunk} must divide the {runner.num_iterations} iterations")
    keys = jax.random.split(jax.random.key(0), seeds)

    def run_chunk(state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        def body(state: Any, _: None) -> tuple[Any, jax.Array]:
            state, _metrics = runner.step(state)
            evaluation = runner.evaluate(state, jax.random.fold_in(key, state.iteration))
            return state, evaluation["success"].mean()

        return jax.lax.scan(body, state, None, length=chunk)

    wide_key = jax.random.key(12345)
    reset_keys = jax.random.split(jax.random.split(wide_key)[0], wide_episodes)
    goals = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)[0]["desired_goal"]
    corridor = jax.nn.one_hot(goal_corridor(goals), 4)  # (episodes, 4)

    def split(state: Any) -> jax.Array:
        success = wide_runner.evaluate(state, wide_key)["success"]
        return (success @ corridor) / corridor.sum(0)

    init = jax.jit(jax.vmap(runner.init))
    step = jax.jit(jax.vmap(run_chunk))
    by_corridor = jax.jit(jax.vmap(split))
    state, parts, rows = init(keys), [], []
    for _ in range(runner.num_iterations // chunk):
        state, curve = step(state, keys)
        parts.append(np.asarray(curve))
        row = {
            "env_steps": len(parts) * chunk * runner.steps_per_iteration,
            "success": parts[-1][:, -1].astype(np.float64).round(3).tolist(),
            "success_by_goal_corridor": np.asarray(by_corridor(state), np.float64).round(3).tolist(),
            "cpu_s": round(time.process_time()),
            "load_average": round(os.getloadavg()[0], 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return np.concatenate(parts, axis=1).astype(np.float64), rows


def parse_value(text: str) -> Any:
    if "," in text:
        return tuple(parse_value(part) for part in text.split(",") if part)
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"none": None, "true": True, "false": False}.get(text.lower(), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value fields of the preset's config")
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--algo", choices=("sac", "tqc"), default="sac")
    parser.add_argument("--heading", choices=("angle", "cos-sin"), default="angle")
    parser.add_argument("--frontier", type=float, default=None, help="probability of a frontier goal")
    parser.add_argument(
        "--chunk",
        type=int,
        default=0,
        help="iterations per compiled call, a progress line after each (0: one call)",
    )
    parser.add_argument(
        "--corridor-episodes", type=int, default=200, help="episodes of the per-corridor split"
    )
    args = parser.parse_args()

    config: Any = PRESETS["sac"][ENV_ID]
    if args.algo == "tqc":
        names = {f.name for f in dataclasses.fields(TQCTrainConfig)}
        config = TQCTrainConfig(
            **{f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name in names}
        )
    overrides = dict(item.split("=", 1) for item in args.overrides)
    config = dataclasses.replace(
        config,
        total_timesteps=args.steps,
        buffer_size=max(args.steps, 40_000),
        eval_episodes=args.eval_episodes,
        **{key: parse_value(value) for key, value in overrides.items()},
    )
    env = (CosSinHeadingMaze if args.heading == "cos-sin" else GMazeGoalDubins)(walls=DEFAULT_WALLS)
    params = env.default_params
    if args.frontier is not None:
        config = dataclasses.replace(config, goal_setter="frontier", frontier_probability=args.frontier)
    runner = make_offpolicy_runner(config, env=env, env_params=params)

    cpu, wall = time.process_time(), time.time()
    if args.chunk:
        wide = make_offpolicy_runner(
            dataclasses.replace(config, eval_episodes=args.corridor_episodes), env=env, env_params=params
        )
        curves, _rows = train_in_chunks(
            runner, wide, env, params, args.seeds, args.chunk, args.corridor_episodes
        )
    else:
        curves = np.asarray(learning_curves(runner, args.seeds, "success"), np.float64)
    cpu, wall = time.process_time() - cpu, time.time() - wall
    report = {
        "algo": args.algo,
        "heading": args.heading,
        "frontier": args.frontier,
        "overrides": overrides,
        "steps": args.steps,
        "last": curves[:, -1].round(3).tolist(),
        "mean_last_3": curves[:, -3:].mean(axis=1).round(3).tolist(),
        "mean_last_10": curves[:, -10:].mean(axis=1).round(3).tolist(),
        "best": curves.max(axis=1).round(3).tolist(),
        "curves": curves.round(2).tolist(),
        "cpu_s": round(cpu),
        "wall_s": round(wall),
        "load_average": round(os.getloadavg()[0], 1),
        "jax": jax.__version__,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
