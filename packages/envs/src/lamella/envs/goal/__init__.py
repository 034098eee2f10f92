"""Goal-conditioned environments: dict observations ``observation / achieved_goal /
desired_goal``, a pure ``compute_reward(achieved_goal, desired_goal, params)`` and
``info["is_success"]``. Use them without auto-reset (``make(id, autoreset=False)`` and
``env.reset_done``), as goal-conditioned loops do."""

import functools
from collections.abc import Callable
from typing import Any

from lamella.envs.goal.gmaze import (
    DEFAULT_WALLS,
    GMazeDubins,
    GMazeGoalDubins,
    GMazeParams,
    GMazeState,
    dubins_move,
    goal_distance,
)
from lamella.envs.goal.point_robot import PointRobotGoal, PointRobotGoalParams, PointRobotGoalState
from lamella.envs.goal.wrapper import GoalConditioned, GoalConditionedState

__all__ = [
    "DEFAULT_WALLS",
    "GMazeDubins",
    "GMazeGoalDubins",
    "GMazeParams",
    "GMazeState",
    "GoalConditioned",
    "GoalConditionedState",
    "PointRobotGoal",
    "PointRobotGoalParams",
    "PointRobotGoalState",
    "dubins_move",
    "goal_distance",
    "register_all",
]


def register_all(register: Callable[..., Any]) -> None:
    register("GMazeDubins-v0", GMazeDubins)
    register("GMazeGoalDubins-v0", GMazeGoalDubins)
    # gym-gmazes' envs after ``env.set_walls()`` (its three-wall maze).
    register("GMazeDubinsWalls-v0", functools.partial(GMazeDubins, walls=DEFAULT_WALLS))
    register("GMazeGoalDubinsWalls-v0", functools.partial(GMazeGoalDubins, walls=DEFAULT_WALLS))
    register("PointRobotGoal-v0", PointRobotGoal)
