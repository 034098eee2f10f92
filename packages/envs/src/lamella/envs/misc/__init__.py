"""gymnax's "misc" environments in JAX on lamella's contract.

Each env follows gymnax's version (gymnax 1.0) in observations, rewards,
params, episode lengths, resets and goal sampling, checked step by step
against gymnax in ``packages/envs/tests/test_misc.py``; randomness is drawn
with :mod:`lamella.envs.random`, so individual draws differ from gymnax's
while their distributions match. Registered under gymnax's ids
(``<Name>-misc``). See ``packages/envs/docs/misc.md``.
"""

from collections.abc import Callable
from typing import Any

from lamella.envs.misc.bernoulli_bandit import BernoulliBandit, BernoulliBanditParams, BernoulliBanditState
from lamella.envs.misc.frozen_lake import FROZEN_LAKE_MAPS, FrozenLake, FrozenLakeParams, FrozenLakeState
from lamella.envs.misc.gaussian_bandit import GaussianBandit, GaussianBanditParams, GaussianBanditState
from lamella.envs.misc.meta_maze import MetaMaze, MetaMazeParams, MetaMazeState, maze_layout
from lamella.envs.misc.point_robot import PointRobot, PointRobotParams, PointRobotState
from lamella.envs.misc.pong import Pong, PongParams, PongState
from lamella.envs.misc.reacher import Reacher, ReacherParams, ReacherState
from lamella.envs.misc.rooms import FOUR_ROOMS_MAP, FourRooms, FourRoomsParams, FourRoomsState
from lamella.envs.misc.swimmer import Swimmer, SwimmerParams, SwimmerState

__all__ = [
    "FOUR_ROOMS_MAP",
    "FROZEN_LAKE_MAPS",
    "BernoulliBandit",
    "BernoulliBanditParams",
    "BernoulliBanditState",
    "FourRooms",
    "FourRoomsParams",
    "FourRoomsState",
    "FrozenLake",
    "FrozenLakeParams",
    "FrozenLakeState",
    "GaussianBandit",
    "GaussianBanditParams",
    "GaussianBanditState",
    "MetaMaze",
    "MetaMazeParams",
    "MetaMazeState",
    "PointRobot",
    "PointRobotParams",
    "PointRobotState",
    "Pong",
    "PongParams",
    "PongState",
    "Reacher",
    "ReacherParams",
    "ReacherState",
    "Swimmer",
    "SwimmerParams",
    "SwimmerState",
    "maze_layout",
    "register_all",
]

MISC_IDS = {
    "FourRooms-misc": FourRooms,
    "MetaMaze-misc": MetaMaze,
    "PointRobot-misc": PointRobot,
    "BernoulliBandit-misc": BernoulliBandit,
    "GaussianBandit-misc": GaussianBandit,
    "Reacher-misc": Reacher,
    "Swimmer-misc": Swimmer,
    "Pong-misc": Pong,
    "FrozenLake-misc": FrozenLake,
}


def register_all(register: Callable[..., Any]) -> None:
    """Register every misc env under gymnax's id with ``register(env_id, factory)``."""
    for env_id, factory in MISC_IDS.items():
        register(env_id, factory)
