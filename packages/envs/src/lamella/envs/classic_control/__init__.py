"""Classic control: CartPole, Pendulum, Acrobot, MountainCar (discrete and continuous)."""

from lamella.envs.classic_control.acrobot import Acrobot, AcrobotParams, AcrobotState
from lamella.envs.classic_control.cartpole import CartPole, CartPoleParams, CartPoleState
from lamella.envs.classic_control.continuous_mountain_car import (
    MountainCarContinuous,
    MountainCarContinuousParams,
    MountainCarContinuousState,
)
from lamella.envs.classic_control.mountain_car import MountainCar, MountainCarParams, MountainCarState
from lamella.envs.classic_control.pendulum import Pendulum, PendulumParams, PendulumState

__all__ = [
    "Acrobot",
    "AcrobotParams",
    "AcrobotState",
    "CartPole",
    "CartPoleParams",
    "CartPoleState",
    "MountainCar",
    "MountainCarContinuous",
    "MountainCarContinuousParams",
    "MountainCarContinuousState",
    "MountainCarParams",
    "MountainCarState",
    "Pendulum",
    "PendulumParams",
    "PendulumState",
]
