"""Turn an environment whose state has something to reach into a goal-conditioned one."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import EnvInputError, Environment, StepOutput, Wrapper

__all__ = ["GoalConditioned", "GoalConditionedState"]


class GoalConditionedState(struct.PyTreeNode):
    env_state: Any
    goal: jax.Array  # float32 (goal_dim,)


class GoalConditioned(Wrapper):
    """Goal-conditioned view of ``env``: dict observations, sparse goal reward, success flag.

    Args:
        env: a bare env (no auto-reset; the goal loop calls ``reset_done``).
        achieved_goal: ``f(bare_state) -> (goal_dim,)`` float32, the goal the state achieves.
        goal_low, goal_high: the box desired goals are drawn from (uniformly) at reset.
        distance_threshold: success when ``||achieved - desired|| < distance_threshold``.
        terminate_on_success: end the episode on success (on top of the env's own termination).

    Example: ``GoalConditioned(CartPole(), lambda s: s.x[None], [-1.0], [1.0], 0.1)`` asks the
    cart to visit a position. The env's own reward is kept in ``info["env_reward"]``.
    """

    wraps_state = True

    def __init__(
        self,
        env: Environment[Any, Any],
        achieved_goal: Callable[[Any], jax.Array],
        goal_low: Any,
        goal_high: Any,
        distance_threshold: float = 0.1,
        terminate_on_success: bool = True,
    ):
        super().__init__(env)
        self.goal_low = np.asarray(goal_low, np.float32).reshape(-1)
        self.goal_high = np.asarray(goal_high, np.float32).reshape(-1)
        if self.goal_low.shape != self.goal_high.shape or np.any(self.goal_low > self.goal_high):
            raise ValueError(
                f"GoalConditioned: goal_low {self.goal_low} and goal_high {self.goal_high} must have the "
                "same shape with low <= high."
            )
        self.achieved_goal_fn = achieved_goal
        threshold = float(distance_threshold)
        if not (0.0 < threshold < math.inf):  # NaN fails too
            raise EnvInputError(
                f"GoalConditioned: distance_threshold must be a finite float > 0 (the success radius), "
                f"got {distance_threshold!r}; <= 0 or NaN makes success impossible, inf makes every "
                "state a success. Pass e.g. distance_threshold=0.1."
            )
        self.distance_threshold = threshold
        self.terminate_on_success = bool(terminate_on_success)

    def compute_reward(
        self, achieved_goal: jax.Array, desired_goal: jax.Array, params: Any = None
    ) -> jax.Array:
        distance = jnp.linalg.norm(achieved_goal - desired_goal, axis=-1)
        return -(distance > self.distance_threshold).astype(jnp.float32)

    def is_success(self, achieved_goal: jax.Array, desired_goal: jax.Array, params: Any = None) -> jax.Array:
        return jnp.linalg.norm(achieved_goal - desired_goal, axis=-1) < self.distance_threshold

    def _obs(self, obs: Any, env_state: Any, goal: jax.Array) -> dict[str, jax.Array]:
        achieved = jnp.asarray(self.achieved_goal_fn(self.env.unwrapped_state(env_state)), jnp.float32)
        if achieved.shape != self.goal_low.shape:
            raise ValueError(
                f"GoalConditioned: achieved_goal returned shape {achieved.shape}, but goals have shape "
                f"{self.goal_low.shape} (from goal_low/goal_high)."
            )
        flat = jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(obs)])
        return {"observation": flat, "achieved_goal": achieved, "desired_goal": goal}

    def reset_env(self, key: jax.Array, params: Any) -> tuple[dict[str, jax.Array], GoalConditionedState]:
        obs, env_state = self.env.reset_env(key, params)
        # A separate stream of the same key keeps the goal independent of the env's own reset.
        goal = fast_random.uniform(key, self.goal_low.shape, self.goal_low, self.goal_high, stream=7919)
        return self._obs(obs, env_state, goal), GoalConditionedState(env_state, goal)

    def step_env(self, key: jax.Array, state: GoalConditionedState, action: Any, params: Any) -> StepOutput:
        obs, env_state, env_reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        goal_obs = self._obs(obs, env_state, state.goal)
        success = self.is_success(goal_obs["achieved_goal"], state.goal)
        reward = self.compute_reward(goal_obs["achieved_goal"], state.goal)
        terminated = terminated | (success & self.terminate_on_success)
        info = {**info, "is_success": success, "env_reward": env_reward}
        return goal_obs, GoalConditionedState(env_state, state.goal), reward, terminated, truncated, info

    def observation_space(self, params: Any = None) -> spaces.Dict:
        inner = self.env.observation_space(params)
        leaves = list(inner.spaces.values()) if isinstance(inner, spaces.Dict) else [inner]
        low = np.concatenate([np.ravel(s.low) for s in leaves]).astype(np.float32)  # type: ignore[attr-defined]
        high = np.concatenate([np.ravel(s.high) for s in leaves]).astype(np.float32)  # type: ignore[attr-defined]
        goal_box = spaces.Box(self.goal_low, self.goal_high, self.goal_low.shape, jnp.float32)
        # The achieved goal can leave the goal box (e.g. a cart beyond the sampled range).
        achieved_box = spaces.Box(-np.inf, np.inf, self.goal_low.shape, jnp.float32)
        return spaces.Dict(
            {
                "observation": spaces.Box(low, high, low.shape, jnp.float32),
                "achieved_goal": achieved_box,
                "desired_goal": goal_box,
            }
        )
