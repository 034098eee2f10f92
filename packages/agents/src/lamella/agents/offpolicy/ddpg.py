"""DDPG (Lillicrap et al. 2016): one critic, a deterministic actor, Gaussian exploration noise.

The TD3 core (:func:`~lamella.agents.offpolicy.td3.make_deterministic_actor_critic`) with one
critic, no target policy smoothing and an actor update at every step.
"""

from __future__ import annotations

import dataclasses

from lamella.agents.devices import DeviceAxis
from lamella.agents.offpolicy.td3 import make_deterministic_actor_critic
from lamella.agents.protocol import Agent
from lamella.envs import spaces

__all__ = ["DDPGConfig", "make_ddpg"]


@dataclasses.dataclass(frozen=True)
class DDPGConfig:
    """DDPG's learning settings (fields as in :class:`~lamella.agents.offpolicy.td3.TD3Config`)."""

    gamma: float = 0.99
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    exploration_noise: float = 0.1

    # What makes the shared core DDPG rather than TD3 (not settable: that would be TD3).
    @property
    def num_critics(self) -> int:
        return 1

    @property
    def policy_noise(self) -> float:
        return 0.0

    @property
    def noise_clip(self) -> float:
        return 0.0

    @property
    def policy_frequency(self) -> int:
        return 1


def make_ddpg(
    config: DDPGConfig,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """DDPG as an Agent for a 1-D Box action space (``devices``: see
    :func:`~lamella.agents.offpolicy.td3.make_deterministic_actor_critic`)."""
    return make_deterministic_actor_critic(config, observation_space, action_space, devices)
