"""bsuite's diagnostic environments in JAX (Osband et al. 2020, "Behaviour Suite for RL").

Each env follows the ``bsuite`` package's dynamics, observations and rewards;
bsuite episodes end with discount 0, which lamella reports as ``terminated``
(``truncated`` is never set). Registered as ``<Name>-bsuite``. MNISTBandit is
not included: see ``packages/envs/docs/bsuite.md``.
"""

from collections.abc import Callable
from typing import Any

from lamella.envs.bsuite.bandit import SimpleBandit, SimpleBanditParams, SimpleBanditState
from lamella.envs.bsuite.catch import Catch, CatchParams, CatchState
from lamella.envs.bsuite.deep_sea import DeepSea, DeepSeaParams, DeepSeaState
from lamella.envs.bsuite.discounting_chain import (
    REWARD_TIMESTEPS,
    DiscountingChain,
    DiscountingChainParams,
    DiscountingChainState,
)
from lamella.envs.bsuite.memory_chain import MemoryChain, MemoryChainParams, MemoryChainState
from lamella.envs.bsuite.umbrella_chain import UmbrellaChain, UmbrellaChainParams, UmbrellaChainState

__all__ = [
    "REWARD_TIMESTEPS",
    "Catch",
    "CatchParams",
    "CatchState",
    "DeepSea",
    "DeepSeaParams",
    "DeepSeaState",
    "DiscountingChain",
    "DiscountingChainParams",
    "DiscountingChainState",
    "MemoryChain",
    "MemoryChainParams",
    "MemoryChainState",
    "SimpleBandit",
    "SimpleBanditParams",
    "SimpleBanditState",
    "UmbrellaChain",
    "UmbrellaChainParams",
    "UmbrellaChainState",
    "register_all",
]


def register_all(register: Callable[..., Any]) -> None:
    """Register every bsuite env with ``register(env_id, factory)``."""
    register("Catch-bsuite", Catch)
    register("DeepSea-bsuite", DeepSea)
    register("MemoryChain-bsuite", MemoryChain)
    register("UmbrellaChain-bsuite", UmbrellaChain)
    register("DiscountingChain-bsuite", DiscountingChain)
    register("SimpleBandit-bsuite", SimpleBandit)
