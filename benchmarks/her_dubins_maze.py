"""SAC + HER in the Dubins maze (``GMazeGoalDubinsWalls-v0``): the ``lamella train sac`` preset
with one or more settings changed, for screening what might lift its success (issue 12).

Seeds train side by side in one compiled program (``lamella.agents.testing.learning_curves``:
keys ``jax.random.split(jax.random.key(0), seeds)``); after every iteration of 2 000 env steps
the greedy policy plays ``--eval-episodes`` episodes of the env's own goals inside the same
program, so every variant is scored on the same goals. Prints one JSON line: the last
evaluation, the mean of the last 3, the best, every curve and the process CPU time. A learning
measurement for the gcrl README ("Third round"), not a speed benchmark.

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
the car has reached), else uniform as the env draws them; evaluation keeps the env's goals.
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
from lamella.agents.offpolicy.plugins import GoalSetter
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


def frontier_goals(
    env: GMazeGoalDubins, params: GMazeParams, probability: float, grid: int = 20
) -> GoalSetter:
    """Training goals in rarely visited cells (with ``probability``), else uniform in [-1, 1]^2.

    State: ``{"goal": float32 (num_envs, 2), "visits": float32 (grid, grid)}``; every stored
    step's achieved goal adds one visit to its cell.
    """
    cell = 2.0 / grid

    def draw(key: jax.Array, visits: jax.Array, num_envs: int) -> jax.Array:
        k_mix, k_cell, k_offset, k_uniform = jax.random.split(key, 4)
        counts = visits.reshape(-1)
        logits = jnp.where(counts > 0, -jnp.log(jnp.maximum(counts, 1.0)), -jnp.inf)
        logits = jnp.where((counts > 0).any(), logits, 0.0)
        index = jax.random.categorical(k_cell, logits, shape=(num_envs,))
        corner = jnp.stack([index // grid, index % grid], -1) * cell - 1.0
        frontier = corner + jax.random.uniform(k_offset, (num_envs, 2)) * cell
        uniform = jax.random.uniform(k_uniform, (num_envs, 2), minval=-1.0, maxval=1.0)
        return jnp.where(jax.random.uniform(k_mix, (num_envs, 1)) < probability, frontier, uniform)

    def init(key: jax.Array, obs: Any) -> dict[str, jax.Array]:
        visits = jnp.zeros((grid, grid), jnp.float32)
        return {"goal": draw(key, visits, obs["desired_goal"].shape[0]), "visits": visits}

    def reset(key: jax.Array, state: Any, obs: Any, started: jax.Array) -> tuple[Any, Any]:
        fresh = draw(key, state["visits"], obs["desired_goal"].shape[0])
        goal = jnp.where(started[:, None], fresh, state["goal"])
        return {**obs, "desired_goal": goal}, {**state, "goal": goal}

    def step(
        key: jax.Array, state: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> Any:
        achieved, goal = obs["achieved_goal"], state["goal"]
        cells = jnp.clip(((achieved + 1.0) / cell).astype(jnp.int32), 0, grid - 1)
        visits = state["visits"].at[cells[:, 0], cells[:, 1]].add(1.0)
        reward = env.compute_reward(achieved, goal, params).astype(reward.dtype)
        success = env.is_success(achieved, goal, params)
        terminated = success & params.terminate_on_success
        info = {**info, "is_success": success}
        return {**obs, "desired_goal": goal}, reward, terminated, truncated, info, {**state, "visits": visits}

    return GoalSetter(init, reset, step)


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
    setter = None if args.frontier is None else frontier_goals(env, params, args.frontier)
    runner = make_offpolicy_runner(config, setter, env=env, env_params=params)

    cpu, wall = time.process_time(), time.time()
    curves = np.asarray(learning_curves(runner, args.seeds, "success"))
    cpu, wall = time.process_time() - cpu, time.time() - wall
    report = {
        "algo": args.algo,
        "heading": args.heading,
        "frontier": args.frontier,
        "overrides": overrides,
        "steps": args.steps,
        "last": curves[:, -1].round(3).tolist(),
        "mean_last_3": curves[:, -3:].mean(axis=1).round(3).tolist(),
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
