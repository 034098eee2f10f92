"""TQC (Kuznetsov et al. 2020): SAC with distributional critics and truncated mixture targets.

Each of ``num_critics`` critics predicts ``num_quantiles`` quantiles of the return. The target
pools all critics' quantiles at the next state, drops the ``drop_per_critic * num_critics``
largest (control of overestimation) and regresses every critic onto the rest with the
quantile Huber loss. Actor and temperature as in SAC, with Q the mean of all quantiles.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import (
    ActionScaler,
    Batch,
    ContinuousCritic,
    SquashedGaussianActor,
    flatten_observation,
    obs_example_input,
    polyak,
    squashed_gaussian_sample,
)
from lamella.agents.offpolicy.sac import SACTrainState, step_actor_and_temperature
from lamella.agents.protocol import Agent
from lamella.agents.runner import hashed_keys
from lamella.envs import spaces

__all__ = ["TQCConfig", "make_tqc"]


@dataclasses.dataclass(frozen=True)
class TQCConfig:
    """TQC's learning settings (SAC's, plus the quantile critics').

    Attributes:
        num_critics: distributional critics (5 in the paper; 2 is cheaper and works on small tasks).
        num_quantiles: quantiles per critic (25 in the paper).
        drop_per_critic: top quantiles dropped per critic from the pooled target (2 in the paper).
        Others: as :class:`~lamella.agents.offpolicy.sac.SACConfig`.
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


def make_tqc(config: TQCConfig, observation_space: spaces.Space, action_space: spaces.Space) -> Agent:
    """TQC as an Agent for a 1-D Box action space."""
    if config.num_critics < 1 or config.num_quantiles < 1:
        raise ValueError("TQC needs num_critics >= 1 and num_quantiles >= 1.")
    num_dropped = config.drop_per_critic * config.num_critics
    if not 0 <= num_dropped < config.num_critics * config.num_quantiles:
        raise ValueError(
            f"TQC: drop_per_critic ({config.drop_per_critic}) must be in [0, num_quantiles) "
            f"({config.num_quantiles})."
        )
    scaler = ActionScaler(action_space)
    actor = SquashedGaussianActor(scaler.dim, tuple(config.hidden_sizes), config.activation)
    critic = ContinuousCritic(
        tuple(config.hidden_sizes), config.activation, config.num_critics, config.num_quantiles
    )
    actor_opt = optax.flatten(optax.adam(config.actor_learning_rate))
    critic_opt = optax.flatten(optax.adam(config.critic_learning_rate))
    alpha_opt = optax.adam(config.alpha_learning_rate)
    target_entropy = -float(config.target_entropy_scale) * scaler.dim
    example = obs_example_input(observation_space)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[SACTrainState, tuple[()]]:
        key_actor, key_critic = jax.random.split(key)
        actor_params = actor.init(key_actor, example)
        critic_params = critic.init(key_critic, example, jnp.zeros((1, scaler.dim), jnp.float32))
        log_alpha = jnp.asarray(np.log(config.init_alpha), jnp.float32)
        return SACTrainState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_critic_params=critic_params,
            log_alpha=log_alpha,
            actor_opt_state=actor_opt.init(actor_params),
            critic_opt_state=critic_opt.init(critic_params),
            alpha_opt_state=alpha_opt.init(log_alpha),
            updates=jnp.zeros((), jnp.int32),
        ), ()

    def policy(
        key: jax.Array, train_state: SACTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, SACTrainState, Any]:
        mean, log_std = actor.apply(train_state.actor_params, flatten_observation(obs))
        unit = jnp.tanh(mean) if eval else squashed_gaussian_sample(key, mean, log_std)[0]
        return scaler.to_env(unit), train_state, memory

    def critic_loss(critic_params: Any, obs: jax.Array, action: jax.Array, atoms: jax.Array) -> jax.Array:
        quantiles = critic.apply(critic_params, obs, action)  # (critics, B, quantiles)
        per_critic = jax.vmap(jax.vmap(targets.quantile_huber_loss, in_axes=(0, 0)), in_axes=(0, None))
        return jnp.sum(jnp.mean(per_critic(quantiles, atoms), axis=1))

    def actor_loss(
        actor_params: Any, critic_params: Any, obs: jax.Array, alpha: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        mean, log_std = actor.apply(actor_params, obs)
        action, log_prob = squashed_gaussian_sample(key, mean, log_std)
        q = critic.apply(critic_params, obs, action).mean(axis=(0, 2))
        return jnp.mean(alpha * log_prob - q), log_prob

    def update(
        batch: Batch, train_state: SACTrainState, memory: Any
    ) -> tuple[SACTrainState, Any, dict[str, jax.Array]]:
        key_next, key_actor = hashed_keys(batch.key, (2,))
        alpha = jnp.exp(train_state.log_alpha)
        obs, next_obs = flatten_observation(batch.obs), flatten_observation(batch.next_obs)
        mean, log_std = actor.apply(train_state.actor_params, next_obs)
        next_action, next_log_prob = squashed_gaussian_sample(key_next, mean, log_std)
        quantiles_next = critic.apply(train_state.target_critic_params, next_obs, next_action)
        atoms = jax.vmap(targets.tqc_target, in_axes=(0, 0, 1, 0, None, None))(
            batch.reward.astype(jnp.float32),
            batch.discount.astype(jnp.float32),
            quantiles_next,
            next_log_prob,
            alpha,
            num_dropped,
        )
        atoms = jax.lax.stop_gradient(atoms)
        c_loss, c_grads = jax.value_and_grad(critic_loss)(
            train_state.critic_params, obs, scaler.to_unit(batch.action), atoms
        )
        c_updates, critic_opt_state = critic_opt.update(c_grads, train_state.critic_opt_state)
        critic_params = optax.apply_updates(train_state.critic_params, c_updates)
        (a_loss, log_prob), a_grads = jax.value_and_grad(actor_loss, has_aux=True)(
            train_state.actor_params, critic_params, obs, alpha, key_actor
        )
        alpha_grad = -jnp.mean(jax.lax.stop_gradient(log_prob + target_entropy))
        state = step_actor_and_temperature(
            train_state, a_grads, alpha_grad if config.autotune_alpha else None, actor_opt, alpha_opt
        ).replace(
            critic_params=critic_params,
            target_critic_params=polyak(train_state.target_critic_params, critic_params, config.tau),
            critic_opt_state=critic_opt_state,
            updates=train_state.updates + 1,
        )
        log_alpha = state.log_alpha
        metrics = {
            "loss": c_loss + a_loss,
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "alpha": jnp.exp(log_alpha),
            "entropy": -jnp.mean(log_prob),
            "q_target": jnp.mean(atoms),
        }
        return state, memory, metrics

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())
