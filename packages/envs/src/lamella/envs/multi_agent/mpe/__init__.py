"""Multi-agent particle environments (MPE) with the physics and scenarios of ``mpe2==1.1.1``.

Registered ids (:func:`register_all`): ``MPE-<scenario>-v<n>``, where ``<scenario>_v<n>`` is the
mpe2 module (``mpe2.simple_spread_v3`` -> ``MPE-simple_spread-v3``), with mpe2's keywords as
``make`` overrides::

    MPE-simple-v3                   MPE-simple_adversary-v3
    MPE-simple_spread-v3            MPE-simple_reference-v3
    MPE-simple_speaker_listener-v4  MPE-simple_push-v3
    MPE-simple_tag-v3               MPE-simple_crypto-v3
    MPE-simple_formation-v1         MPE-simple_world_comm-v3
    MPE-simple_line-v1              MPE-collect_treasure-v1

Every id takes ``continuous_actions``, ``max_cycles`` and ``benchmark_data`` (mpe2's per-agent
benchmark data as ``info["benchmark_data"]``); simple_spread and simple_reference take
``local_ratio``; simple_spread ``N``, simple_adversary ``N``, simple_tag ``num_good``,
``num_adversaries``, ``num_obstacles``, simple_world_comm those and ``num_food``,
``num_forests``, simple_formation and simple_line ``N``, collect_treasure ``num_collectors``,
``num_deposits``, ``num_treasures``: ``make("MPE-simple_spread-v3", N=5, continuous_actions=True)``.
simple_spread, simple_formation and simple_line take ``terminate_on_success``; simple_spread
``curriculum`` (its stage is the params' ``curriculum_stage``); simple_spread, simple_tag and
simple_adversary ``num_agent_neighbors`` and ``num_landmark_neighbors``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from lamella.envs.multi_agent.mpe.core import Scenario
from lamella.envs.multi_agent.mpe.env import MultiParticleEnv
from lamella.envs.multi_agent.mpe.scenarios import SCENARIOS
from lamella.envs.multi_agent.mpe.types import (
    MultiParticleCurriculumParams,
    MultiParticleParams,
    MultiParticleSharedParams,
    MultiParticleState,
)

__all__ = [
    "SCENARIOS",
    "MultiParticleCurriculumParams",
    "MultiParticleEnv",
    "MultiParticleParams",
    "MultiParticleSharedParams",
    "MultiParticleState",
    "Scenario",
    "env_ids",
    "register_all",
]


def _factory(scenario: str) -> Callable[..., MultiParticleEnv]:
    """A constructor with mpe2's keywords for ``scenario`` spelled out, so ``make`` routes them."""
    sizes = inspect.signature(SCENARIOS[scenario]).parameters
    shared = SCENARIOS[scenario]().global_reward is not None

    def factory(
        continuous_actions: bool = False, max_cycles: int = 25, benchmark_data: bool = False, **kwargs: Any
    ) -> MultiParticleEnv:
        return MultiParticleEnv(
            scenario,
            continuous_actions=continuous_actions,
            max_cycles=max_cycles,
            benchmark_data=benchmark_data,
            **kwargs,
        )

    params = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
        for name, p in sizes.items()
    ]
    params += [
        inspect.Parameter("continuous_actions", inspect.Parameter.KEYWORD_ONLY, default=False),
        inspect.Parameter("max_cycles", inspect.Parameter.KEYWORD_ONLY, default=25),
        inspect.Parameter("benchmark_data", inspect.Parameter.KEYWORD_ONLY, default=False),
    ]
    if shared:
        params.append(inspect.Parameter("local_ratio", inspect.Parameter.KEYWORD_ONLY, default=0.5))
    factory.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    factory.__name__ = scenario
    return factory


@functools.cache
def _factories() -> dict[str, Callable[..., MultiParticleEnv]]:
    out = {}
    for scenario, make_scenario in SCENARIOS.items():
        out[f"MPE-{scenario}-v{make_scenario().version}"] = _factory(scenario)
    return out


def env_ids() -> list[str]:
    """The MPE ids, in the order of :data:`SCENARIOS`."""
    return list(_factories())


def register_all(register: Callable[..., Any]) -> None:
    """Register every ``MPE-...`` id with ``register`` (``lamella.envs.register``)."""
    for env_id, factory in _factories().items():
        register(env_id, factory)
