"""TQC (Kuznetsov et al. 2020): SAC with distributional critics and truncated mixture targets.

Built on SAC's agent (:func:`~lamella.agents.offpolicy.sac.make_squashed_gaussian_agent`):
only the critic's outputs, its target and loss, and the actor's value differ.

Each of ``num_critics`` critics predicts ``num_quantiles`` quantiles of the return. The target
pools all critics' quantiles at the next state, drops the ``drop_per_critic * num_critics``
largest (control of overestimation) and regresses every critic onto the rest with the
quantile Huber loss. Actor and temperature as in SAC, with Q the mean of all quantiles.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from lamella.agents.devices import DeviceAxis
from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import ContinuousCritic
from lamella.agents.offpolicy.sac import (
    critic_settings,
    make_squashed_gaussian_agent,
    temperature_settings_unused,
)
from lamella.agents.protocol import Agent
from lamella.envs import spaces

__all__ = ["TQCConfig", "make_tqc"]


@dataclasses.dataclass(frozen=True)
class TQCConfig:
    """TQC's learning settings (SAC's, plus the quantile critics').

    Attributes:
        num_critics: distributional critics (5 in the paper; 2 is cheaper and works on small tasks).
        num_quantiles: quantiles per critic (25 in the paper).
        drop_per_critic: top quantiles dropped per critic from the pooled target (2 in the paper).
        Others: as :class:`~lamella.agents.offpolicy.sac.SACConfig` (``reward_bounds`` clips
            every target atom).
    """

    gamma: float = 0.99
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    num_quantiles: int = 25
    drop_per_critic: int = 2
    init_alpha: float = 1.0
    autotune_alpha: bool = True
    target_entropy_scale: float = 1.0
    reward_bounds: tuple[float, float] | None = None
    critic_hidden_sizes: tuple[int, ...] | None = None
    critic_norm: str | None = None

    def unused_settings(self) -> dict[str, str]:
        """As :meth:`~lamella.agents.offpolicy.sac.SACConfig.unused_settings`."""
        return temperature_settings_unused(self)


def make_tqc(
    config: TQCConfig,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """TQC as an Agent for a 1-D Box action space (``devices``: as
    :func:`~lamella.agents.offpolicy.sac.make_sac`'s)."""
    if config.num_critics < 1 or config.num_quantiles < 1:
        raise ValueError("TQC needs num_critics >= 1 and num_quantiles >= 1.")
    num_dropped = config.drop_per_critic * config.num_critics
    if not 0 <= num_dropped < config.num_critics * config.num_quantiles:
        raise ValueError(
            f"TQC: drop_per_critic ({config.drop_per_critic}) must be in [0, num_quantiles) "
            f"({config.num_quantiles})."
        )
    sizes, layer_norm, _ = critic_settings(config)
    critic = ContinuousCritic(sizes, config.activation, config.num_critics, config.num_quantiles, layer_norm)

    def soft_target(
        reward: jax.Array,
        discount: jax.Array,
        next_out: jax.Array,
        next_log_prob: jax.Array,
        alpha: jax.Array,
    ) -> jax.Array:
        return jax.vmap(targets.tqc_target, in_axes=(0, 0, 1, 0, None, None))(
            reward, discount, next_out, next_log_prob, alpha, num_dropped
        )  # (B, atoms)

    def critic_loss(quantiles: jax.Array, atoms: jax.Array) -> jax.Array:
        per_critic = jax.vmap(jax.vmap(targets.quantile_huber_loss, in_axes=(0, 0)), in_axes=(0, None))
        return jnp.sum(jnp.mean(per_critic(quantiles, atoms), axis=1))

    def actor_value(quantiles: jax.Array) -> jax.Array:
        return quantiles.mean(axis=(0, 2))  # the mean of every critic's quantiles

    return make_squashed_gaussian_agent(
        config, observation_space, action_space, critic, soft_target, critic_loss, actor_value, devices
    )
