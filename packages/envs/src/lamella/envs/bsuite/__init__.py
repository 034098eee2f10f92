"""bsuite's diagnostic environments in JAX (Osband et al. 2020, "Behaviour Suite for RL").

Each env follows the ``bsuite`` package's dynamics, observations and rewards;
bsuite episodes end with discount 0, which lamella reports as ``terminated``
(``truncated`` is never set). Registered as ``<Name>-bsuite``.
"""

from collections.abc import Callable
from typing import Any

from lamella.envs.bsuite.memory_chain import MemoryChain, MemoryChainParams, MemoryChainState

__all__ = [
    "MemoryChain",
    "MemoryChainParams",
    "MemoryChainState",
    "register_all",
]


def register_all(register: Callable[..., Any]) -> None:
    """Register every bsuite env with ``register(env_id, factory)``."""
    register("MemoryChain-bsuite", MemoryChain)
