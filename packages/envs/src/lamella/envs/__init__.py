"""lamella.envs: functional JAX environments with one contract.

>>> import jax, lamella.envs
>>> env, params = lamella.envs.make("CartPole-v1")
>>> obs, state = env.reset(jax.random.key(0), params)
>>> obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, 0, params)
"""

from typing import TYPE_CHECKING, Any

from lamella.envs.__about__ import __version__

if TYPE_CHECKING:
    from lamella.envs import random, rendering, spaces, struct, wrappers
    from lamella.envs._inputs import check_env_object, check_prng_key
    from lamella.envs.environment import EnvInputError, Environment, Wrapper, episode_done
    from lamella.envs.registry import make, register, registered
    from lamella.envs.rendering import animate

__all__ = [
    "EnvInputError",
    "Environment",
    "Wrapper",
    "__version__",
    "animate",
    "check_env_object",
    "check_prng_key",
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
    from lamella.envs import bsuite, classic_control, goal, maze, minatar, misc, multi_agent
    from lamella.envs.registry import register

    bsuite.register_all(register)
    goal.register_all(register)
    maze.register_all(register)
    minatar.register_all(register)
    misc.register_all(register)
    multi_agent.register_all(register)
    multi_agent.lbf.register_all(register)
    multi_agent.rware.register_all(register)
    multi_agent.mpe.register_all(register)
    multi_agent.smax.register_all(register)

    register("CartPole-v1", classic_control.CartPole)
    register("Pendulum-v1", classic_control.Pendulum)
    register("Acrobot-v1", classic_control.Acrobot)
    register("MountainCar-v0", classic_control.MountainCar)
    register("MountainCarContinuous-v0", classic_control.MountainCarContinuous)


# Everything loads on first use (PEP 562), so `import lamella.envs` (and the `lamella` command,
# which lives here) costs no JAX import; the registry registers the built-in envs before its
# first lookup (registry._ensure_builtin).
_ATTRIBUTES = {
    "EnvInputError": "lamella.envs.environment",
    "Environment": "lamella.envs.environment",
    "Wrapper": "lamella.envs.environment",
    "episode_done": "lamella.envs.environment",
    "make": "lamella.envs.registry",
    "register": "lamella.envs.registry",
    "registered": "lamella.envs.registry",
    "animate": "lamella.envs.rendering",
    "check_env_object": "lamella.envs._inputs",
    "check_prng_key": "lamella.envs._inputs",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _ATTRIBUTES:
        value = getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    elif not name.startswith("__"):
        try:  # a sub-package or module: lamella.envs.spaces, lamella.envs.classic_control, ...
            value = importlib.import_module(f"lamella.envs.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"lamella.envs.{name}":
                raise
            raise AttributeError(f"module 'lamella.envs' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'lamella.envs' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
