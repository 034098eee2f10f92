"""A point robot that must reach a 2-D goal: the smallest goal-conditioned task."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs.environment import Environment, StepOutput

__all__ = ["PointRobotGoal", "PointRobotGoalParams", "PointRobotGoalState"]


class PointRobotGoalState(struct.PyTreeNode):
    position: jax.Array  # float32 (2,)
    goal: jax.Array  # float32 (2,)
    time: jax.Array  # int32 ()


class PointRobotGoalParams(struct.PyTreeNode):
    # displacement per step at |action| = 1 on an axis; finite (inf made positions NaN)
    step_size: float = struct.field(default=0.1, finite=True)
    distance_threshold: float = struct.field(default=0.1, above=0.0, finite=True)  # success radius
    terminate_on_success: bool = True
    max_steps_in_episode: int = struct.field(default=50, bounds=(1, None))


class PointRobotGoal(Environment[PointRobotGoalState, PointRobotGoalParams]):
    """Move a point in [-1, 1]^2 to a goal.

    Observation: dict of float32 arrays ``observation`` (2,) = position, ``achieved_goal`` (2,)
    = position, ``desired_goal`` (2,) = goal.
    Action: Box(-1, 1, (2,)) float32, clipped; position += ``step_size`` * action, clipped to
    the square.
    Reset: position and goal independently uniform in [-1, 1]^2.
    Reward: sparse, -1.0 while the goal is farther than ``distance_threshold`` (0.1), else 0.0.
    ``info["is_success"]``: distance < ``distance_threshold``.
    Terminated: on success (when ``terminate_on_success``). Truncated: after 50 steps.
    """

    stochastic_step = False

    @property
    def default_params(self) -> PointRobotGoalParams:
        return PointRobotGoalParams()

    def compute_reward(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: Any = None
    ) -> jax.Array:
        threshold = (self.default_params if params is None else params).distance_threshold
        distance = jnp.linalg.norm(achieved_goal - desired_goal, axis=-1)
        return -(distance > threshold).astype(jnp.float32)

    def is_success(self, achieved_goal: jax.Array, desired_goal: jax.Array, params: Any = None) -> jax.Array:
        threshold = (self.default_params if params is None else params).distance_threshold
        return jnp.linalg.norm(achieved_goal - desired_goal, axis=-1) < threshold

    def _obs(self, state: PointRobotGoalState) -> dict[str, jax.Array]:
        return {"observation": state.position, "achieved_goal": state.position, "desired_goal": state.goal}

    def reset_env(
        self, key: jax.Array, params: PointRobotGoalParams
    ) -> tuple[dict[str, jax.Array], PointRobotGoalState]:
        values = fast_random.uniform(key, (4,), -1.0, 1.0)
        state = PointRobotGoalState(values[:2], values[2:], jnp.zeros((), jnp.int32))
        return self._obs(state), state

    def step_env(
        self, key: jax.Array, state: PointRobotGoalState, action: Any, params: PointRobotGoalParams
    ) -> StepOutput:
        position = jnp.clip(state.position + params.step_size * jnp.clip(action, -1.0, 1.0), -1.0, 1.0)
        state = PointRobotGoalState(position, state.goal, state.time + 1)
        success = self.is_success(position, state.goal, params)
        terminated = success & jnp.asarray(params.terminate_on_success, jnp.bool_)
        truncated = state.time >= params.max_steps_in_episode
        reward = self.compute_reward(position, state.goal, params)
        return self._obs(state), state, reward, terminated, truncated, {"is_success": success}

    def observation_space(self, params: Any = None) -> spaces.Dict:
        box = spaces.Box(-1.0, 1.0, (2,), jnp.float32)
        return spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})

    def action_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def render(self, state: PointRobotGoalState, params: Any = None) -> jax.Array:
        params = self.default_params if params is None else params
        size = 128
        to_px = lambda v: (v + 1.0) * 0.5 * (size - 1)  # noqa: E731
        to_py = lambda v: (1.0 - (v + 1.0) * 0.5) * (size - 1)  # noqa: E731
        frame = rendering.canvas(size, size, (245, 245, 245))
        radius = params.distance_threshold * 0.5 * size
        frame = rendering.fill_circle(
            frame, to_px(state.goal[0]), to_py(state.goal[1]), radius, (80, 200, 80)
        )
        return rendering.fill_circle(
            frame, to_px(state.position[0]), to_py(state.position[1]), 4.0, (40, 90, 220)
        )
