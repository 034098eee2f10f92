"""Continuous Dubins-car mazes, after xpag's gym-gmazes (GMazeDubins, GMazeGoalDubins)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.environment import Environment, StepOutput

__all__ = [
    "DEFAULT_WALLS",
    "GMazeDubins",
    "GMazeGoalDubins",
    "GMazeParams",
    "GMazeState",
    "dubins_move",
    "goal_distance",
]

# The three wall segments that gym-gmazes' ``set_walls()`` installs, ((x0, y0), (x1, y1)) each.
# gym-gmazes' registered envs start with no walls (``env.walls = []``) until ``set_walls`` is
# called, and so do lamella's: pass ``walls=DEFAULT_WALLS`` to ``make`` for this maze.
DEFAULT_WALLS = np.array(
    [
        [[0.5, -0.5], [0.5, 1.01]],
        [[-0.5, -0.5], [-0.5, 1.01]],
        [[0.0, -1.01], [0.0, 0.5]],
    ],
    dtype=np.float32,
)


class GMazeState(struct.PyTreeNode):
    position: jax.Array  # float32 (3,): x, y in [-1, 1], heading in [-1, 1) (times pi radians)
    goal: jax.Array  # float32 (2,): desired (x, y); unused by GMazeDubins
    time: jax.Array  # int32 (): steps taken in this episode


class GMazeParams(struct.PyTreeNode):
    walls: Any = struct.field(
        default_factory=lambda: jnp.zeros((0, 2, 2), jnp.float32)
    )  # float32 (num_walls, 2, 2)
    start: Any = struct.field(default_factory=lambda: jnp.asarray([-1.0, 0.0, 0.0], jnp.float32))  # (3,)
    # Finite (inf made positions NaN); 0 and negative values are well-defined dynamics (a car
    # that only turns, one that reverses, mirrored steering), so they are taken.
    speed: float = struct.field(default=1.0 / 20.0, finite=True)  # distance per sub-step
    # heading change per sub-step at |action| = 1
    turn_rate: float = struct.field(default=1.0 / 10.0, finite=True)
    # success radius (goal env); <= 0 or NaN would make success impossible, inf every state one
    distance_threshold: float = struct.field(default=0.1, above=0.0, finite=True)
    terminate_on_success: bool = True  # goal env: a reached goal ends the episode (as gym-gmazes)
    max_steps_in_episode: int = struct.field(default=70, bounds=(1, None))


def _segments_cross(a: jax.Array, b: jax.Array, walls: jax.Array) -> jax.Array:
    """Whether segment a->b properly crosses any wall (strict interior intersection, as gym-gmazes)."""
    x1, y1, x2, y2 = a[0], a[1], b[0], b[1]
    x3, y3 = walls[:, 0, 0], walls[:, 0, 1]
    x4, y4 = walls[:, 1, 0], walls[:, 1, 1]
    denom = (x4 - x3) * (y1 - y2) - (x1 - x2) * (y4 - y3)
    safe = jnp.where(denom == 0, 1.0, denom)
    t_move = ((y3 - y4) * (x1 - x3) + (x4 - x3) * (y1 - y3)) / safe
    t_wall = ((y1 - y2) * (x1 - x3) + (x2 - x1) * (y1 - y3)) / safe
    crosses = (denom != 0) & (t_move > 0) & (t_move < 1) & (t_wall > 0) & (t_wall < 1)
    return jnp.any(crosses)


def dubins_move(
    position: jax.Array, action: jax.Array, params: GMazeParams, frame_skip: int = 2
) -> jax.Array:
    """``frame_skip`` sub-steps of the car: advance along the heading, clip to the square, turn;
    a sub-step whose segment crosses a wall is cancelled (the car stays where it was).

    The steering is clipped to the action space [-1, 1] first. gym-gmazes does not clip (a
    steering of 3 turns three times as fast); lamella clips, as its Pendulum and
    MountainCarContinuous do (and gymnasium's), so an unbounded policy (Gaussian exploration
    noise) cannot turn faster than the action space allows. Within [-1, 1] the two agree.
    """
    steer = jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
    for _ in range(frame_skip):
        heading = position[2]
        xy = jnp.clip(
            position[:2] + params.speed * jnp.stack([jnp.cos(jnp.pi * heading), jnp.sin(jnp.pi * heading)]),
            -1.0,
            1.0,
        )
        new_heading = jnp.mod(heading + steer * params.turn_rate + 1.0, 2.0) - 1.0
        moved = jnp.concatenate([xy, new_heading[None]])
        position = jnp.where(_segments_cross(position, moved, params.walls), position, moved)
    return position


def goal_distance(achieved_goal: jax.Array, desired_goal: jax.Array) -> jax.Array:
    return jnp.linalg.norm(achieved_goal[..., :2] - desired_goal[..., :2], axis=-1)


def _render_maze(position: jax.Array, goal: jax.Array | None, params: GMazeParams) -> jax.Array:
    size = 160
    to_px = lambda v: (v + 1.0) * 0.5 * (size - 1)  # noqa: E731
    to_py = lambda v: (1.0 - (v + 1.0) * 0.5) * (size - 1)  # noqa: E731
    frame = rendering.canvas(size, size, (245, 245, 245))
    for i in range(params.walls.shape[0]):
        w = params.walls[i]
        frame = rendering.draw_segment(
            frame, to_px(w[0, 0]), to_py(w[0, 1]), to_px(w[1, 0]), to_py(w[1, 1]), 3.0, (20, 20, 20)
        )
    if goal is not None:
        frame = rendering.fill_circle(
            frame, to_px(goal[0]), to_py(goal[1]), params.distance_threshold * 0.5 * size, (80, 200, 80)
        )
    cx, cy = to_px(position[0]), to_py(position[1])
    frame = rendering.fill_circle(frame, cx, cy, 5.0, (40, 90, 220))
    hx = cx + 9.0 * jnp.cos(jnp.pi * position[2])
    hy = cy - 9.0 * jnp.sin(jnp.pi * position[2])
    return rendering.draw_segment(frame, cx, cy, hx, hy, 2.5, (220, 60, 40))


class _WalledMaze:
    """The walls a maze env starts with (its ``default_params.walls``)."""

    def __init__(self, walls: Any = None) -> None:
        self.walls = np.zeros((0, 2, 2), np.float32) if walls is None else np.asarray(walls, np.float32)
        if self.walls.ndim != 3 or self.walls.shape[1:] != (2, 2):
            raise ValueError(
                f"walls must have shape (num_walls, 2, 2) (segments ((x0, y0), (x1, y1))), got {self.walls.shape}."
            )

    @property
    def default_params(self) -> GMazeParams:
        return GMazeParams(walls=jnp.asarray(self.walls))


class GMazeDubins(_WalledMaze, Environment[GMazeState, GMazeParams]):
    """A Dubins car in the square [-1, 1]^2 (gym-gmazes' GMazeDubins-v0).

    Observation: float32 ``(3,)`` = x, y in [-1, 1] and heading in [-1, 1) (radians / pi).
    Action: Box(-1, 1, (1,)) float32: steering; the heading changes by ``turn_rate * action``
    per sub-step (2 sub-steps per step), the car moves ``speed`` along its heading per
    sub-step, positions are clipped to the square, and a sub-step that would cross a wall is
    cancelled (the car keeps its position and heading, so it stays against that wall).
    Walls: none, as gym-gmazes registers the env; ``GMazeDubins(walls=DEFAULT_WALLS)`` (the id
    ``GMazeDubinsWalls-v0``) is the maze gym-gmazes' ``set_walls()`` builds, and
    ``params.walls`` holds any other segments.
    Reward: 1.0 when x > 0.5 and y > 0.5 (gym-gmazes' ``default_reward_fun``), else 0.
    Terminated: never. Truncated: after ``max_steps_in_episode`` (70) steps.
    Reset: the car at ``params.start`` = (-1, 0, 0).
    State: :class:`GMazeState` (position (3,), an unused goal (2,), step count).
    """

    stochastic_step = False

    def reset_env(self, key: jax.Array, params: GMazeParams) -> tuple[jax.Array, GMazeState]:
        state = GMazeState(
            jnp.asarray(params.start, jnp.float32), jnp.zeros(2, jnp.float32), jnp.zeros((), jnp.int32)
        )
        return state.position, state

    def step_env(self, key: jax.Array, state: GMazeState, action: Any, params: GMazeParams) -> StepOutput:
        position = dubins_move(state.position, action, params)
        state = GMazeState(position, state.goal, state.time + 1)
        reward = ((position[0] > 0.5) & (position[1] > 0.5)).astype(jnp.float32)
        truncated = state.time >= params.max_steps_in_episode
        return position, state, reward, jnp.asarray(False), truncated, {}

    def observation_space(self, params: GMazeParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (3,), jnp.float32)

    def action_space(self, params: GMazeParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def render(self, state: GMazeState, params: GMazeParams | None = None) -> jax.Array:
        return _render_maze(state.position, None, self.default_params if params is None else params)


class GMazeGoalDubins(_WalledMaze, Environment[GMazeState, GMazeParams]):
    """The goal-conditioned Dubins car (gym-gmazes' GMazeGoalDubins-v0).

    Observation: dict of float32 arrays
      ``observation`` (3,): x, y, heading as in :class:`GMazeDubins`;
      ``achieved_goal`` (2,): x, y;
      ``desired_goal`` (2,): the goal, uniform in [-1, 1]^2 at reset.
    Action: Box(-1, 1, (1,)) float32 steering, same dynamics and walls as :class:`GMazeDubins`
    (none by default; ``GMazeGoalDubinsWalls-v0`` has gym-gmazes' ``set_walls()`` maze).
    Reward: sparse, ``compute_reward(achieved_goal, desired_goal)`` = -1.0 while the distance
    to the goal is > ``distance_threshold`` (0.1), else 0.0.
    ``info["is_success"]``: distance < ``distance_threshold``.
    Terminated: on success when ``terminate_on_success`` (default, as gym-gmazes).
    Truncated: after ``max_steps_in_episode`` (70) steps.
    State: :class:`GMazeState`.
    """

    stochastic_step = False

    def compute_reward(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: GMazeParams | None = None
    ) -> jax.Array:
        """Pure sparse reward; works on any leading batch shape (HER relabelling calls it)."""
        threshold = (self.default_params if params is None else params).distance_threshold
        return -(goal_distance(achieved_goal, desired_goal) > threshold).astype(jnp.float32)

    def is_success(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: GMazeParams | None = None
    ) -> jax.Array:
        threshold = (self.default_params if params is None else params).distance_threshold
        return goal_distance(achieved_goal, desired_goal) < threshold

    def _obs(self, state: GMazeState) -> dict[str, jax.Array]:
        return {
            "observation": state.position,
            "achieved_goal": state.position[:2],
            "desired_goal": state.goal,
        }

    def reset_env(self, key: jax.Array, params: GMazeParams) -> tuple[dict[str, jax.Array], GMazeState]:
        goal = fast_random.uniform(key, (2,), -1.0, 1.0)
        state = GMazeState(jnp.asarray(params.start, jnp.float32), goal, jnp.zeros((), jnp.int32))
        return self._obs(state), state

    def step_env(self, key: jax.Array, state: GMazeState, action: Any, params: GMazeParams) -> StepOutput:
        position = dubins_move(state.position, action, params)
        state = GMazeState(position, state.goal, state.time + 1)
        success = self.is_success(position[:2], state.goal, params)
        reward = self.compute_reward(position[:2], state.goal, params)
        terminated = success & jnp.asarray(params.terminate_on_success, jnp.bool_)
        truncated = state.time >= params.max_steps_in_episode
        return self._obs(state), state, reward, terminated, truncated, {"is_success": success}

    def observation_space(self, params: GMazeParams | None = None) -> spaces.Dict:
        box = lambda n: spaces.Box(-1.0, 1.0, (n,), jnp.float32)  # noqa: E731
        return spaces.Dict({"observation": box(3), "achieved_goal": box(2), "desired_goal": box(2)})

    def action_space(self, params: GMazeParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def render(self, state: GMazeState, params: GMazeParams | None = None) -> jax.Array:
        return _render_maze(state.position, state.goal, self.default_params if params is None else params)
