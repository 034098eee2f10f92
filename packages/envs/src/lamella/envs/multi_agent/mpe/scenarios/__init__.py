"""One module per mpe2 scenario; each ``make(**sizes)`` returns a :class:`~lamella.envs.multi_agent.mpe.core.Scenario`."""

from __future__ import annotations

from collections.abc import Callable

from lamella.envs.multi_agent.mpe.core import Scenario
from lamella.envs.multi_agent.mpe.scenarios import (
    collect_treasure,
    simple,
    simple_adversary,
    simple_crypto,
    simple_formation,
    simple_line,
    simple_push,
    simple_reference,
    simple_speaker_listener,
    simple_spread,
    simple_tag,
    simple_world_comm,
)

__all__ = ["SCENARIOS"]

SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "simple": simple.make,
    "simple_spread": simple_spread.make,
    "simple_speaker_listener": simple_speaker_listener.make,
    "simple_tag": simple_tag.make,
    "simple_adversary": simple_adversary.make,
    "simple_reference": simple_reference.make,
    "simple_push": simple_push.make,
    "simple_crypto": simple_crypto.make,
    "simple_world_comm": simple_world_comm.make,
    "simple_formation": simple_formation.make,
    "simple_line": simple_line.make,
    "collect_treasure": collect_treasure.make,
}
