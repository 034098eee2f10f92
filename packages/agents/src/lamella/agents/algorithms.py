"""The algorithm table the driver and CLI look algorithms up in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lamella.agents.es import ESConfig, make_es_runner
from lamella.agents.ppo import PPOConfig, make_ppo_runner
from lamella.agents.runner import Runner

__all__ = ["ALGORITHMS", "make_runner"]

#: name -> (config class, runner factory)
ALGORITHMS: dict[str, tuple[type, Callable[[Any], Runner]]] = {
    "ppo": (PPOConfig, make_ppo_runner),
    "es": (ESConfig, make_es_runner),
}


def make_runner(config: Any) -> Runner:
    """The runner of ``config``, whichever algorithm's config it is."""
    for config_class, factory in ALGORITHMS.values():
        if isinstance(config, config_class):
            return factory(config)
    raise TypeError(
        f"make_runner: {type(config).__name__} is not the config of a known algorithm "
        f"({', '.join(c.__name__ for c, _ in ALGORITHMS.values())})."
    )
