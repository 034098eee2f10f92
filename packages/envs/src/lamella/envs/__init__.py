"""lamella.envs: functional JAX environments with one contract.

>>> import jax, lamella.envs
>>> env, params = lamella.envs.make("CartPole-v1")
>>> obs, state = env.reset(jax.random.key(0), params)
>>> obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, 0, params)
"""

from lamella.envs import random, rendering, spaces, struct, wrappers
from lamella.envs.__about__ import __version__
from lamella.envs.environment import Environment, Wrapper, episode_done
from lamella.envs.registry import make, register, registered
from lamella.envs.rendering import animate

__all__ = [
    "Environment",
    "Wrapper",
    "__version__",
    "animate",
    "episode_done",
    "make",
    "random",
    "register",
    "registered",
    "rendering",
    "spaces",
    "struct",
    "wrappers",
]


def _register_builtin() -> None:
    from lamella.envs import bsuite, classic_control, goal, minatar, misc, multi_agent

    bsuite.register_all(register)
    goal.register_all(register)
    minatar.register_all(register)
    misc.register_all(register)
    multi_agent.register_all(register)
    multi_agent.lbf.register_all(register)

    register("CartPole-v1", classic_control.CartPole)
    register("Pendulum-v1", classic_control.Pendulum)
    register("Acrobot-v1", classic_control.Acrobot)
    register("MountainCar-v0", classic_control.MountainCar)
    register("MountainCarContinuous-v0", classic_control.MountainCarContinuous)


_register_builtin()
