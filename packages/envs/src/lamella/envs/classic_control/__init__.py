"""Classic control: CartPole, Pendulum, Acrobot, MountainCar (discrete and continuous)."""

from lamella.envs.classic_control.cartpole import CartPole, CartPoleParams, CartPoleState

__all__ = ["CartPole", "CartPoleParams", "CartPoleState"]
