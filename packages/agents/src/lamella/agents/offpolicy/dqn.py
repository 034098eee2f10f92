"""DQN (Mnih et al. 2015) with the usual improvements: double Q-learning (van Hasselt et al.
2016), a dueling head (Wang et al. 2016) and n-step targets (through the batch's discount).

Exploration is epsilon-greedy with a linear schedule over the env steps the policy has acted
(counted in the train state, so the schedule is part of the checkpointed state).

Action masks: a dict observation holding ``"action_mask"`` (bool ``(..., num_actions)``, as
lamella-marl's ``MultiAgentObservation`` gives it) restricts the greedy choice, the random
exploratory action and the max (double DQN: the argmax) of the target to legal actions; the mask
is not fed to the network. A row with no legal action counts as all legal.
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
    Batch,
    QNetwork,
    apply_fn,
    device_block,
    flatten_observation,
    obs_example_input,
    polyak,
    split_action_mask,
    without_action_mask,
)
from lamella.agents.protocol import Agent
from lamella.agents.runner import hashed_keys
from lamella.envs import random as fast_random
from lamella.envs import spaces

__all__ = ["DQNConfig", "DQNTrainState", "make_dqn", "masked_q_values"]


def masked_q_values(q: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``q`` with illegal actions at ``-inf`` (``mask`` bool, the shape of ``q``; None: all
    legal). A row with no legal action is left whole, so its max stays finite."""
    if mask is None:
        return q
    legal = jnp.logical_or(mask, ~jnp.any(mask, axis=-1, keepdims=True))
    return jnp.where(legal, q, -jnp.inf)


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN's learning settings.

    Attributes:
        gamma: discount (an n-step batch's discount is ``gamma ** n``).
        learning_rate: Adam step size.
        hidden_sizes: MLP widths.
        activation: activation name.
        double: double Q-learning targets.
        dueling: dueling value/advantage head.
        huber: Huber loss (else squared error).
        max_grad_norm: global gradient-norm clip.
        target_update_period: hard copy to the target network every this many updates
            (used when ``tau`` is 1; set together with ``tau < 1`` on the command line, it is
            refused).
        tau: Polyak rate of the target network at every update (< 1 replaces hard copies).
        epsilon_start, epsilon_end: exploration rate at the first and after
            ``exploration_steps`` acted env steps (linear in between).
        exploration_steps: env steps of the epsilon decay (over all parallel envs).
    """

    gamma: float = 0.99
    learning_rate: float = 1e-3
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    double: bool = True
    dueling: bool = False
    huber: bool = True
    max_grad_norm: float = 10.0
    target_update_period: int = 500
    tau: float = 1.0
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_steps: int = 10_000

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}`` for this config's mode: ``target_update_period`` when
        ``tau < 1`` (a soft update after every update; a sweep's traced tau may be 1 for some
        members). ``lamella train`` refuses such a field set on the command line
        (:func:`~lamella.agents.config.check_unused_settings`)."""
        if is_swept(self.tau) or float(self.tau) >= 1.0:
            return {}
        return unused_settings_of(
            self,
            {"target_update_period": "is the period of the hard target copies"},
            f"tau={self.tau} (< 1) updates the target network softly after every update",
            "set tau=1.0 for hard copies",
        )


class DQNTrainState(struct.PyTreeNode):
    """What DQN's learning changes (all arrays)."""

    params: Any
    target_params: Any
    opt_state: Any
    updates: jax.Array  # int32 (): gradient steps taken
    acted_steps: jax.Array  # int32 (): env steps acted by the (non-greedy) policy


def make_dqn(
    config: DQNConfig,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> Agent:
    """DQN as an Agent for a Discrete action space.

    ``devices``: the mesh axis when the loop's envs are split over devices; ``update`` then
    takes the whole sampled batch (the same on every device), computes the loss on this
    device's equal block and averages gradients and metrics over the devices.
    """
    devices = devices or DeviceAxis()
    if not isinstance(action_space, spaces.Discrete):
        raise TypeError(
            f"DQN needs a Discrete action space, got {action_space!r}; use SAC/TD3/TQC for Box actions."
        )
    if config.target_update_period < 1 or config.exploration_steps < 1:
        raise ValueError("DQN: target_update_period and exploration_steps must be >= 1.")
    if not is_swept(config.tau) and not 0.0 < config.tau <= 1.0:
        raise ValueError(f"DQN: tau must be in (0, 1], got {config.tau}.")
    num_actions = int(action_space.n)
    network = QNetwork(num_actions, tuple(config.hidden_sizes), config.activation, config.dueling)
    network_apply = apply_fn(network)
    optimizer = optax.flatten(
        optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate))
    )
    example = obs_example_input(without_action_mask(observation_space))

    def init(key: jax.Array, obs_example: Any = None) -> tuple[DQNTrainState, tuple[()]]:
        params = network.init(key, example)
        zero = jnp.zeros((), jnp.int32)
        return DQNTrainState(params, params, optimizer.init(params), zero, zero), ()

    def epsilon(acted_steps: jax.Array) -> jax.Array:
        fraction = jnp.minimum(acted_steps.astype(jnp.float32) / config.exploration_steps, 1.0)
        return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)

    def policy(
        key: jax.Array, train_state: DQNTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, DQNTrainState, Any]:
        obs, mask = split_action_mask(obs)
        q = masked_q_values(network_apply(train_state.params, flatten_observation(obs)), mask)
        greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
        if eval:
            return greedy, train_state, memory
        key_explore, key_action = hashed_keys(key, (2,))
        batch = q.shape[0]
        explore = fast_random.uniform(key_explore, (batch,), vector=True) < epsilon(train_state.acted_steps)
        if mask is None:
            random_action = fast_random.randint(key_action, (batch,), 0, num_actions)
        else:
            # Uniform over the legal actions: the largest of uniform draws where legal.
            draws = fast_random.uniform(key_action, q.shape, vector=True)
            random_action = jnp.argmax(masked_q_values(draws, mask), axis=-1).astype(jnp.int32)
        action = jnp.where(explore, random_action, greedy)
        return action, train_state.replace(acted_steps=train_state.acted_steps + batch), memory

    def loss_fn(params: Any, obs: jax.Array, action: jax.Array, target: jax.Array) -> jax.Array:
        q = network_apply(params, obs)
        q_taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        error = q_taken - target
        return jnp.mean(targets.huber_loss(error) if config.huber else 0.5 * jnp.square(error))

    def update(
        batch: Batch, train_state: DQNTrainState, memory: Any
    ) -> tuple[DQNTrainState, Any, dict[str, jax.Array]]:
        batch = device_block(batch, devices)
        next_obs, next_mask = split_action_mask(batch.next_obs)
        obs, next_obs = flatten_observation(split_action_mask(batch.obs)[0]), flatten_observation(next_obs)
        reward, discount = batch.reward.astype(jnp.float32), batch.discount.astype(jnp.float32)
        q_next_target = network_apply(train_state.target_params, next_obs)
        if config.double:
            # The online network picks among the legal next actions; the target network values it.
            q_next_online = masked_q_values(network_apply(train_state.params, next_obs), next_mask)
            target = jax.vmap(targets.double_q_learning_target)(
                reward, discount, q_next_target, q_next_online
            )
        else:
            target = jax.vmap(targets.q_learning_target)(
                reward, discount, masked_q_values(q_next_target, next_mask)
            )
        target = jax.lax.stop_gradient(target)
        action = batch.action.astype(jnp.int32).reshape(-1)
        loss, grads = devices.mean(jax.value_and_grad(loss_fn)(train_state.params, obs, action, target))
        updates, opt_state = optimizer.update(grads, train_state.opt_state, train_state.params)
        params = optax.apply_updates(train_state.params, updates)
        count = train_state.updates + 1
        copy = count % config.target_update_period == 0
        hard = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, train_state.target_params)
        if is_swept(config.tau):  # a sweep's tau: each member takes its own rule (both computed)
            soft = polyak(train_state.target_params, params, config.tau)
            target_params = jax.tree.map(lambda s, h: jnp.where(config.tau < 1.0, s, h), soft, hard)
        elif config.tau < 1.0:
            target_params = polyak(train_state.target_params, params, config.tau)
        else:
            target_params = hard
        state = train_state.replace(
            params=params, target_params=target_params, opt_state=opt_state, updates=count
        )
        metrics = {
            "loss": loss,
            "q_target": devices.mean(jnp.mean(target)),
            "epsilon": epsilon(train_state.acted_steps),
        }
        return state, memory, metrics

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())
