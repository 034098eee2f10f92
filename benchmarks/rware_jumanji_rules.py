"""Not a timing: lamella's `collisions="terminate"` RWARE rule against Jumanji's RobotWarehouse.

    hatch run bench-marl:python benchmarks/rware_jumanji_rules.py [--steps 3000]

Jumanji is a benchmark-only dependency (the `bench-marl` environment), so this cross-check lives
beside the throughput benchmark instead of in the test suite. It plays Jumanji's tiny warehouse
with 4 agents under random actions (half of them FORWARD, so agents meet), copies each state
into lamella (`RobotWarehouse("tiny", 4, collisions="terminate")`), steps both with the same
actions and compares termination (Jumanji's collision), positions, headings and whether each
agent carries a shelf. After a collision Jumanji is reset.

Steps are left out (and counted) where Jumanji's NOOP drops a carried shelf: Jumanji's step sends
NOOP, and a FORWARD its action mask cancels, down the same branch as TOGGLE_LOAD, so a carrying
agent that does nothing off the highways puts its shelf down. lamella keeps rware's NOOP.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.multi_agent.rware import RobotWarehouse, RobotWarehouseState

N = 4
# Jumanji's headings are UP, RIGHT, DOWN, LEFT; lamella's (rware's) UP, DOWN, LEFT, RIGHT.
JUMANJI_TO_LAMELLA = np.array([0, 3, 1, 2])
_STEP = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])


def to_lamella(state: object) -> RobotWarehouseState:
    """lamella's state for Jumanji's (its `x` is the row, `y` the column; grid channel 0 shelves)."""
    grid = np.asarray(state.grid)
    x, y = np.asarray(state.agents.position.x), np.asarray(state.agents.position.y)
    carrying = np.asarray(state.agents.is_carrying).astype(bool)
    shelves = grid[0].copy()
    carried = np.where(carrying, shelves[x, y], 0)
    shelves[x[carrying], y[carrying]] = 0
    return RobotWarehouseState(
        agent_positions=jnp.asarray(np.stack([x, y], -1), jnp.int32),
        agent_directions=jnp.asarray(JUMANJI_TO_LAMELLA[np.asarray(state.agents.direction)], jnp.int32),
        carried_shelves=jnp.asarray(carried, jnp.int32),
        has_delivered=jnp.zeros(N, bool),
        shelf_grid=jnp.asarray(shelves, jnp.int32),
        request_queue=jnp.asarray(np.asarray(state.request_queue) + 1, jnp.int32),
        inactive_steps=jnp.zeros((), jnp.int32),
        time=jnp.zeros((), jnp.int32),
    )


def noop_drop(env: RobotWarehouse, state: RobotWarehouseState, actions: np.ndarray) -> bool:
    """Whether Jumanji's NOOP-drops-the-shelf branch fires for some agent on this step."""
    position, carried = np.asarray(state.agent_positions), np.asarray(state.carried_shelves)
    target = np.clip(position + _STEP[np.asarray(state.agent_directions)], 0, [env.rows - 1, env.cols - 1])
    shelves = np.asarray(state.shelf_grid).copy()
    shelves[position[carried > 0, 0], position[carried > 0, 1]] = carried[carried > 0]
    masked = (actions == 1) & (carried > 0) & (shelves[target[:, 0], target[:, 1]] > 0)
    masked &= np.any(target != position, 1)
    off_highway = ~env.highway[position[:, 0], position[:, 1]]
    return bool(np.any(((actions == 0) | masked) & (carried > 0) & off_highway))


def main() -> None:
    from jumanji.environments import RobotWarehouse as JumanjiWarehouse
    from jumanji.environments.routing.robot_warehouse.generator import RandomGenerator

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    generator = RandomGenerator(
        shelf_rows=1, shelf_columns=3, column_height=8, num_agents=N, sensor_range=1, request_queue_size=N
    )
    jumanji = JumanjiWarehouse(generator, time_limit=500)
    env = RobotWarehouse("tiny", N, collisions="terminate")
    jumanji_step, jumanji_reset = jax.jit(jumanji.step), jax.jit(jumanji.reset)
    step = jax.jit(env.step_with_draws)
    rng, key = np.random.default_rng(0), jax.random.key(0)
    state, _ = jumanji_reset(key)
    counts = {"steps": 0, "compared": 0, "collisions": 0, "noop drops left out": 0, "mismatches": 0}
    for _ in range(args.steps):
        ours = to_lamella(state)
        actions = np.where(rng.random(N) < 0.5, 1, rng.integers(0, 5, N))
        next_state, timestep = jumanji_step(state, jnp.asarray(actions, jnp.int32))
        collided = bool(timestep.last()) and int(next_state.step_count) < 500
        out = step(ours, jnp.asarray(actions, jnp.int32), env.default_params, jnp.full(2, 0.5))
        counts["steps"] += 1
        if noop_drop(env, ours, actions):
            counts["noop drops left out"] += 1
        else:
            counts["compared"] += 1
            counts["collisions"] += collided
            same = bool(np.asarray(out[3])[0]) == collided
            if not collided:
                x, y = np.asarray(next_state.agents.position.x), np.asarray(next_state.agents.position.y)
                headings = JUMANJI_TO_LAMELLA[np.asarray(next_state.agents.direction)]
                same &= np.array_equal(np.asarray(out[1].agent_positions), np.stack([x, y], -1))
                same &= np.array_equal(np.asarray(out[1].agent_directions), headings)
                same &= np.array_equal(
                    np.asarray(out[1].carried_shelves) > 0, np.asarray(next_state.agents.is_carrying) > 0
                )
            counts["mismatches"] += int(not same)
        if bool(timestep.last()):
            key, sub = jax.random.split(key)
            state, _ = jumanji_reset(sub)
        else:
            state = next_state
    print(counts)


if __name__ == "__main__":
    main()
