"""The student network of the maze runners: minimax's gridworld actor-critic, feed-forward or recurrent.

minimax's maze student (``models/maze/gridworld_models.py``): a 3x3 convolution with 16 filters
over the egocentric image, an embedding of the direction, an LSTM of 256 units, and actor and
critic heads of 32 units. Here it is two flax modules that
:func:`lamella.agents.feedforward_actor_critic` and :func:`lamella.agents.recurrent_actor_critic`
turn into an :class:`lamella.agents.ActorCritic`, so lamella-agents' rollout and PPO update
train it unchanged. Observations are the AMaze dict ``{"image": uint8 (V, V, 3), "agent_dir":
int32 ()}`` with any leading axes; the image is divided by 10 (minimax's ``normalize_obs``).

The same modules are PAIRED's teacher network (minimax's ``default_teacher_cnn``: 128 filters,
an embedding of the teacher's step, the noise vector, an LSTM of 256 units) with
``scalar_key="time"`` over :class:`lamella.envs.maze.AMazeTeacher`'s observations.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.distributions import ActionHead
from lamella.agents.networks import RecurrentCore, orthogonal, zero_carry

__all__ = ["GridworldEncoder", "GridworldNet", "RecurrentGridworldNet"]


class GridworldEncoder(nn.Module):
    """Image and an integer scalar to one feature vector: conv 3x3 (``conv_filters``), ReLU,
    flatten, concatenated with a learned ``direction_features``-wide embedding of
    ``obs[scalar_key]`` (one of ``num_scalars`` values) and with ``obs["noise"]`` when present.

    The student's scalar is its direction (``"agent_dir"``, 4 values); the teacher's
    (:class:`lamella.envs.maze.AMazeTeacher`) is its step (``"time"``, ``n_walls + 3`` values),
    and its observation carries the noise vector (minimax's teacher network).
    """

    conv_filters: int = 16
    direction_features: int = 5
    scalar_key: str = "agent_dir"
    num_scalars: int = 4

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        image = jnp.asarray(obs["image"], jnp.float32) / 10.0
        lead = image.shape[:-3]
        x = image.reshape((-1, *image.shape[-3:]))
        x = nn.Conv(self.conv_filters, (3, 3), padding="VALID", kernel_init=orthogonal(np.sqrt(2)))(x)
        x = nn.relu(x).reshape((*lead, -1))
        scalar = jax.nn.one_hot(jnp.asarray(obs[self.scalar_key]).astype(jnp.int32), self.num_scalars)
        scalar = nn.Dense(self.direction_features, kernel_init=orthogonal(1.0))(scalar)
        parts = [x, scalar]
        if "noise" in obs:
            parts.append(jnp.asarray(obs["noise"], jnp.float32).reshape((*lead, -1)))
        return jnp.concatenate(parts, axis=-1)


def _heads(x: jax.Array, action_space: Any, hidden_size: int) -> tuple[Any, jax.Array]:
    actor = nn.relu(nn.Dense(hidden_size, kernel_init=orthogonal(np.sqrt(2)))(x))
    dist = ActionHead(action_space)(actor)
    critic = nn.relu(nn.Dense(hidden_size, kernel_init=orthogonal(np.sqrt(2)))(x))
    return dist, nn.Dense(1, kernel_init=orthogonal(1.0))(critic)[..., 0]


class GridworldNet(nn.Module):
    """Feed-forward: encoder, a ``torso_size`` ReLU layer, heads. ``__call__(obs) -> (dist, value)``.

    ``scalar_key``, ``num_scalars``, ``scalar_features``: the encoder's scalar input (the
    student's direction by default; the teacher's step, see :class:`GridworldEncoder`)."""

    action_space: Any
    conv_filters: int = 16
    torso_size: int = 64
    hidden_size: int = 32
    scalar_key: str = "agent_dir"
    num_scalars: int = 4
    scalar_features: int = 5

    @nn.compact
    def __call__(self, obs: Any) -> tuple[Any, jax.Array]:
        x = GridworldEncoder(self.conv_filters, self.scalar_features, self.scalar_key, self.num_scalars)(obs)
        x = nn.relu(nn.Dense(self.torso_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        return _heads(x, self.action_space, self.hidden_size)


class RecurrentGridworldNet(nn.Module):
    """minimax's student: encoder, an LSTM (or GRU) core reset at episode starts, heads.

    ``__call__(carry, (obs, reset)) -> (carry, (dist, value))`` over time-major inputs.
    """

    action_space: Any
    conv_filters: int = 16
    cell: str = "lstm"
    rnn_hidden_size: int = 256
    hidden_size: int = 32
    scalar_key: str = "agent_dir"
    num_scalars: int = 4
    scalar_features: int = 5

    @nn.compact
    def __call__(self, carry: Any, inputs: tuple[Any, jax.Array]) -> tuple[Any, tuple[Any, jax.Array]]:
        obs, reset = inputs
        x = GridworldEncoder(self.conv_filters, self.scalar_features, self.scalar_key, self.num_scalars)(obs)
        carry, x = RecurrentCore(self.cell, self.rnn_hidden_size)(carry, (x, reset))
        return carry, _heads(x, self.action_space, self.hidden_size)

    def initial_memory(self, batch_size: int) -> Any:
        """Zero memory for ``batch_size`` envs (call on the unbound module)."""
        return zero_carry(self.cell, batch_size, self.rnn_hidden_size)
