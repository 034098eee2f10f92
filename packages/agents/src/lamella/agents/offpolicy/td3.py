"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing, delayed actor updates.

DDPG (:mod:`lamella.agents.offpolicy.ddpg`) is the same core with one critic, no smoothing and
no delay.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from lamella.agents.config import is_swept, unused_settings_of
from lamella.agents.devices import DeviceAxis
from lamella.agents.offpolicy import targets
from lamella.agents.offpolicy.common import (
    ActionScaler,
    Batch,
    ContinuousCritic,
    DeterministicActor,
    apply_fn,
    device_block,
    flatten_observation,
    obs_example_input,
    polyak,
)
from lamella.agents.protocol import Agent
from lamella.envs import spaces

__all__ = ["DeterministicTrainState", "TD3Config", "make_deterministic_actor_critic", "make_td3"]


@dataclasses.dataclass(frozen=True)
class TD3Config:
    """TD3's learning settings. Noise scales are in units of half the action range.

    Attributes:
        gamma: discount.
        actor_learning_rate, critic_learning_rate: Adam step sizes.
        tau: Polyak rate of the target networks.
        hidden_sizes: widths of the actor's and each critic's MLP.
        activation: activation name.
        num_critics: 2 (clipped double Q).
        exploration_noise: std of the Gaussian noise added to actions while training.
        policy_noise: std of the target policy smoothing noise.
        noise_clip: bound on the smoothing noise.
        policy_frequency: actor and target updates every this many critic updates.
    """

    gamma: float = 0.99
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    exploration_noise: float = 0.1
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    policy_frequency: int = 2

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: ``noise_clip`` when ``policy_noise`` is 0 (no target
        policy smoothing; a sweep's traced ``policy_noise`` is left alone)."""
        if is_swept(self.policy_noise) or self.policy_noise != 0:
            return {}
        return unused_settings_of(
            self,
            {"noise_clip": "bounds the target policy smoothing noise"},
            f"policy_noise={self.policy_noise} adds no target policy smoothing",
            "set policy_noise > 0",
        )


class DeterministicTrainState(struct.PyTreeNode):
    """What TD3's and DDPG's learning changes (all arrays)."""

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt_state: Any
    critic_opt_state: Any
    updates: jax.Array  # int32 ()


def make_td3(
    config: TD3Config,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """TD3 as an Agent for a 1-D Box action space (``devices``: see
    :func:`make_deterministic_actor_critic`)."""
    return make_deterministic_actor_critic(config, observation_space, action_space, devices)


def make_deterministic_actor_critic(
    config: Any,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """The deterministic actor-critic core of TD3 and DDPG, configured by ``config``'s fields.

    ``devices``: the mesh axis when the loop's envs are split over devices; ``update`` then
    takes the whole sampled batch, learns from this device's equal block (its rows of the
    whole batch's smoothing noise) and averages gradients and metrics over the devices.
    """
    devices = devices or DeviceAxis()
    if config.num_critics < 1 or config.policy_frequency < 1:
        raise ValueError(
            f"num_critics ({config.num_critics}) and policy_frequency ({config.policy_frequency}) must be >= 1."
        )
    if not is_swept(config.tau) and not 0.0 < config.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {config.tau}.")
    scaler = ActionScaler(action_space)
    actor = DeterministicActor(scaler.dim, tuple(config.hidden_sizes), config.activation)
    critic = ContinuousCritic(tuple(config.hidden_sizes), config.activation, config.num_critics)
    actor_apply, critic_apply = apply_fn(actor), apply_fn(critic)
    actor_opt = optax.flatten(optax.adam(config.actor_learning_rate))
    critic_opt = optax.flatten(optax.adam(config.critic_learning_rate))
    example = obs_example_input(observation_space)

    def init(key: jax.Array, obs_example: Any = None) -> tuple[DeterministicTrainState, tuple[()]]:
        key_actor, key_critic = jax.random.split(key)
        actor_params = actor.init(key_actor, example)
        critic_params = critic.init(key_critic, example, jnp.zeros((1, scaler.dim), jnp.float32))
        state = DeterministicTrainState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_actor_params=actor_params,
            target_critic_params=critic_params,
            actor_opt_state=actor_opt.init(actor_params),
            critic_opt_state=critic_opt.init(critic_params),
            updates=jnp.zeros((), jnp.int32),
        )
        return state, ()

    def policy(
        key: jax.Array, train_state: DeterministicTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, DeterministicTrainState, Any]:
        unit = actor_apply(train_state.actor_params, flatten_observation(obs))
        if not eval:
            unit = jnp.clip(unit + config.exploration_noise * jax.random.normal(key, unit.shape), -1.0, 1.0)
        return scaler.to_env(unit), train_state, memory

    def critic_loss(critic_params: Any, obs: jax.Array, action: jax.Array, target: jax.Array) -> jax.Array:
        q = critic_apply(critic_params, obs, action)[..., 0]
        return 0.5 * jnp.sum(jnp.mean(jnp.square(q - target[None]), axis=1))

    def actor_loss(actor_params: Any, critic_params: Any, obs: jax.Array) -> jax.Array:
        q = critic_apply(critic_params, obs, actor_apply(actor_params, obs))[..., 0]
        return -jnp.mean(q[0])

    def update(
        batch: Batch, train_state: DeterministicTrainState, memory: Any
    ) -> tuple[DeterministicTrainState, Any, dict[str, jax.Array]]:
        batch = device_block(batch, devices)
        obs, next_obs = flatten_observation(batch.obs), flatten_observation(batch.next_obs)
        next_action = actor_apply(train_state.target_actor_params, next_obs)
        if config.policy_noise > 0:
            whole = (next_action.shape[0] * devices.size, *next_action.shape[1:])
            noise = config.policy_noise * devices.take(jax.random.normal(batch.key, whole))
            noise = jnp.clip(noise, -config.noise_clip, config.noise_clip)
            next_action = jnp.clip(next_action + noise, -1.0, 1.0)
        q_next = critic_apply(train_state.target_critic_params, next_obs, next_action)[..., 0]
        target = jax.vmap(targets.clipped_double_q_target, in_axes=(0, 0, 1))(
            batch.reward.astype(jnp.float32), batch.discount.astype(jnp.float32), q_next
        )
        target = jax.lax.stop_gradient(target)
        action = scaler.to_unit(batch.action)
        c_loss, c_grads = devices.mean(
            jax.value_and_grad(critic_loss)(train_state.critic_params, obs, action, target)
        )
        c_updates, critic_opt_state = critic_opt.update(c_grads, train_state.critic_opt_state)
        critic_params = optax.apply_updates(train_state.critic_params, c_updates)
        state = train_state.replace(critic_params=critic_params, critic_opt_state=critic_opt_state)

        def actor_and_targets(state: DeterministicTrainState) -> tuple[DeterministicTrainState, jax.Array]:
            a_loss, a_grads = devices.mean(
                jax.value_and_grad(actor_loss)(state.actor_params, critic_params, obs)
            )
            a_updates, actor_opt_state = actor_opt.update(a_grads, state.actor_opt_state)
            actor_params = optax.apply_updates(state.actor_params, a_updates)
            return state.replace(
                actor_params=actor_params,
                actor_opt_state=actor_opt_state,
                target_actor_params=polyak(state.target_actor_params, actor_params, config.tau),
                target_critic_params=polyak(state.target_critic_params, critic_params, config.tau),
            ), a_loss

        if config.policy_frequency == 1:
            state, a_loss = actor_and_targets(state)
        else:
            state, a_loss = jax.lax.cond(
                train_state.updates % config.policy_frequency == 0,
                actor_and_targets,
                lambda s: (s, jnp.zeros(())),
                state,
            )
        state = state.replace(updates=train_state.updates + 1)
        metrics = {
            "loss": c_loss + a_loss,
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "q_target": devices.mean(jnp.mean(target)),
        }
        return state, memory, metrics

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())
